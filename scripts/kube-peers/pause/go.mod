module wasm-ipam/kube-peers/pause

go 1.26.0
