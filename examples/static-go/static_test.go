package main

// static's logic natively (no WebAssembly, no host): the calls recorded from Debian
// bookworm's `/usr/lib/cni/static` in examples/static-py/tests/reference.jsonl (the
// Python module's tests replay the same file) must give static's result or static's
// error. tests/integration/static_go.rs runs the built component through `wasm-ipam`
// side by side with the live binary and the Python module.

import (
	"bufio"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	ipam "wasm-ipam.dev/guest-go"
)

type record struct {
	Command  string         `json:"command"`
	CNIArgs  string         `json:"cniArgs"`
	Config   string         `json:"config"`
	ExitCode int            `json:"exitCode"`
	Stdout   map[string]any `json:"stdout"`
}

// pairs is CNI_ARGS as the host hands them over: split at `;`, then at the first `=`.
func pairs(cniArgs string) []ipam.Arg {
	var out []ipam.Arg
	for _, p := range strings.Split(cniArgs, ";") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		out = append(out, ipam.Arg{Key: k, Value: v})
	}
	return out
}

// asPrinted is a result as libcni prints it at 1.0.0: empty fields left out, `dns`
// always.
func asPrinted(r *ipam.Result, version string) map[string]any {
	printed := map[string]any{"cniVersion": version}
	var ips, routes []any
	for _, ip := range r.IPs {
		e := map[string]any{"address": ip.Address}
		if ip.Gateway != nil {
			e["gateway"] = *ip.Gateway
		}
		ips = append(ips, e)
	}
	for _, route := range r.Routes {
		e := map[string]any{"dst": route.Dst}
		if route.GW != nil {
			e["gw"] = *route.GW
		}
		routes = append(routes, e)
	}
	if ips != nil {
		printed["ips"] = ips
	}
	if routes != nil {
		printed["routes"] = routes
	}
	dns := map[string]any{}
	list := func(key string, v []string) {
		if len(v) > 0 {
			items := make([]any, len(v))
			for i, s := range v {
				items[i] = s
			}
			dns[key] = items
		}
	}
	list("nameservers", r.DNS.Nameservers)
	if r.DNS.Domain != nil {
		dns["domain"] = *r.DNS.Domain
	}
	list("search", r.DNS.Search)
	list("options", r.DNS.Options)
	printed["dns"] = dns
	return printed
}

func TestEveryRecordedCallOfDebiansStatic(t *testing.T) {
	f, err := os.Open("../static-py/tests/reference.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	scan := bufio.NewScanner(f)
	scan.Buffer(nil, 1<<20)
	n := 0
	for scan.Scan() {
		var r record
		if err := json.Unmarshal(scan.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		n++
		var got map[string]any
		var cniErr *ipam.Error
		if r.Command == "ADD" {
			var result *ipam.Result
			result, cniErr = add(r.Config, pairs(r.CNIArgs))
			if cniErr == nil {
				got = asPrinted(result, r.Stdout["cniVersion"].(string))
			}
		} else {
			cniErr = check(r.Config, pairs(r.CNIArgs), "eth0")
		}
		if cniErr != nil {
			want := map[string]any{"code": float64(cniErr.Code), "msg": cniErr.Msg}
			if r.ExitCode == 0 || !reflect.DeepEqual(want, r.Stdout) {
				t.Errorf("%s %q %s: got %v, static %d %v", r.Command, r.CNIArgs, r.Config, want, r.ExitCode, r.Stdout)
			}
			continue
		}
		if r.ExitCode != 0 {
			t.Errorf("%s %q %s: succeeded, static failed: %v", r.Command, r.CNIArgs, r.Config, r.Stdout)
			continue
		}
		if got != nil {
			for _, ip := range asList(r.Stdout["ips"]) {
				delete(ip.(map[string]any), "version")
			}
			wantJSON, _ := json.Marshal(r.Stdout)
			gotJSON, _ := json.Marshal(got)
			if string(wantJSON) != string(gotJSON) {
				t.Errorf("%s %q %s:\n got %s\nwant %s", r.Command, r.CNIArgs, r.Config, gotJSON, wantJSON)
			}
		}
	}
	if n < 50 {
		t.Fatalf("replayed %d records", n)
	}
}

func conf(ipamKeys string, top string) string {
	return `{"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "static", ` + ipamKeys + `}` + top + `}`
}

// Where static's answer is not valid CNI (or it crashes), this module refuses.
func TestANullRouteIsRefused(t *testing.T) {
	if _, err := add(conf(`"routes": [null]`, ""), nil); err == nil || err.Msg != "ipam.routes[0] is null" {
		t.Errorf("got %v", err)
	}
}

func TestANullPreviousIPIsRefused(t *testing.T) {
	c := conf(`"addresses": [{"address": "10.0.0.2/24"}]`, `, "prevResult": {"cniVersion": "1.0.0", "ips": [null]}`)
	if err := check(c, nil, "eth0"); err == nil || err.Msg != "prevResult.ips[0] is null" {
		t.Errorf("got %v", err)
	}
}

func TestARouteWithoutDstPrintsAsGoDoes(t *testing.T) {
	r, err := add(conf(`"routes": [{"gw": "10.0.0.1"}]`, ""), nil)
	if err != nil || len(r.Routes) != 1 || r.Routes[0].Dst != "<nil>" || *r.Routes[0].GW != "10.0.0.1" {
		t.Errorf("got %+v %v", r, err)
	}
}
