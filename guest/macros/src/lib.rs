//! `#[wasm_ipam_guest::ipam_module]`, put on a module's `impl IpamModule for T`: it
//! records which of the trait's functions the impl writes itself, so the module can
//! tell the host which of its exports answer with the SDK's defaults
//! (`cni:ipam/capabilities`, shown by `wasm-ipam inspect`). Stable Rust cannot ask
//! whether a trait method was overridden, but the impl block's own items say it.
//!
//! It reads only the block's top-level `fn NAME`, so it needs no parser crate: the
//! compiler checks the impl itself, as written. A function a macro call inside the
//! block would define is not seen, and is reported as the SDK's default.

use proc_macro::{Delimiter, Group, TokenStream, TokenTree};

/// Adds `const IMPLEMENTED_BY_MODULE: &[&str]`, the names of the functions the impl
/// block defines, to the `impl IpamModule for T` block it is put on.
#[proc_macro_attribute]
pub fn ipam_module(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return error("#[ipam_module] takes no arguments");
    }
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
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
    let recorded: TokenStream = format!(
        "#[doc(hidden)] const IMPLEMENTED_BY_MODULE: &'static [&'static str] = &[{}];",
        names.join(", ")
    )
    .parse()
    .expect("a constant item parses");
    let mut stream = body.stream();
    stream.extend(recorded);
    let mut group = Group::new(Delimiter::Brace, stream);
    group.set_span(body.span());
    *tokens.last_mut().expect("checked above") = TokenTree::Group(group);
    tokens.into_iter().collect()
}

fn error(message: &str) -> TokenStream {
    format!("::core::compile_error!({message:?});")
        .parse()
        .expect("compile_error! parses")
}
