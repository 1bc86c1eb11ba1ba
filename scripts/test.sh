#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, checks
# formatting and lints, then runs every unit and integration test.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2 >/dev/null
rustup component add clippy rustfmt >/dev/null 2>&1 || true

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --target wasm32-wasip2 -p wasm-ipam-guest -p host-local -p probe -- -D warnings
cargo test --workspace
