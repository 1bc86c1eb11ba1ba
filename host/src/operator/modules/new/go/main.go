// {{name}}: a wasm-ipam module that hands out the addresses of one range in order, one
// per attachment.
package main

import (
	"fmt"
	"net/netip"
	"strings"

	ipam "wasm-ipam.dev/guest-go"
)

// rangeConf is the netconf's `ipam` keys this module reads (the host reads its own
// beside them).
type rangeConf struct {
	Start     netip.Addr `json:"start"`
	End       netip.Addr `json:"end"`
	PrefixLen int        `json:"prefixLen"`
	// Namespaces are the pods' namespaces the range serves; every namespace when nil.
	Namespaces []string `json:"namespaces"`
}

// serves refuses a pod of a namespace the range does not serve. The runtime names the
// pod in CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME), as kubelet's runtimes do.
func (r rangeConf) serves(req *ipam.Request) *ipam.Error {
	if r.Namespaces == nil {
		return nil
	}
	namespace, _ := req.Arg("K8S_POD_NAMESPACE")
	for _, n := range r.Namespaces {
		if n == namespace {
			return nil
		}
	}
	return ipam.NewError(ipam.CodeModuleSpecific, "the range serves the namespaces %q, not %q", r.Namespaces, namespace)
}

func (r rangeConf) addresses() []netip.Addr {
	var out []netip.Addr
	for ip := r.Start; ip.IsValid() && ip.Compare(r.End) <= 0; ip = ip.Next() {
		out = append(out, ip)
	}
	return out
}

func key(ip netip.Addr) string { return "ip/" + ip.String() }

func owner(req *ipam.Request) string { return req.ContainerID + "/" + req.Ifname }

type module struct{}

func (module) Add(req *ipam.Request, store ipam.Store) (*ipam.Result, *ipam.Error) {
	var r rangeConf
	if err := req.IPAM(&r); err != nil {
		return nil, err
	}
	if err := r.serves(req); err != nil {
		return nil, err
	}
	me := owner(req)
	var free *netip.Addr
	for _, ip := range r.addresses() {
		held, ok := store.Get(key(ip))
		if ok && string(held) == me {
			// The attachment's own address again (a retried ADD).
			return result(ip, r.PrefixLen), nil
		}
		if !ok && free == nil {
			free = &ip
		}
	}
	if free == nil {
		return nil, ipam.NewError(ipam.CodeModuleSpecific, "no address left in %s-%s", r.Start, r.End)
	}
	if err := store.Put(key(*free), []byte(me)); err != nil {
		return nil, err
	}
	return result(*free, r.PrefixLen), nil
}

func result(ip netip.Addr, prefixLen int) *ipam.Result {
	return &ipam.Result{IPs: []ipam.IPConfig{{Address: fmt.Sprintf("%s/%d", ip, prefixLen)}}}
}

func (module) Del(req *ipam.Request, store ipam.Store) *ipam.Error {
	me := owner(req)
	for _, e := range store.List("ip/") {
		if string(e.Value) == me {
			if _, err := store.Delete(e.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

// Allocations is what `wasm-ipam list` shows; CHECK and GC are built on it.
func (module) Allocations(_ *ipam.Context, store ipam.Store) ([]ipam.Allocation, *ipam.Error) {
	var held []ipam.Allocation
	for _, e := range store.List("ip/") {
		id, ifname, _ := strings.Cut(string(e.Value), "/")
		held = append(held, ipam.Allocation{Address: strings.TrimPrefix(e.Key, "ip/"), ContainerID: id, Ifname: ifname})
	}
	return held, nil
}

// Pools is what `wasm-ipam stats` shows.
func (m module) Pools(ctx *ipam.Context, store ipam.Store) ([]ipam.Pool, *ipam.Error) {
	var r rangeConf
	if err := ctx.IPAM(&r); err != nil || !r.Start.IsValid() {
		return nil, err
	}
	held, err := m.Allocations(ctx, store)
	if err != nil {
		return nil, err
	}
	capacity := uint64(len(r.addresses()))
	return []ipam.Pool{{
		Name: fmt.Sprintf("%s-%s", r.Start, r.End), Capacity: &capacity,
		InUse: uint64(len(held)), Free: ipam.Some(capacity - uint64(len(held))),
	}}, nil
}

func init() { ipam.Export(module{}) }

func main() {}
