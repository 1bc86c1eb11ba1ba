module wasm-ipam.dev/static-go

go 1.27

require wasm-ipam.dev/guest-go v0.0.0

replace wasm-ipam.dev/guest-go => ../../guest-go
