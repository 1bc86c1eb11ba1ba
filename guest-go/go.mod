module wasm-ipam.dev/guest-go

go 1.27
