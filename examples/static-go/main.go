// static-go: the reference `static` IPAM plugin as a wasm-ipam module written in Go
// with the Go SDK (guest-go/), the same semantics as examples/static-py. static keeps
// no state, so the module never touches the store: DEL and GC succeed with nothing to
// do (and STATUS is the host's).
package main

import ipam "wasm-ipam.dev/guest-go"

type static struct{}

func (static) Add(req *ipam.Request, _ ipam.Store) (*ipam.Result, *ipam.Error) {
	return add(req.Config, req.Args)
}

// Del has nothing to release: static allocates nothing, and its DEL reads no config.
func (static) Del(*ipam.Request, ipam.Store) *ipam.Error { return nil }

func (static) Check(req *ipam.Request, _ ipam.Store) *ipam.Error {
	return check(req.Config, req.Args, req.Ifname)
}

// GC has nothing to collect.
func (static) GC(*ipam.Request, []ipam.Attachment, ipam.Store) *ipam.Error { return nil }

func init() { ipam.Export(static{}) }

func main() {}
