package ipam

import (
	"encoding/json"
	"runtime/debug"
	"strings"
)

var registered Module

// Export makes m this component's `cni:ipam/handler`. Call it from the package main's
// init function: the host calls the handler right after instantiating the component,
// and never runs main.
func Export(m Module) { registered = m }

// Registered says whether Export was called: build.sh checks it natively, after every
// init function of the package has run, so a module that never registers is refused
// at build time instead of failing every call.
func Registered() bool { return registered != nil }

func exported() Module {
	if registered == nil {
		panic("wasm-ipam: no module registered: call ipam.Export from an init function")
	}
	return registered
}

// DefaultMemoryLimitMiB is the host's default `ipam.memoryLimitMiB`.
const DefaultMemoryLimitMiB = 64

// The Go runtime's collector is set for an instance that lives one call: GOGC is off
// (no collection while the heap is small) and the memory limit (GOMEMLIMIT) is the
// module's `ipam.memoryLimitMiB` less a margin for the runtime's own memory, so the
// collector runs only when the heap nears what the host allows (memoryLimit below).
func init() {
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(memoryLimit(DefaultMemoryLimitMiB))
}

// memoryLimit is the heap's soft limit for a module allowed `mib` MiB of linear
// memory: a quarter of it, and at least 8 MiB, stays for the runtime's stacks, its
// metadata and the data segment.
func memoryLimit(mib uint64) int64 {
	total := int64(mib) << 20
	return total - max(total/4, 8<<20)
}

// configuredMemoryLimitMiB is the netconf's `ipam.memoryLimitMiB`, or the default.
func configuredMemoryLimitMiB(config string) uint64 {
	var conf struct {
		IPAM struct {
			MemoryLimitMiB *uint64 `json:"memoryLimitMiB"`
		} `json:"ipam"`
	}
	if !strings.Contains(config, "memoryLimitMiB") || json.Unmarshal([]byte(config), &conf) != nil || conf.IPAM.MemoryLimitMiB == nil {
		return DefaultMemoryLimitMiB
	}
	return *conf.IPAM.MemoryLimitMiB
}

// begin is how every handler call starts: the memory limit from the call's netconf.
func begin(req *Request) { beginConfig(req.Config) }

// beginConfig sets the memory limit from a netconf (a call's, or an operator
// command's context).
func beginConfig(config string) {
	if mib := configuredMemoryLimitMiB(config); mib != DefaultMemoryLimitMiB {
		debug.SetMemoryLimit(memoryLimit(mib))
	}
}
