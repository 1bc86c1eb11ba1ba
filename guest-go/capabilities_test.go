package ipam

import (
	"reflect"
	"testing"
)

type reserving struct{ bare }

func (reserving) Reserve(*Context, string, string, bool, Store) (*Reservation, *Error) {
	return nil, nil
}
func (reserving) Unreserve(*Context, string, Store) (*Reservation, *Error) { return nil, nil }
func (reserving) Reservations(*Context, Store) ([]Reservation, *Error)     { return nil, nil }

type pooled struct{ two }

func (pooled) Pools(*Context, Store) ([]Pool, *Error) { return nil, nil }

func origins(m Module) map[string]Origin {
	out := map[string]Origin{}
	for _, f := range Capabilities(m) {
		out[f.Name] = f.Origin
	}
	return out
}

func TestCapabilitiesSayWhichAnswersAreTheModules(t *testing.T) {
	bareOrigins := origins(bare{})
	for name, want := range map[string]Origin{
		"handler.add": OriginModule, "handler.check": OriginNotImplemented, "handler.status": OriginDerived,
		"inspect.allocations": OriginNotImplemented, "inspect.pools": OriginNotImplemented,
		"usage.pools": OriginNotImplemented, "reservations.all": OriginNotImplemented,
		"nodes.release-node": OriginNotImplemented,
	} {
		if bareOrigins[name] != want {
			t.Errorf("a bare module's %s: %d, want %d", name, bareOrigins[name], want)
		}
	}
	listing := origins(two{})
	if listing["inspect.allocations"] != OriginModule || listing["handler.check"] != OriginDerived ||
		listing["inspect.pools"] != OriginDerived || listing["usage.pools"] != OriginDerived {
		t.Errorf("a module listing allocations: %v", listing)
	}
	if got := origins(pooled{}); got["inspect.pools"] != OriginModule || got["usage.pools"] != OriginDerived {
		t.Errorf("a module reporting pools: %v", got)
	}
	got := origins(reserving{})
	for _, name := range []string{"reservations.reserve", "reservations.unreserve", "reservations.all"} {
		if got[name] != OriginModule {
			t.Errorf("a module keeping reservations: %s is %d", name, got[name])
		}
	}
	if len(Capabilities(bare{})) != 12 {
		t.Errorf("%d functions", len(Capabilities(bare{})))
	}
}

func TestDefaultUsageIsThePoolsAsPoolRows(t *testing.T) {
	store := &MemoryStore{Entries: map[string][]byte{"a/2": []byte("c2\r\neth0"), "a/3": []byte("c3\r\neth0")}}
	ctx := &Context{NetworkName: "net"}
	rows, err := Usage(two{}, ctx, store)
	if err != nil || !reflect.DeepEqual(rows, []PoolUsage{{Kind: UsagePool, Name: "net", InUse: 2}}) {
		t.Errorf("%+v %v", rows, err)
	}
	if _, err := Usage(bare{}, ctx, store); err == nil || err.Code != CodeNotImplemented {
		t.Errorf("a bare module's usage: %+v", err)
	}
	if _, err := Reserve(bare{}, ctx, "10.0.0.1/32", "", false, store); err == nil || err.Msg != "this module keeps no reservations: cannot reserve 10.0.0.1/32" {
		t.Errorf("%+v", err)
	}
	if _, err := ReleaseNode(bare{}, ctx, "gone", true, store); err == nil || err.Code != CodeNotImplemented {
		t.Errorf("%+v", err)
	}
}
