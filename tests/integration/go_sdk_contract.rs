//! The contract the Go SDK's glue implements: the canonical-ABI layout of every type
//! and function of its world, computed from `wit/ipam.wit` here and held equal to
//! `guest-go/contract.golden`, which the glue's own Go tests check it against.

use crate::harness::*;
use std::collections::BTreeMap;
use std::path::Path;
use wit_parser::abi::{AbiVariant, WasmType};
use wit_parser::{Resolve, SizeAlign, Type, TypeDefKind, WorldItem};

/// The interfaces of the contract the Go SDK implements: every one but `migrate`
/// (taking over host-local's files, which no Go vendor's module needs) and
/// `wide-usage` (exact counts past 2^64, which Go has no integer for).
const GO_INTERFACES: [&str; 10] = [
    "deadline",
    "store",
    "log",
    "readiness",
    "handler",
    "inspect",
    "nodes",
    "capabilities",
    "reservations",
    "usage",
];

/// The canonical-ABI layout of what the Go SDK's world uses, as `guest-go/contract.golden`
/// holds it: one `key = value` a line, each a figure the Go glue implements.
/// - `import|export <interface> <function> = (<params>) -> (<results>)`: the core
///   signature of each function of `deadline`, `store`, `log`, `readiness` and `handler`;
/// - `size|align <type>`, `offset <type>.<field>`, `payload <type>.<field>` (where an
///   option's value lies past its discriminant), `size <type>.<field>[]` and
///   `offset <type>.<field>[].<n>` (a list of tuples' elements);
/// - the same for each function's return area (`return <interface> <function>`).
fn contract_layout(wit: &Path) -> String {
    let mut resolve = Resolve::default();
    let package = resolve.push_file(wit).unwrap();
    let world = resolve
        .select_world(&[package], Some("ipam-module"))
        .unwrap();
    let mut sizes = SizeAlign::default();
    sizes.fill(&resolve);
    let mut lines = vec![format!("package = {}", resolve.packages[package].name)];
    let mut types: BTreeMap<String, Type> = BTreeMap::new();
    let world = &resolve.worlds[world];
    let sides = [
        ("import", &world.imports, AbiVariant::GuestImport),
        ("export", &world.exports, AbiVariant::GuestExport),
    ];
    for (side, items, variant) in sides {
        for (key, item) in items {
            let WorldItem::Interface { id, .. } = item else {
                continue;
            };
            let interface = &resolve.interfaces[*id];
            let short = interface.name.as_deref().unwrap();
            if !GO_INTERFACES.contains(&short) {
                continue;
            }
            let name = resolve.name_world_key(key);
            for (function, f) in &interface.functions {
                let signature = resolve.wasm_signature(variant, f);
                let flat = |types: &[WasmType]| {
                    let names: Vec<&str> = types
                        .iter()
                        .map(|t| match t {
                            WasmType::I64 | WasmType::PointerOrI64 => "i64",
                            WasmType::F32 => "f32",
                            WasmType::F64 => "f64",
                            _ => "i32",
                        })
                        .collect();
                    names.join(" ")
                };
                lines.push(format!(
                    "{side} {name} {function} = ({}) -> ({})",
                    flat(&signature.params),
                    flat(&signature.results)
                ));
                if signature.retptr {
                    let ty = f.result.unwrap();
                    let at = format!("return {name} {function}");
                    describe(&resolve, &sizes, &at, &ty, &mut lines, &mut types);
                }
                for param in &f.params {
                    collect_named(&resolve, &param.ty, &mut types);
                }
            }
        }
    }
    let mut described = std::collections::BTreeSet::new();
    while let Some((name, ty)) = types.iter().find(|(n, _)| !described.contains(*n)) {
        let (name, ty) = (name.clone(), *ty);
        described.insert(name.clone());
        describe(&resolve, &sizes, &name, &ty, &mut lines, &mut types);
    }
    lines.push(String::new());
    lines.join("\n")
}

/// Adds the named types `ty` refers to (records, variants, enums) to `types`.
fn collect_named(resolve: &Resolve, ty: &Type, types: &mut BTreeMap<String, Type>) {
    let Type::Id(id) = ty else { return };
    let def = &resolve.types[*id];
    if let TypeDefKind::Type(original) = &def.kind {
        // A `use`d name: the type is described once, where it is defined.
        return collect_named(resolve, original, types);
    }
    if let Some(name) = &def.name {
        types.insert(qualified(resolve, def, name), *ty);
    }
    match &def.kind {
        TypeDefKind::Record(r) => r
            .fields
            .iter()
            .for_each(|f| collect_named(resolve, &f.ty, types)),
        TypeDefKind::Tuple(t) => t
            .types
            .iter()
            .for_each(|t| collect_named(resolve, t, types)),
        TypeDefKind::List(t) | TypeDefKind::Option(t) | TypeDefKind::Type(t) => {
            collect_named(resolve, t, types)
        }
        TypeDefKind::Result(r) => {
            r.ok.iter()
                .chain(&r.err)
                .for_each(|t| collect_named(resolve, t, types))
        }
        TypeDefKind::Variant(v) => v
            .cases
            .iter()
            .filter_map(|c| c.ty.as_ref())
            .for_each(|t| collect_named(resolve, t, types)),
        _ => {}
    }
}

/// A type's name in contract.golden: bare for those of `types`, `interface.name` for
/// the others (`usage.pool-usage` and `wide-usage.pool-usage` differ).
fn qualified(resolve: &Resolve, def: &wit_parser::TypeDef, name: &str) -> String {
    match def.owner {
        wit_parser::TypeOwner::Interface(i) => match resolve.interfaces[i].name.as_deref() {
            Some("types") | None => name.to_string(),
            Some(interface) => format!("{interface}.{name}"),
        },
        _ => name.to_string(),
    }
}

/// The lines of `ty` at `at` (a type's name or a function's return area): its size
/// and alignment, and where its parts lie.
fn describe(
    resolve: &Resolve,
    sizes: &SizeAlign,
    at: &str,
    ty: &Type,
    lines: &mut Vec<String>,
    types: &mut BTreeMap<String, Type>,
) {
    lines.push(format!("size {at} = {}", sizes.size(ty).size_wasm32()));
    lines.push(format!("align {at} = {}", sizes.align(ty).align_wasm32()));
    parts(resolve, sizes, at, ty, lines);
    collect_named(resolve, ty, types);
}

fn parts(resolve: &Resolve, sizes: &SizeAlign, at: &str, ty: &Type, lines: &mut Vec<String>) {
    let Type::Id(id) = ty else { return };
    match &resolve.types[*id].kind {
        TypeDefKind::Type(t) => parts(resolve, sizes, at, t, lines),
        TypeDefKind::Record(r) => {
            let offsets = sizes.field_offsets(r.fields.iter().map(|f| &f.ty));
            for (field, (offset, ty)) in r.fields.iter().zip(offsets) {
                let at = format!("{at}.{}", field.name);
                lines.push(format!("offset {at} = {}", offset.size_wasm32()));
                inner(resolve, sizes, &at, ty, lines);
            }
        }
        _ => inner(resolve, sizes, at, ty, lines),
    }
}

/// Where the value of an option, result or variant lies, and a list of tuples'
/// element layout (named types are described on their own).
fn inner(resolve: &Resolve, sizes: &SizeAlign, at: &str, ty: &Type, lines: &mut Vec<String>) {
    let Type::Id(id) = ty else { return };
    let def = &resolve.types[*id];
    match &def.kind {
        TypeDefKind::Option(t) => {
            let payload = sizes.payload_offset(wit_parser::Int::U8, [None, Some(t)]);
            lines.push(format!("payload {at} = {}", payload.size_wasm32()));
        }
        TypeDefKind::Result(r) => {
            let payload =
                sizes.payload_offset(wit_parser::Int::U8, [r.ok.as_ref(), r.err.as_ref()]);
            lines.push(format!("payload {at} = {}", payload.size_wasm32()));
        }
        TypeDefKind::Variant(v) if def.name.is_some() => {
            let cases = v.cases.iter().map(|c| c.ty.as_ref());
            let payload = sizes.payload_offset(v.tag(), cases);
            lines.push(format!("payload {at} = {}", payload.size_wasm32()));
        }
        TypeDefKind::List(Type::Id(element)) => {
            if let TypeDefKind::Tuple(t) = &resolve.types[*element].kind {
                let element_ty = Type::Id(*element);
                lines.push(format!(
                    "size {at}[] = {}",
                    sizes.size(&element_ty).size_wasm32()
                ));
                for (n, (offset, _)) in sizes.field_offsets(&t.types).into_iter().enumerate() {
                    lines.push(format!("offset {at}[].{n} = {}", offset.size_wasm32()));
                }
            }
        }
        _ => {}
    }
}

/// The glue implements the layout of wit/ipam.wit: `guest-go/contract.golden` is what
/// wit-parser says it is, and the Go tests (below) hold the glue to that file. A change
/// to the contract fails here until the file is regenerated
/// (`WASM_IPAM_BLESS=1 cargo test --test integration go_sdk_contract::`), and then in
/// the Go tests until the glue follows.
#[test]
fn contract_golden_is_wit_ipam_as_wit_parser_lays_it_out() {
    let expected = contract_layout(&workspace().join("wit/ipam.wit"));
    let golden = workspace().join("guest-go/contract.golden");
    if std::env::var_os("WASM_IPAM_BLESS").is_some() {
        std::fs::write(&golden, &expected).unwrap();
    }
    let held = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(
        held == expected,
        "guest-go/contract.golden differs from wit/ipam.wit's layout: regenerate it (WASM_IPAM_BLESS=1) and make the Go glue follow\n--- golden\n{held}\n--- wit/ipam.wit\n{expected}"
    );
}
