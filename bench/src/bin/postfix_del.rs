//! The control for `prefix_del`: the same DEL model with its budget starting at the
//! lock grant, showing the model fails only because of where its timer starts.

fn main() -> std::process::ExitCode {
    wasm_ipam_bench::model::main(wasm_ipam_bench::model::TimerStart::AfterLock)
}
