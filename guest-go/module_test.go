package ipam

import (
	"net/netip"
	"reflect"
	"testing"
)

// two hands out `10.0.0.<n>` from a store of `a/<n>` → `id\r\nifname`; a value of the
// id alone is a legacy allocation, which a DEL for the id releases. It leaves CHECK
// and GC to the SDK's defaults, as the Rust SDK's tests' module does.
type two struct{}

func (two) Add(req *Request, store Store) (*Result, *Error) {
	for _, n := range []string{"2", "3"} {
		if _, held := store.Get("a/" + n); !held {
			if err := store.Put("a/"+n, []byte(req.ContainerID+"\r\n"+req.Ifname)); err != nil {
				return nil, err
			}
			return &Result{IPs: []IPConfig{{Address: "10.0.0." + n + "/24"}}}, nil
		}
	}
	return nil, NewError(CodeModuleSpecific, "full")
}

func (two) Del(req *Request, store Store) *Error {
	if req.ContainerID == "undeletable" {
		return NewError(150, "refused")
	}
	for _, e := range store.List("a/") {
		if v := string(e.Value); v == req.ContainerID+"\r\n"+req.Ifname || v == req.ContainerID {
			if _, err := store.Delete(e.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

func (two) Allocations(_ *Context, store Store) ([]Allocation, *Error) {
	var out []Allocation
	for _, e := range store.List("a/") {
		id, ifname, _ := cut(string(e.Value), "\r\n")
		out = append(out, Allocation{Address: "10.0.0." + e.Key[2:], ContainerID: id, Ifname: ifname})
	}
	return out, nil
}

func cut(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

// bare implements only what is required.
type bare struct{}

func (bare) Add(*Request, Store) (*Result, *Error) { return &Result{}, nil }
func (bare) Del(*Request, Store) *Error            { return nil }

func request(c Command, id, ifname string) *Request {
	return &Request{Command: c, ContainerID: id, Ifname: ifname, NetworkName: "net", Config: `{"name":"net"}`}
}

func TestDefaultCheckFindsTheAttachmentInAllocations(t *testing.T) {
	store := NewMemoryStore()
	if _, err := (two{}).Add(request(CmdAdd, "c1", "eth0"), store); err != nil {
		t.Fatal(err)
	}
	if err := Check(two{}, request(CmdCheck, "c1", "eth0"), store); err != nil {
		t.Fatal(err)
	}
	err := Check(two{}, request(CmdCheck, "c1", "eth1"), store)
	if err == nil || err.Code != CodeUnknownContainer || err.Msg != "no address is allocated to container c1 interface eth1" {
		t.Fatalf("got %v", err)
	}
	store.Put("a/3", []byte("legacy"))
	if err := Check(two{}, request(CmdCheck, "legacy", "eth7"), store); err != nil {
		t.Fatalf("an allocation without an interface is its container's: %v", err)
	}
}

func TestDefaultGCDeletesEachStaleAttachmentOnce(t *testing.T) {
	store := &MemoryStore{Entries: map[string][]byte{
		"a/2": []byte("keep\r\neth0"), "a/3": []byte("gone\r\neth0"), "a/4": []byte("gone\r\neth0"),
		"a/5": []byte("legacy"), "a/6": []byte("stale-legacy"),
	}}
	valid := []Attachment{{"keep", "eth0"}, {"legacy", "net1"}}
	if err := CollectGarbage(two{}, request(CmdGC, "", ""), valid, store); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range store.List("") {
		left = append(left, e.Key)
	}
	if !reflect.DeepEqual(left, []string{"a/2", "a/5"}) {
		t.Errorf("left %v", left)
	}
}

func TestDefaultGCTriesEveryReleaseAndReportsAllFailures(t *testing.T) {
	store := &MemoryStore{Entries: map[string][]byte{
		"a/2": []byte("undeletable\r\neth0"), "a/3": []byte("gone\r\neth0"), "a/4": []byte("undeletable\r\neth1"),
	}}
	err := CollectGarbage(two{}, request(CmdGC, "", ""), nil, store)
	if err == nil || err.Code != 150 || err.Msg != "GC could not release 2 attachment(s)" ||
		err.Details != "undeletable eth0: refused; undeletable eth1: refused" {
		t.Fatalf("got %+v", err)
	}
	if _, ok := store.Get("a/3"); ok {
		t.Error("the other DEL did not run")
	}
}

func TestMemoryStoreCommitRoomIsWhatTheTestSets(t *testing.T) {
	store := NewMemoryStore()
	if _, limited := store.CommitRoom(); limited {
		t.Error("a MemoryStore without Room has no limit")
	}
	store.Room = Some(uint32(3))
	if room, limited := store.CommitRoom(); !limited || room != 3 {
		t.Errorf("got %d %v", room, limited)
	}
}

func TestABareModuleSaysWhatItCannotDo(t *testing.T) {
	store := NewMemoryStore()
	_, err := Allocations(bare{}, ContextOf(request(CmdAdd, "", "")), store)
	if err == nil || err.Code != CodeNotImplemented || err.Msg != "this module does not report allocations" {
		t.Fatalf("got %+v", err)
	}
	if err := Check(bare{}, request(CmdCheck, "c1", "eth0"), store); err == nil || err.Msg != "cannot check the attachment: this module does not report allocations" {
		t.Errorf("CHECK: %+v", err)
	}
	if err := CollectGarbage(bare{}, request(CmdGC, "", ""), nil, store); err == nil || err.Msg != "cannot collect garbage: this module does not report allocations" {
		t.Errorf("GC: %+v", err)
	}
}

func TestAValueThatDoesNotFitIsNamedByItsKeyAndValue(t *testing.T) {
	var v struct {
		Start netip.Addr `json:"start"`
		Speed float64    `json:"speed"`
	}
	r := request(CmdAdd, "c", "eth0")
	for config, want := range map[string]string{
		`{"ipam": {"start": "10.99.0.x"}}`:                 `invalid ipam.start ("10.99.0.x"): ParseAddr("10.99.0.x"): unexpected character (at "x")`,
		`{"ipam": {"start": "10.0.0.1", "speed": "fast"}}`: `invalid ipam.speed ("fast"): a string where float64 is expected`,
	} {
		r.Config = config
		if err := r.IPAM(&v); err == nil || err.Code != CodeInvalidNetworkConfig || err.Msg != want {
			t.Errorf("%s: %+v", config, err)
		}
	}
}

func TestIPAMSectionErrorsAreCodes6And7(t *testing.T) {
	var v struct {
		Subnet string `json:"subnet"`
	}
	r := request(CmdAdd, "c", "eth0")
	r.Config = `{"ipam": {"subnet": 5}}`
	if err := r.IPAM(&v); err == nil || err.Code != CodeInvalidNetworkConfig {
		t.Errorf("a mismatch: %+v", err)
	}
	r.Config = `{`
	if err := r.IPAM(&v); err == nil || err.Code != CodeDecodingFailure {
		t.Errorf("not JSON: %+v", err)
	}
	r.Config = `{"ipam": {"subnet": "10.0.0.0/24"}}`
	if err := r.IPAM(&v); err != nil || v.Subnet != "10.0.0.0/24" {
		t.Errorf("%+v %+v", err, v)
	}
}

func TestTheHeapLimitFollowsMemoryLimitMiB(t *testing.T) {
	if got := configuredMemoryLimitMiB(`{"ipam": {"memoryLimitMiB": 128}}`); got != 128 {
		t.Errorf("got %d", got)
	}
	if got := configuredMemoryLimitMiB(`{"ipam": {}}`); got != DefaultMemoryLimitMiB {
		t.Errorf("got %d", got)
	}
	for mib, want := range map[uint64]int64{64: 48 << 20, 16: 8 << 20, 128: 96 << 20} {
		if got := memoryLimit(mib); got != want {
			t.Errorf("memoryLimitMiB %d: heap limit %d, want %d", mib, got, want)
		}
	}
}
