package ipam

// The glue against contract.golden, the layout of wit/ipam.wit as wit-parser gives it
// (the integration suite keeps the file equal to the WIT): every figure the file holds
// is one this table names, from the constants the glue reads and writes at, and every
// function is declared by the glue with that core signature. A contract change the
// glue does not follow fails here.

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const (
	handler      = "cni:ipam/handler@0.2.5"
	storeAPI     = "cni:ipam/store@0.2.5"
	inspectAPI   = "cni:ipam/inspect@0.2.5"
	nodesAPI     = "cni:ipam/nodes@0.2.5"
	reserveAPI   = "cni:ipam/reservations@0.2.5"
	usageAPI     = "cni:ipam/usage@0.2.5"
	functionsAPI = "cni:ipam/capabilities@0.2.5"
)

// glueLayout is every figure of contract.golden, by its key, as the glue has it.
var glueLayout = map[string]int{
	"size request": requestSize, "align request": 8,
	"offset request.command": requestCommand, "offset request.container-id": requestContainerID,
	"offset request.netns": requestNetns, "offset request.ifname": requestIfname,
	"offset request.args": requestArgs, "size request.args[]": argSize,
	"offset request.args[].0": argKey, "offset request.args[].1": argValue,
	"offset request.network-name": requestNetworkName, "offset request.cni-version": requestCNIVersion,
	"offset request.config": requestConfig, "offset request.prev-result": requestPrevResult,
	"payload request.prev-result": payload4, "offset request.lock-granted-at": requestLockGrantedAt,
	"offset request.node-name": requestNodeName,

	"size wall-instant": 16, "align wall-instant": 8,
	"offset wall-instant.seconds": wallInstantSeconds, "offset wall-instant.nanoseconds": wallInstantNanoseconds,

	"size command": 1, "align command": 1,

	"size attachment": attachmentSize, "align attachment": 4,
	"offset attachment.container-id": attachmentContainerID, "offset attachment.ifname": attachmentIfname,

	"size ip-config": ipConfigSize, "align ip-config": 4,
	"offset ip-config.address": ipConfigAddress, "offset ip-config.gateway": ipConfigGateway,
	"payload ip-config.gateway": payload4,

	"size route": routeSize, "align route": 4,
	"offset route.dst": routeDst, "offset route.gw": routeGW, "payload route.gw": payload4,
	"offset route.mtu": routeMTU, "payload route.mtu": payload4,
	"offset route.advmss": routeAdvMSS, "payload route.advmss": payload4,
	"offset route.priority": routePriority, "payload route.priority": payload4,
	"offset route.table": routeTable, "payload route.table": payload4,
	"offset route.scope": routeScope, "payload route.scope": payload1,

	"size dns": 36, "align dns": 4,
	"offset dns.nameservers": dnsNameservers, "offset dns.domain": dnsDomain,
	"payload dns.domain": payload4, "offset dns.search": dnsSearch, "offset dns.options": dnsOptions,

	"size ipam-result": 52, "align ipam-result": 4,
	"offset ipam-result.ips": ipamResultIPs, "offset ipam-result.routes": ipamResultRoutes,
	"offset ipam-result.dns": ipamResultDNS,

	"size error": errorSize, "align error": 4,
	"offset error.code": errorCode, "offset error.msg": errorMsg, "offset error.details": errorDetails,

	"size store.store-error": 12, "align store.store-error": 4, "payload store.store-error": storeErrorPayload,

	"size log.level": 1, "align log.level": 1,

	"size return " + handler + " add": addReturnSize, "align return " + handler + " add": 4,
	"payload return " + handler + " add": payload4,
	"size return " + handler + " del":    unitReturnSize, "align return " + handler + " del": 4,
	"payload return " + handler + " del": payload4,
	"size return " + handler + " check":  unitReturnSize, "align return " + handler + " check": 4,
	"payload return " + handler + " check": payload4,
	"size return " + handler + " gc":       unitReturnSize, "align return " + handler + " gc": 4,
	"payload return " + handler + " gc":  payload4,
	"size return " + handler + " status": unitReturnSize, "align return " + handler + " status": 4,
	"payload return " + handler + " status": payload4,

	"size return " + storeAPI + " get": getReturnSize, "align return " + storeAPI + " get": 4,
	"payload return " + storeAPI + " get": payload4,
	"size return " + storeAPI + " put":    writeReturnSize, "align return " + storeAPI + " put": 4,
	"payload return " + storeAPI + " put": payload4,
	"size return " + storeAPI + " delete": writeReturnSize, "align return " + storeAPI + " delete": 4,
	"payload return " + storeAPI + " delete":   payload4,
	"size return " + storeAPI + " list-prefix": listReturnSize, "align return " + storeAPI + " list-prefix": 4,
	"size return " + storeAPI + " list-prefix[]":     entrySize,
	"offset return " + storeAPI + " list-prefix[].0": entryKey,
	"offset return " + storeAPI + " list-prefix[].1": entryValue,
	"size return " + storeAPI + " peek-prefix":       listReturnSize, "align return " + storeAPI + " peek-prefix": 4,
	"size return " + storeAPI + " peek-prefix[]":     entrySize,
	"offset return " + storeAPI + " peek-prefix[].0": entryKey,
	"offset return " + storeAPI + " peek-prefix[].1": entryValue,
	"size return " + storeAPI + " commit-room":       commitRoomReturnSize,
	"align return " + storeAPI + " commit-room":      4,
	"payload return " + storeAPI + " commit-room":    payload4,

	"size inspect.context": contextSize, "align inspect.context": 8,
	"offset inspect.context.network-name": contextNetworkName, "offset inspect.context.config": contextConfig,
	"payload inspect.context.config": payload4, "offset inspect.context.node-name": contextNodeName,
	"offset inspect.context.now": contextNow,
	"size nodes.context":         contextSize, "align nodes.context": 8,
	"offset nodes.context.network-name": contextNetworkName, "offset nodes.context.config": contextConfig,
	"payload nodes.context.config": payload4, "offset nodes.context.node-name": contextNodeName,
	"offset nodes.context.now": contextNow,

	"size inspect.allocation": allocationSize, "align inspect.allocation": 8,
	"offset inspect.allocation.address": allocationAddress, "offset inspect.allocation.container-id": allocationContainerID,
	"offset inspect.allocation.ifname": allocationIfname, "offset inspect.allocation.since": allocationSince,
	"payload inspect.allocation.since": payload8, "offset inspect.allocation.attributes": allocationAttributes,
	"size inspect.allocation.attributes[]": attributeSize, "offset inspect.allocation.attributes[].0": attributeName,
	"offset inspect.allocation.attributes[].1": attributeValue,

	"size inspect.pool": poolSize, "align inspect.pool": 8,
	"offset inspect.pool.name": poolName, "offset inspect.pool.capacity": poolCapacity,
	"payload inspect.pool.capacity": payload8, "offset inspect.pool.in-use": poolInUse,
	"offset inspect.pool.excluded": poolExcluded, "offset inspect.pool.cooling-down": poolCoolingDown,
	"offset inspect.pool.free": poolFree, "payload inspect.pool.free": payload8,

	"size usage.kind": 1, "align usage.kind": 1,
	"size usage.pool-usage": poolUsageSize, "align usage.pool-usage": 8,
	"offset usage.pool-usage.kind": poolUsageKind, "offset usage.pool-usage.name": poolUsageName,
	"offset usage.pool-usage.parent": poolUsageParent, "payload usage.pool-usage.parent": payload4,
	"offset usage.pool-usage.node": poolUsageNode, "payload usage.pool-usage.node": payload4,
	"offset usage.pool-usage.capacity": poolUsageCapacity, "payload usage.pool-usage.capacity": payload8,
	"offset usage.pool-usage.in-use": poolUsageInUse, "offset usage.pool-usage.excluded": poolUsageExcluded,
	"offset usage.pool-usage.cooling-down": poolUsageCoolingDown, "offset usage.pool-usage.reserved": poolUsageReserved,
	"offset usage.pool-usage.borrowed": poolUsageBorrowed, "offset usage.pool-usage.free": poolUsageFree,
	"payload usage.pool-usage.free": payload8, "offset usage.pool-usage.warn-percent": poolUsageWarnPercent,
	"payload usage.pool-usage.warn-percent": payload1,

	"size reservations.reservation": reservationSize, "align reservations.reservation": 8,
	"offset reservations.reservation.cidr": reservationCIDR, "offset reservations.reservation.note": reservationNote,
	"offset reservations.reservation.since": reservationSince, "offset reservations.reservation.held": reservationHeld,

	"size nodes.release-report": releaseReportSize, "align nodes.release-report": 4,
	"offset nodes.release-report.addresses": releaseReportAddresses, "offset nodes.release-report.blocks": releaseReportBlocks,
	"offset nodes.release-report.notes": releaseReportNotes,
	"size nodes.released-address":       releasedAddressSize, "align nodes.released-address": 4,
	"offset nodes.released-address.address":      releasedAddressAddress,
	"offset nodes.released-address.container-id": releasedAddressContainerID,
	"offset nodes.released-address.ifname":       releasedAddressIfname,

	"size capabilities.function": functionSize, "align capabilities.function": 4,
	"offset capabilities.function.name": functionName, "offset capabilities.function.origin": functionOrigin,
	"size capabilities.origin": 1, "align capabilities.origin": 1,

	"size return " + inspectAPI + " allocations": listResultSize, "align return " + inspectAPI + " allocations": 4,
	"payload return " + inspectAPI + " allocations": payload4,
	"size return " + inspectAPI + " pools":          listResultSize, "align return " + inspectAPI + " pools": 4,
	"payload return " + inspectAPI + " pools": payload4,
	"size return " + usageAPI + " pools":      listResultSize, "align return " + usageAPI + " pools": 4,
	"payload return " + usageAPI + " pools": payload4,
	"size return " + reserveAPI + " all":    listResultSize, "align return " + reserveAPI + " all": 4,
	"payload return " + reserveAPI + " all":  payload4,
	"size return " + reserveAPI + " reserve": reservationReturnSize, "align return " + reserveAPI + " reserve": 8,
	"payload return " + reserveAPI + " reserve": reservationReturnPayload,
	"size return " + reserveAPI + " unreserve":  reservationReturnSize, "align return " + reserveAPI + " unreserve": 8,
	"payload return " + reserveAPI + " unreserve": reservationReturnPayload,
	"size return " + nodesAPI + " release-node":   releaseNodeReturnSize, "align return " + nodesAPI + " release-node": 4,
	"payload return " + nodesAPI + " release-node": payload4,
	"size return " + functionsAPI + " functions":   functionsReturnSize, "align return " + functionsAPI + " functions": 4,
}

func golden(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("contract.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := map[string]string{}
	scan := bufio.NewScanner(f)
	for scan.Scan() {
		if key, value, ok := strings.Cut(scan.Text(), " = "); ok {
			lines[key] = value
		}
	}
	if len(lines) < 50 {
		t.Fatalf("contract.golden holds %d lines", len(lines))
	}
	return lines
}

func TestEveryFigureOfTheContractIsTheGlues(t *testing.T) {
	seen := map[string]bool{}
	for key, value := range golden(t) {
		if strings.HasPrefix(key, "import ") || strings.HasPrefix(key, "export ") || key == "package" {
			continue
		}
		seen[key] = true
		glue, ok := glueLayout[key]
		if !ok {
			t.Errorf("the glue does not say %q (%s in contract.golden)", key, value)
			continue
		}
		if strconv.Itoa(glue) != value {
			t.Errorf("%s: the glue has %d, the contract %s", key, glue, value)
		}
	}
	for key := range glueLayout {
		if !seen[key] {
			t.Errorf("the glue has %q, which the contract no longer holds", key)
		}
	}
}

// wasmSignature is a function's core signature as the Go compiler lowers it.
func wasmSignature(t *testing.T, f *ast.FuncType) string {
	flat := func(fields *ast.FieldList) string {
		var out []string
		if fields == nil {
			return ""
		}
		for _, field := range fields.List {
			name := field.Type.(*ast.Ident).Name
			kind := map[string]string{"uint32": "i32", "int32": "i32", "uint64": "i64", "int64": "i64"}[name]
			if kind == "" {
				t.Errorf("a glue function takes or returns %s", name)
			}
			for range max(1, len(field.Names)) {
				out = append(out, kind)
			}
		}
		return strings.Join(out, " ")
	}
	return "(" + flat(f.Params) + ") -> (" + flat(f.Results) + ")"
}

func TestEveryFunctionOfTheWorldIsDeclaredWithItsSignature(t *testing.T) {
	want := map[string]string{}
	version := ""
	for key, value := range golden(t) {
		if strings.HasPrefix(key, "import ") || strings.HasPrefix(key, "export ") {
			want[key] = value
		}
		if key == "package" {
			version = value[strings.Index(value, "@"):]
		}
	}
	got := map[string]string{}
	posts := map[string]bool{}
	files, _ := filepath.Glob("*_wasip1.go")
	fset := token.NewFileSet()
	for _, file := range files {
		parsed, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range parsed.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Doc == nil {
				continue
			}
			for _, c := range fn.Doc.List {
				fields := strings.Fields(c.Text)
				switch {
				case fields[0] == "//go:wasmimport" && strings.HasPrefix(fields[1], "cni:ipam/"):
					got["import "+fields[1]+" "+fields[2]] = wasmSignature(t, fn.Type)
				case fields[0] == "//go:wasmexport" && strings.HasPrefix(fields[1], "cabi_post_"):
					posts[strings.TrimPrefix(fields[1], "cabi_post_")] = true
				case fields[0] == "//go:wasmexport" && strings.Contains(fields[1], "#"):
					iface, function, _ := strings.Cut(fields[1], "#")
					got["export "+iface+" "+function] = wasmSignature(t, fn.Type)
				}
			}
		}
	}
	keys := func(m map[string]string) []string {
		var out []string
		for k, v := range m {
			out = append(out, k+" = "+v)
		}
		sort.Strings(out)
		return out
	}
	if strings.Join(keys(got), "\n") != strings.Join(keys(want), "\n") {
		t.Errorf("the glue declares\n%s\nthe contract has\n%s", strings.Join(keys(got), "\n"), strings.Join(keys(want), "\n"))
	}
	for key := range want {
		if !strings.Contains(key, version+" ") {
			t.Errorf("%s is not at the contract's version %s", key, version)
		}
		if iface, function, ok := strings.Cut(strings.TrimPrefix(key, "export "), " "); ok && strings.HasPrefix(key, "export ") && !posts[iface+"#"+function] {
			t.Errorf("%s has no post-return: what it lowered would stay pinned", key)
		}
	}
}
