//! The pre-fix baseline: an IPAM DEL whose budget starts before it takes the
//! host-wide lock, as Calico's DEL once did (see `wasm_ipam_bench::model`).

fn main() -> std::process::ExitCode {
    wasm_ipam_bench::model::main(wasm_ipam_bench::model::TimerStart::BeforeLock)
}
