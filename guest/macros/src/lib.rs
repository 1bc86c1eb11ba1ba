//! `#[wasm_ipam_guest::ipam_module]`, put on a module's `impl IpamModule for T`: it
//! records which of the trait's functions the impl writes itself, so the module can
//! tell the host which of its exports answer with the SDK's defaults
//! (`cni:ipam/capabilities`, shown by `wasm-ipam inspect`). Stable Rust cannot ask
//! whether a trait method was overridden, but the impl block's own items say it.
//!
//! It reads only the block's top-level `fn NAME`, so it needs no parser crate: the
//! compiler checks the impl itself, as written. A function a macro call inside the
//! block would define is not seen, and is reported as the SDK's default.

use proc_macro::{Delimiter, TokenStream, TokenTree};

/// Implements `ImplementedByModule` for T, the type of the `impl IpamModule for T`
/// block it is put on: `IMPLEMENTED_BY_MODULE`, the names of the functions the block
/// defines. Without it `IpamModule`'s supertrait is missing, and the compiler says to
/// put `#[ipam_module]` there.
#[proc_macro_attribute]
pub fn ipam_module(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return error("#[ipam_module] takes no arguments");
    }
    let tokens: Vec<TokenTree> = item.into_iter().collect();
    let is_impl = tokens
        .iter()
        .any(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "impl"));
    let body = match tokens.last() {
        Some(TokenTree::Group(g)) if is_impl && g.delimiter() == Delimiter::Brace => g.clone(),
        _ => return error("#[ipam_module] goes on an `impl IpamModule for T { ... }` block"),
    };
    let items: Vec<TokenTree> = body.stream().into_iter().collect();
    let names: Vec<String> = items
        .windows(2)
        .filter_map(|pair| match pair {
            [TokenTree::Ident(keyword), TokenTree::Ident(name)] if keyword.to_string() == "fn" => {
                Some(format!("{:?}", name.to_string()))
            }
            _ => None,
        })
        .collect();
    // The same header with the trait named `ImplementedByModule`: `impl<G> TRAIT for
    // TYPE where ...` keeps its generics, its type and its bounds.
    let Some(impl_at) = tokens
        .iter()
        .position(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "impl"))
    else {
        return error("#[ipam_module] goes on an `impl IpamModule for T { ... }` block");
    };
    let mut trait_at = impl_at + 1;
    if matches!(tokens.get(trait_at), Some(TokenTree::Punct(p)) if p.as_char() == '<') {
        let mut depth = 0;
        for (i, t) in tokens.iter().enumerate().skip(trait_at) {
            match t {
                TokenTree::Punct(p) if p.as_char() == '<' => depth += 1,
                TokenTree::Punct(p) if p.as_char() == '>' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                trait_at = i + 1;
                break;
            }
        }
    }
    let Some(for_at) = tokens
        .iter()
        .position(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "for"))
    else {
        return error("#[ipam_module] goes on an `impl IpamModule for T { ... }` block");
    };
    let body_at = tokens.len() - 1;
    let recorded: TokenStream = format!(
        "{{ const IMPLEMENTED_BY_MODULE: &'static [&'static str] = &[{}]; }}",
        names.join(", ")
    )
    .parse()
    .expect("a constant item parses");
    let trait_path: TokenStream = "::wasm_ipam_guest::ImplementedByModule"
        .parse()
        .expect("a path parses");
    let mut out: TokenStream = tokens.iter().cloned().collect();
    out.extend(tokens[impl_at..trait_at].iter().cloned());
    out.extend(trait_path);
    out.extend(tokens[for_at..body_at].iter().cloned());
    out.extend(recorded);
    out
}

fn error(message: &str) -> TokenStream {
    format!("::core::compile_error!({message:?});")
        .parse()
        .expect("compile_error! parses")
}
