#!/usr/bin/env bash
# Builds the real peers of a Kubernetes node from their Go modules, at the versions
# pinned by the go.mod/go.sum files under scripts/kube-peers/, caches them, and prints
# the directory that holds them (one line on stdout, nothing else; progress goes to
# stderr):
#   etcd, kube-apiserver, kubelet, kubectl, containerd, containerd-shim-runc-v2, ctr,
#   crictl, the reference CNI plugins (bridge, ptp, loopback, host-local, portmap), and
#   pause.tar, an OCI image holding one static `pause` binary (the node's sandbox
#   image, and its test pods' container image).
# runc comes from Debian (scripts/test.sh and scripts/kube-node.sh install it).
#
# Why build modules of our own: `go install pkg@version` refuses modules with replace
# lines, and Kubernetes and etcd carry them; Kubernetes' staging modules are pinned by
# our replace lines instead. Each peer is one `go build` of all its commands
# (-trimpath, statically linked), so shared packages compile once.
#
# The cache: $WASM_IPAM_PEERS_CACHE, else ~/.cache/wasm-ipam/kube-peers, one directory
# per key (the pins, this script and the Go version), outside target/ so `cargo clean`
# keeps it. A second run with the same key only checks the files are there.
#
#   dir=$(scripts/kube-peers.sh)          # build if needed, print the directory
set -euo pipefail
cd "$(dirname "$0")/.."
pins=scripts/kube-peers

# The versions, each also in its go.mod (the build fails if they disagree).
kubernetes_version=v1.36.3
etcd_version=v3.6.16
containerd_version=v2.2.9
cni_plugins_version=v1.10.0
cri_tools_version=v1.37.0
# The image containerd runs as every sandbox (its default name, so nothing is pulled).
pause_image=registry.k8s.io/pause:3.10.1

# The project's pinned Go (scripts/go-toolchain.sh, which installs it when missing), so
# the suite, the bench and a shell of one's own build the same peers into one entry.
source scripts/go-toolchain.sh >&2
go_version=$(GOTOOLCHAIN=local go env GOVERSION)
key=$( { echo "$go_version"; cat "$0"; find "$pins" -type f | LC_ALL=C sort | xargs cat; } | sha256sum | cut -c1-16)
cache_root=${WASM_IPAM_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wasm-ipam/kube-peers}
out=$cache_root/$key
commands=(etcd kube-apiserver kubelet kubectl containerd containerd-shim-runc-v2 ctr crictl
  bridge ptp loopback host-local portmap pause.tar)

complete() {
  [[ -f $out/.complete ]] || return 1
  local c
  for c in "${commands[@]}"; do [[ -s $out/$c ]] || return 1; done
}
if complete; then
  echo "$out"
  exit 0
fi

began=$SECONDS
say() { echo "kube-peers: $*" >&2; }
say "building into $out with $go_version (key $key)"
mkdir -p "$out"
rm -f "$out/.complete"
# The build dirs: copies of our pins under target/, so the go command never writes
# into the source tree. GOFLAGS' -mod=readonly: the committed go.sum must already hold
# every module (a pin changed without `go mod tidy` fails here, not silently).
build_root=$PWD/target/kube-peers-build
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"

# go_build NAME LDFLAGS PACKAGE...: builds PACKAGEs of the pinned module NAME into $out.
go_build() {
  local name=$1 ldflags=$2 start=$SECONDS
  shift 2
  mkdir -p "$build_root/$name"
  cp "$pins/$name/go.mod" "$pins/$name/go.sum" "$build_root/$name/"
  [[ -f $pins/$name/main.go ]] && cp "$pins/$name/main.go" "$build_root/$name/"
  (cd "$build_root/$name" && go build -trimpath -ldflags="-s -w $ldflags" -o "$out/" "$@")
  say "$name built in $((SECONDS - start)) s"
}

pinned() { # pinned NAME MODULE VERSION: the go.mod of NAME requires MODULE at VERSION
  grep -Eq "^[[:space:]]*(require[[:space:]]+)?$2 $3( |$)" "$pins/$1/go.mod" ||
    { say "$pins/$1/go.mod does not pin $2 $3"; exit 1; }
}
pinned kubernetes k8s.io/kubernetes "$kubernetes_version"
pinned etcd go.etcd.io/etcd/server/v3 "$etcd_version"
pinned containerd github.com/containerd/containerd/v2 "$containerd_version"
pinned cni-plugins github.com/containernetworking/plugins "$cni_plugins_version"
pinned cri-tools sigs.k8s.io/cri-tools "$cri_tools_version"

# Kubernetes reads its version from these at link time; kubelet reports it in the
# Node's status and kubectl compares it with the apiserver's.
minor=${kubernetes_version#v1.}
minor=${minor%%.*}
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$kubernetes_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
go_build kubernetes "$k8s_ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
go_build etcd "" go.etcd.io/etcd/server/v3
# go names a command after its path's last element before a major version: "server".
mv -f "$out/server" "$out/etcd"
go_build containerd "-X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
go_build cni-plugins "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_plugins_version" \
  github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/main/ptp \
  github.com/containernetworking/plugins/plugins/main/loopback \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/meta/portmap
go_build cri-tools "-X sigs.k8s.io/cri-tools/pkg/version.Version=$cri_tools_version" \
  sigs.k8s.io/cri-tools/cmd/crictl
go_build pause "" .

# pause.tar: an OCI image layout (docker-archive free), as `ctr images import` takes it.
image_dir=$(mktemp -d)
trap 'rm -rf "$image_dir"' EXIT
mkdir -p "$image_dir/rootfs" "$image_dir/layout/blobs/sha256"
cp "$out/pause" "$image_dir/rootfs/pause"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$image_dir/rootfs" -cf "$image_dir/layer.tar" pause
blob() { # blob FILE: stores FILE as a blob, prints "sha256:HEX SIZE"
  local sum size
  sum=$(sha256sum "$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  cp "$1" "$image_dir/layout/blobs/sha256/$sum"
  echo "sha256:$sum $size"
}
read -r layer_digest layer_size < <(blob "$image_dir/layer.tar")
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
  "$(go env GOARCH)" "$layer_digest" >"$image_dir/config.json"
read -r config_digest config_size < <(blob "$image_dir/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
  "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$image_dir/manifest.json"
read -r manifest_digest manifest_size < <(blob "$image_dir/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest_digest" "$manifest_size" "$(go env GOARCH)" "$pause_image" "${pause_image##*:}" >"$image_dir/layout/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$image_dir/layout/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$image_dir/layout" -cf "$out/pause.tar" .

touch "$out/.complete"
complete || { say "a command is missing from $out"; exit 1; }
say "built in $((SECONDS - began)) s"
echo "$out"
