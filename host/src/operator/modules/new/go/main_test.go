package main

import (
	"testing"

	ipam "wasm-ipam.dev/guest-go"
)

func TestHandsOutTheRangeInOrderAndTakesItBack(t *testing.T) {
	store := ipam.NewMemoryStore()
	request := func(id string) *ipam.Request {
		return &ipam.Request{Command: ipam.CmdAdd, ContainerID: id, Ifname: "eth0", NetworkName: "n",
			Config: `{"cniVersion": "1.1.0", "name": "n", "ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24}}`}
	}
	add := func(id string) (string, *ipam.Error) {
		result, err := module{}.Add(request(id), store)
		if err != nil {
			return "", err
		}
		return result.IPs[0].Address, nil
	}
	if got, err := add("a"); err != nil || got != "10.99.0.10/24" {
		t.Fatalf("first ADD: %s %v", got, err)
	}
	if got, _ := add("a"); got != "10.99.0.10/24" {
		t.Errorf("a retried ADD: %s", got)
	}
	add("b")
	if _, err := add("c"); err == nil || err.Code != ipam.CodeModuleSpecific {
		t.Errorf("a full range: %v", err)
	}
	if err := (module{}).Del(request("a"), store); err != nil {
		t.Fatal(err)
	}
	if got, _ := add("c"); got != "10.99.0.10/24" {
		t.Errorf("after a DEL: %s", got)
	}
	if err := ipam.Check(module{}, request("c"), store); err != nil {
		t.Errorf("CHECK: %v", err)
	}
}

func TestServesOnlyTheNamespacesItLists(t *testing.T) {
	store := ipam.NewMemoryStore()
	pod := func(namespace string) *ipam.Request {
		return &ipam.Request{Command: ipam.CmdAdd, ContainerID: namespace, Ifname: "eth0", NetworkName: "n",
			Args:   []ipam.Arg{{Key: "K8S_POD_NAMESPACE", Value: namespace}},
			Config: `{"cniVersion": "1.1.0", "name": "n", "ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24, "namespaces": ["team-a"]}}`}
	}
	if _, err := (module{}).Add(pod("team-a"), store); err != nil {
		t.Errorf("a listed namespace: %v", err)
	}
	if _, err := (module{}).Add(pod("team-b"), store); err == nil {
		t.Error("a namespace not listed was served")
	}
}
