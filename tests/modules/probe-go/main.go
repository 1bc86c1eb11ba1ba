// The Go SDK's probe: a module whose behaviour its netconf chooses (`ipam.probe`),
// so the integration suite can round-trip every type of the contract's world through
// the real host (tests/integration/go_sdk.rs) and make a Go module loop, allocate
// without bound or panic (the hostile-module cases, for Go).
package main

import (
	"encoding/json"
	"fmt"

	ipam "wasm-ipam.dev/guest-go"
)

type probe struct {
	// Log the request as the SDK lifted it, as JSON (`request=...`).
	Echo bool `json:"echo"`
	// The ADD result to answer, in the SDK's field names.
	Result *ipam.Result `json:"result"`
	// Store operations, in order, each logged with its answer (`store=...`).
	Store []storeOp `json:"store"`
	// Log the deadline's figures (`deadline=...`).
	Deadline bool `json:"deadline"`
	// Conditions to report degraded (`readiness`), in the SDK's field names; an empty
	// list clears what the network reported.
	Degraded *[]ipam.Error `json:"degraded"`
	// The error to answer, after everything else.
	Error *ipam.Error `json:"error"`
	// How the handler ends: "loop", "panic", "alloc" (without bound) or nothing.
	Then string `json:"then"`

	// What the operator's commands are answered, in the SDK's field names: `list`
	// (allocations, reservations), `stats` (pools, usage), `release-node` (release,
	// with a note naming the node and the dry run), `reserve` and `unreserve` (the
	// reservation asked, its note, since 1700000000, and "held" when forced).
	Allocations  []ipam.Allocation   `json:"allocations"`
	Pools        []ipam.Pool         `json:"pools"`
	Usage        []ipam.PoolUsage    `json:"usage"`
	Reservations []ipam.Reservation  `json:"reservations"`
	Release      *ipam.ReleaseReport `json:"release"`
}

// asked is the probe section of the configuration an operator command runs with.
func asked(ctx *ipam.Context) (probe, *ipam.Error) {
	var conf struct {
		Probe probe `json:"probe"`
	}
	err := ctx.IPAM(&conf)
	return conf.Probe, err
}

func (module) Allocations(ctx *ipam.Context, _ ipam.Store) ([]ipam.Allocation, *ipam.Error) {
	p, err := asked(ctx)
	return p.Allocations, err
}

func (module) Pools(ctx *ipam.Context, _ ipam.Store) ([]ipam.Pool, *ipam.Error) {
	p, err := asked(ctx)
	return p.Pools, err
}

func (module) Usage(ctx *ipam.Context, _ ipam.Store) ([]ipam.PoolUsage, *ipam.Error) {
	p, err := asked(ctx)
	return p.Usage, err
}

func (module) Reservations(ctx *ipam.Context, _ ipam.Store) ([]ipam.Reservation, *ipam.Error) {
	p, err := asked(ctx)
	return p.Reservations, err
}

func (module) Reserve(ctx *ipam.Context, cidr, note string, force bool, _ ipam.Store) (*ipam.Reservation, *ipam.Error) {
	if _, err := asked(ctx); err != nil {
		return nil, err
	}
	r := &ipam.Reservation{CIDR: cidr, Note: note, Since: 1_700_000_000, Held: []string{}}
	if force {
		r.Held = append(r.Held, "held")
	}
	return r, nil
}

func (module) Unreserve(ctx *ipam.Context, cidr string, _ ipam.Store) (*ipam.Reservation, *ipam.Error) {
	if _, err := asked(ctx); err != nil {
		return nil, err
	}
	return &ipam.Reservation{CIDR: cidr, Note: "was reserved", Since: 1_700_000_000}, nil
}

func (module) ReleaseNode(ctx *ipam.Context, node string, dryRun bool, _ ipam.Store) (*ipam.ReleaseReport, *ipam.Error) {
	p, err := asked(ctx)
	if err != nil || p.Release == nil {
		return nil, err
	}
	report := *p.Release
	report.Notes = append(append([]string{}, report.Notes...), fmt.Sprintf("node %s, dry run %v", node, dryRun))
	return &report, nil
}

type storeOp struct {
	Op  string `json:"op"`
	Key string `json:"key"`
	// The value's bytes, as numbers.
	Value []byte `json:"-"`
	Bytes []int  `json:"value"`
}

type module struct{}

func (module) run(req *ipam.Request, store ipam.Store, extra any) *ipam.Error {
	var conf struct {
		Probe probe `json:"probe"`
	}
	if err := req.IPAM(&conf); err != nil {
		return err
	}
	p := conf.Probe
	if p.Echo {
		logJSON("request", map[string]any{"request": req, "extra": extra})
	}
	for _, op := range p.Store {
		for _, b := range op.Bytes {
			op.Value = append(op.Value, byte(b))
		}
		var answer any
		switch op.Op {
		case "get":
			value, ok := store.Get(op.Key)
			answer = map[string]any{"value": numbers(value), "present": ok}
		case "put":
			answer = store.Put(op.Key, op.Value)
		case "delete":
			present, err := store.Delete(op.Key)
			answer = map[string]any{"present": present, "error": err}
		case "list":
			answer = entries(store.List(op.Key))
		case "peek":
			answer = entries(store.Peek(op.Key))
		case "room":
			room, limited := store.CommitRoom()
			answer = map[string]any{"room": room, "limited": limited}
		default:
			return ipam.InvalidConfig("unknown store op %q", op.Op)
		}
		logJSON("store", map[string]any{"op": op.Op, "key": op.Key, "answer": answer})
	}
	if p.Deadline {
		logJSON("deadline", map[string]any{
			"budget": ipam.Budget(), "remaining": ipam.Remaining(), "expired": ipam.Expired(),
		})
	}
	if p.Degraded != nil {
		conditions := make([]*ipam.Error, len(*p.Degraded))
		for i := range *p.Degraded {
			conditions[i] = &(*p.Degraded)[i]
		}
		ipam.Degraded(conditions...)
	}
	switch p.Then {
	case "loop":
		for {
		}
	case "panic":
		panic("probe asked to panic")
	case "alloc":
		var held [][]byte
		for {
			held = append(held, make([]byte, 1<<20))
		}
	}
	return p.Error
}

// numbers is a value as a list of its bytes (JSON would give base64).
func numbers(value []byte) []int {
	out := make([]int, len(value))
	for i, b := range value {
		out[i] = int(b)
	}
	return out
}

func entries(list []ipam.Entry) [][]any {
	out := [][]any{}
	for _, e := range list {
		out = append(out, []any{e.Key, numbers(e.Value)})
	}
	return out
}

func logJSON(what string, v any) {
	text, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("%s: %v", what, err))
	}
	ipam.Infof("%s=%s", what, text)
}

func (m module) Add(req *ipam.Request, store ipam.Store) (*ipam.Result, *ipam.Error) {
	if err := m.run(req, store, nil); err != nil {
		return nil, err
	}
	var conf struct {
		Probe probe `json:"probe"`
	}
	_ = req.IPAM(&conf)
	if conf.Probe.Result != nil {
		return conf.Probe.Result, nil
	}
	return &ipam.Result{IPs: []ipam.IPConfig{{Address: "10.99.0.2/24"}}}, nil
}

func (m module) Del(req *ipam.Request, store ipam.Store) *ipam.Error {
	return m.run(req, store, nil)
}

func (m module) Check(req *ipam.Request, store ipam.Store) *ipam.Error {
	return m.run(req, store, nil)
}

func (m module) GC(req *ipam.Request, valid []ipam.Attachment, store ipam.Store) *ipam.Error {
	return m.run(req, store, valid)
}

func init() { ipam.Export(module{}) }

func main() {}
