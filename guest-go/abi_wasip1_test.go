//go:build wasip1

package ipam

// The glue in the memory it works on (a wasip1 build: `go test -exec wasip1-run`):
// what it lowers for the host, and what the host writes through cabi_realloc, reads
// back the same after the collector has run and the freed memory has been reused, and
// post-return unpins it all. The offsets themselves are contract_test.go's; the round
// trip through the real host is the integration suite's (tests/integration/go_sdk.rs).

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// churn collects, then fills freed memory with garbage, then collects again: a block
// the glue failed to pin is overwritten.
func churn() {
	runtime.GC()
	var junk [][]byte
	for i := range 4096 {
		junk = append(junk, []byte(strings.Repeat("\xff", 64+i%512)))
	}
	runtime.KeepAlive(junk)
	junk = nil
	runtime.GC()
}

// dynamic is s in memory of its own on the heap (a literal lives in the data segment,
// where the collector never frees it).
func dynamic(s string) string { return string([]byte(s)) }

func liftIPConfig(p uint32) IPConfig {
	return IPConfig{liftString(p + ipConfigAddress), liftOption(p+ipConfigGateway, payload4, liftString)}
}

func liftU32(p uint32) uint32 { return load32(p) }
func liftU8(p uint32) uint8   { return load8(p) }

func liftRoute(p uint32) Route {
	return Route{
		Dst:      liftString(p + routeDst),
		GW:       liftOption(p+routeGW, payload4, liftString),
		MTU:      liftOption(p+routeMTU, payload4, liftU32),
		AdvMSS:   liftOption(p+routeAdvMSS, payload4, liftU32),
		Priority: liftOption(p+routePriority, payload4, liftU32),
		Table:    liftOption(p+routeTable, payload4, liftU32),
		Scope:    liftOption(p+routeScope, payload1, liftU8),
	}
}

func liftStrings(p uint32) []string { return liftList(p, 8, liftString) }

func liftResult(p uint32) Result {
	dns := p + ipamResultDNS
	return Result{
		IPs:    liftList(p+ipamResultIPs, ipConfigSize, liftIPConfig),
		Routes: liftList(p+ipamResultRoutes, routeSize, liftRoute),
		DNS: DNS{
			Nameservers: liftStrings(dns + dnsNameservers),
			Domain:      liftOption(dns+dnsDomain, payload4, liftString),
			Search:      liftStrings(dns + dnsSearch),
			Options:     liftStrings(dns + dnsOptions),
		},
	}
}

func liftError(p uint32) *Error {
	return &Error{load32(p + errorCode), liftString(p + errorMsg), liftString(p + errorDetails)}
}

func sampleResult() *Result {
	r := &Result{DNS: DNS{Domain: Some(dynamic("example.test")), Options: []string{dynamic("ndots:2")}}}
	for i := range 40 {
		ip := IPConfig{Address: dynamic(fmt.Sprintf("10.0.%d.%d/24", i/250, i%250))}
		if i%2 == 0 {
			ip.Gateway = Some(dynamic("10.0.0.1"))
		}
		r.IPs = append(r.IPs, ip)
		route := Route{Dst: dynamic(fmt.Sprintf("192.168.%d.0/24", i))}
		if i%3 == 0 {
			route.GW, route.MTU, route.AdvMSS = Some(dynamic("10.0.0.254")), Some(uint32(1400+i)), Some(uint32(1360))
			route.Priority, route.Table, route.Scope = Some(uint32(i)), Some(uint32(100+i)), Some(uint8(253))
		}
		r.Routes = append(r.Routes, route)
		r.DNS.Nameservers = append(r.DNS.Nameservers, dynamic(fmt.Sprintf("10.0.0.%d", 53+i)))
		r.DNS.Search = append(r.DNS.Search, dynamic(strings.Repeat("s", i)+".example"))
	}
	return r
}

func TestAnAddResultSurvivesACollectionUntilPostReturn(t *testing.T) {
	release(0)
	ret := lowerAddReturn(sampleResult(), nil)
	churn()
	if load8(ret) != 0 {
		t.Fatal("an ok result lowered as an error")
	}
	if got := liftResult(ret + payload4); !reflect.DeepEqual(&got, sampleResult()) {
		t.Errorf("lifted back:\n%+v\nwant\n%+v", got, *sampleResult())
	}
	postAdd(ret)
	if len(pinned) != 0 {
		t.Errorf("post-return left %d blocks pinned", len(pinned))
	}
}

func TestAnEmptyResultAndErrorsLowerAsTheContractSays(t *testing.T) {
	release(0)
	ret := lowerAddReturn(nil, nil)
	if got := liftResult(ret + payload4); len(got.IPs)+len(got.Routes)+len(got.DNS.Nameservers) != 0 || got.DNS.Domain != nil {
		t.Errorf("an empty result lifted as %+v", got)
	}
	want := &Error{Code: 142, Msg: dynamic(strings.Repeat("m", 3000)), Details: dynamic("d")}
	for _, ret := range []uint32{
		lowerAddReturn(nil, &Error{Code: 142, Msg: dynamic(strings.Repeat("m", 3000)), Details: dynamic("d")}),
		lowerUnitReturn(&Error{Code: 142, Msg: dynamic(strings.Repeat("m", 3000)), Details: dynamic("d")}),
	} {
		churn()
		if load8(ret) != 1 {
			t.Fatal("an error lowered as ok")
		}
		if got := liftError(ret + payload4); !reflect.DeepEqual(got, want) {
			t.Errorf("error lifted back as %+v", got)
		}
	}
	if ret := lowerUnitReturn(nil); load8(ret) != 0 {
		t.Error("ok lowered as an error")
	}
	postDel(0)
	if len(pinned) != 0 {
		t.Errorf("post-return left %d blocks pinned", len(pinned))
	}
}

// hostString writes s as the host does: into a block it asks cabi_realloc for.
func hostString(p uint32, s string) {
	block := cabiRealloc(0, 0, 1, uint32(len(s)))
	copy(unsafe.Slice((*byte)(at(block)), len(s)), s)
	store32(p, block)
	store32(p+4, uint32(len(s)))
}

func TestARequestTheHostWroteIsLiftedWhole(t *testing.T) {
	release(0)
	p := cabiRealloc(0, 0, 8, requestSize+8)
	store8(p+requestCommand, uint8(CmdGC))
	hostString(p+requestContainerID, "ctr-"+strings.Repeat("x", 60))
	hostString(p+requestNetns, "/var/run/netns/n")
	hostString(p+requestIfname, "eth0")
	args := cabiRealloc(0, 0, 4, 3*argSize)
	for i := range uint32(3) {
		hostString(args+i*argSize+argKey, fmt.Sprintf("K%d", i))
		hostString(args+i*argSize+argValue, fmt.Sprintf("v=%d", i))
	}
	store32(p+requestArgs, args)
	store32(p+requestArgs+4, 3)
	hostString(p+requestNetworkName, "net")
	hostString(p+requestCNIVersion, "1.1.0")
	hostString(p+requestConfig, `{"name":"net"}`)
	store8(p+requestPrevResult, 1)
	hostString(p+requestPrevResult+payload4, `{"ips":[]}`)
	*(*uint64)(at(p + requestLockGrantedAt + wallInstantSeconds)) = 1_700_000_000
	store32(p+requestLockGrantedAt+wallInstantNanoseconds, 999_999_999)
	hostString(p+requestNodeName, "node-a")
	attachments := cabiRealloc(0, 0, 4, attachmentSize)
	hostString(attachments+attachmentContainerID, "keep")
	hostString(attachments+attachmentIfname, "net1")
	store32(p+requestSize, attachments)
	store32(p+requestSize+4, 1)
	churn()
	got := liftRequest(p)
	valid := liftList(p+requestSize, attachmentSize, liftAttachment)
	release(0)
	churn()
	prev := `{"ips":[]}`
	want := Request{
		Command: CmdGC, ContainerID: "ctr-" + strings.Repeat("x", 60), Netns: "/var/run/netns/n",
		Ifname: "eth0", Args: []Arg{{"K0", "v=0"}, {"K1", "v=1"}, {"K2", "v=2"}},
		NetworkName: "net", CNIVersion: "1.1.0", Config: `{"name":"net"}`, PrevResult: &prev,
		LockGrantedAt: WallInstant{1_700_000_000, 999_999_999}, NodeName: "node-a",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lifted\n%+v\nwant\n%+v", got, want)
	}
	if !reflect.DeepEqual(valid, []Attachment{{"keep", "net1"}}) {
		t.Errorf("attachments lifted as %+v", valid)
	}
}

func TestCabiReallocGrowsABlockKeepingItsBytes(t *testing.T) {
	release(0)
	p := cabiRealloc(0, 0, 1, 5)
	copy(unsafe.Slice((*byte)(at(p)), 5), "hello")
	churn()
	q := cabiRealloc(p, 5, 1, 4096)
	churn()
	if got := string(unsafe.Slice((*byte)(at(q)), 5)); got != "hello" {
		t.Errorf("realloc kept %q", got)
	}
	if q%8 != 0 {
		t.Errorf("block at %d is not aligned to 8", q)
	}
	release(0)
}
