//! The packaged build links with `--symbol-ordering-file=host/hot-text.txt`
//! (docs/install.md, bench/run.sh). Cargo does not see files named only in link
//! arguments, so a regenerated list would not relink the binary; this makes it.
fn main() {
    println!("cargo:rerun-if-changed=hot-text.txt");
}
