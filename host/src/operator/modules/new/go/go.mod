module {{name}}

go 1.27

require wasm-ipam.dev/guest-go v0.0.0

// The Go SDK of the wasm-ipam that made this project, copied into guest-go/ (there is
// no module proxy to fetch it from): point it elsewhere with `go mod edit -replace`.
replace wasm-ipam.dev/guest-go => {{sdk}}
