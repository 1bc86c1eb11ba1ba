package main

// The reference `static` IPAM plugin's semantics (containernetworking/plugins v1.1.1,
// Debian bookworm's `/usr/lib/cni/static`), as pure functions of the call: the same
// as examples/static-py/src/static_ipam.py, in Go.
//
// static keeps no state: ADD answers the addresses, routes and DNS its configuration
// names; CHECK compares them with `prevResult`; DEL has nothing to release. Addresses
// come from `ipam.addresses`, plus CNI_ARGS `IP=...;GATEWAY=...` (a gateway applies to
// the CNI_ARGS addresses that contain it); `args.cni.ips`, and after it the runtime's
// `ips` capability (`runtimeConfig.ips`), replace them all. Errors carry skel's code
// for a plain Go error, 999, and static's text.

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	ipam "wasm-ipam.dev/guest-go"
)

// errInternal is skel's code for an error that is not a `*types.Error`: every error
// static returns.
const errInternal = 999

func cniError(format string, args ...any) *ipam.Error {
	return &ipam.Error{Code: errInternal, Msg: fmt.Sprintf(format, args...)}
}

func str(v any) (string, error) {
	s, err := unmarshal(strType{}, v)
	if err != nil {
		return "", err
	}
	return s.(string), nil
}

// libcni's `types.IPNet`: a string parsed by `ParseCIDR`, host bits kept.
var ipnetType = customType{"types.IPNet", func(v any) (any, error) {
	s, err := str(v)
	if err != nil {
		return nil, err
	}
	n, err := parseCIDR(s)
	if err != nil {
		return nil, err
	}
	return n, nil
}}

func notEmulated(key string) customType {
	return customType{"", func(v any) (any, error) {
		if v != nil {
			return nil, &goError{fmt.Sprintf("static-go does not emulate the Go-internal key %q", key)}
		}
		return nil, nil
	}}
}

var (
	routeFields = structType{"types.route", "route", []field{{"dst", ipnetType}, {"gw", ipType{}}}}
	routeType   = customType{"types.Route", func(v any) (any, error) { return unmarshal(routeFields, v) }}
	dnsType     = structType{"types.DNS", "DNS", []field{
		{"nameservers", sliceType{strType{}}}, {"domain", strType{}},
		{"search", sliceType{strType{}}}, {"options", sliceType{strType{}}},
	}}
	addressType = structType{"main.Address", "Address", []field{
		{"address", strType{}}, {"gateway", ipType{}}, {"Address", notEmulated("Address")}, {"Version", strType{}},
	}}
	ipamConfigType = structType{"main.IPAMConfig", "IPAMConfig", []field{
		{"Name", strType{}}, {"type", strType{}}, {"routes", sliceType{ptrType{routeType}}},
		{"addresses", sliceType{addressType}}, {"dns", dnsType},
	}}
	ipamArgsType = structType{"main.IPAMArgs", "IPAMArgs", []field{{"ips", sliceType{strType{}}}}}
	netType      = structType{"main.Net", "Net", []field{
		{"name", strType{}}, {"cniVersion", strType{}}, {"ipam", ptrType{ipamConfigType}},
		{"runtimeConfig", structType{`struct { IPs []string "json:\"ips,omitempty\"" }`, "", []field{{"ips", sliceType{strType{}}}}}},
		{"args", ptrType{structType{`struct { A *main.IPAMArgs "json:\"cni\"" }`, "", []field{{"cni", ptrType{ipamArgsType}}}}}},
	}}
	// libcni's `types.NetConf`, which CHECK decodes again for `prevResult`.
	netConfType = structType{"types.NetConf", "NetConf", []field{
		{"cniVersion", strType{}}, {"name", strType{}}, {"type", strType{}},
		{"capabilities", mapType{boolType{}}}, {"ipam", structType{"types.IPAM", "IPAM", []field{{"type", strType{}}}}},
		{"dns", dnsType}, {"prevResult", mapType{interfaceType{}}},
	}}
)

func resultSchema(pkg string, ipFields []field) structType {
	ipConfig := structType{pkg + ".ipConfig", "ipConfig", ipFields}
	iface := structType{pkg + ".Interface", "Interface", []field{{"name", strType{}}, {"mac", strType{}}, {"sandbox", strType{}}}}
	return structType{pkg + ".Result", "Result", []field{
		{"cniVersion", strType{}},
		{"interfaces", sliceType{ptrType{iface}}},
		{"ips", sliceType{ptrType{customType{pkg + ".IPConfig", func(v any) (any, error) { return unmarshal(ipConfig, v) }}}}},
		{"routes", sliceType{ptrType{routeType}}},
		{"dns", dnsType},
	}}
}

var ipConfigFields = []field{{"interface", ptrType{intType{}}}, {"address", ipnetType}, {"gateway", ipType{}}}

// Which result type libcni decodes `prevResult` into, by the config's cniVersion, and
// the result versions that type accepts. 1.1.0 is not spoken by Debian's static
// (libcni 1.1); it is decoded as libcni 1.2 does.
var (
	result040   = resultSchema("types040", append([]field{{"version", strType{}}}, ipConfigFields...))
	result100   = resultSchema("types100", ipConfigFields)
	resultTypes = map[string]struct {
		schema    structType
		supported []string
	}{
		"0.3.0": {result040, []string{"0.3.0", "0.3.1", "0.4.0"}},
		"0.3.1": {result040, []string{"0.3.0", "0.3.1", "0.4.0"}},
		"0.4.0": {result040, []string{"0.3.0", "0.3.1", "0.4.0"}},
		"1.0.0": {result100, []string{"1.0.0"}},
		"1.1.0": {result100, []string{"1.0.0", "1.1.0"}},
	}
)

// goSpace is Go's `unicode.IsSpace`, which `strings.TrimSpace` trims.
const goSpace = "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"

type address struct {
	net     ipNet
	gateway []byte
}

// entry is an address as static collects it: its text, parsed where it came from
// (CNI_ARGS, `ips`) or only once all are collected (`ipam.addresses`).
type entry struct {
	text    string
	net     *ipNet
	gateway []byte
}

type ipamConfig struct {
	addresses []address
	routes    []any
	dns       map[string]any
}

// envArgs is libcni's `LoadArgs` into static's `IPAMEnvArgs`: IP and GATEWAY. The
// host has split CNI_ARGS at `;` and each pair at its first `=`; Go splits a pair at
// every `=` and refuses more than one.
func envArgs(pairs []ipam.Arg) (string, string, *ipam.Error) {
	var ip, gateway string
	ignoreUnknown := false
	var unknown []string
	for _, p := range pairs {
		pair := p.Key + "=" + p.Value
		if strings.Contains(p.Value, "=") {
			return "", "", cniError("ARGS: invalid pair %s", strconv.Quote(pair))
		}
		switch p.Key {
		case "IP":
			ip = p.Value
		case "GATEWAY":
			gateway = p.Value
		case "IgnoreUnknown":
			lowered := strings.ToLower(p.Value)
			switch lowered {
			case "1", "true":
				ignoreUnknown = true
			case "0", "false":
				ignoreUnknown = false
			default:
				return "", "", cniError("ARGS: error parsing value of pair %s: boolean unmarshal error: invalid input %s", strconv.Quote(pair), lowered)
			}
		case "CommonArgs":
			return "", "", cniError("ARGS: cannot unmarshal into field 'CommonArgs' - type '*types.CommonArgs' does not implement encoding.TextUnmarshaler")
		default:
			unknown = append(unknown, pair)
		}
	}
	if len(unknown) > 0 && !ignoreUnknown {
		quoted := make([]string, len(unknown))
		for i, u := range unknown {
			quoted[i] = strconv.Quote(u)
		}
		return "", "", cniError("ARGS: unknown args [%s]", strings.Join(quoted, " "))
	}
	return ip, gateway, nil
}

func replacing(ips []any) ([]entry, *ipam.Error) {
	var entries []entry
	for _, v := range ips {
		text := v.(string)
		n, err := parseCIDR(text)
		if err != nil {
			return nil, cniError("an entry in the 'ips' field is NOT in CIDR notation, got: '%s'", text)
		}
		entries = append(entries, entry{text: text, net: &n})
	}
	return entries, nil
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// loadIPAMConfig is static's `LoadIPAMConfig`: the addresses, routes and DNS a call
// gets.
func loadIPAMConfig(config string, args []ipam.Arg) (*ipamConfig, *ipam.Error) {
	doc, err := loads(config)
	if err != nil {
		return nil, cniError("%v", err)
	}
	decoded, err := unmarshal(netType, doc)
	if err != nil {
		return nil, cniError("%v", err)
	}
	net := asMap(decoded)
	conf := asMap(net["ipam"])
	if conf == nil {
		return nil, cniError("IPAM config missing 'ipam' key")
	}
	var entries []entry
	for _, a := range asList(conf["addresses"]) {
		a := asMap(a)
		entries = append(entries, entry{text: a["address"].(string), gateway: a["gateway"].([]byte)})
	}
	if len(args) > 0 {
		ipArg, gatewayArg, err := envArgs(args)
		if err != nil {
			return nil, err
		}
		if ipArg != "" {
			for _, item := range strings.Split(ipArg, ",") {
				text := strings.Trim(item, goSpace)
				n, err := parseCIDR(text)
				if err != nil {
					return nil, cniError("the 'ip' field is expected to be in CIDR notation, got: '%s'", text)
				}
				entries = append(entries, entry{text: text, net: &n})
			}
		}
		if gatewayArg != "" {
			for _, item := range strings.Split(gatewayArg, ",") {
				gateway := parseIP(strings.Trim(item, goSpace))
				if gateway == nil {
					return nil, cniError("invalid gateway address: %s", item)
				}
				for i := range entries {
					if entries[i].net != nil && entries[i].net.contains(gateway) {
						entries[i].gateway = gateway
					}
				}
			}
		}
	}
	var replaced *ipam.Error
	if cni := asMap(asMap(net["args"])["cni"]); len(asList(cni["ips"])) > 0 {
		if entries, replaced = replacing(asList(cni["ips"])); replaced != nil {
			return nil, replaced
		}
	}
	if ips := asList(asMap(net["runtimeConfig"])["ips"]); len(ips) > 0 {
		if entries, replaced = replacing(ips); replaced != nil {
			return nil, replaced
		}
	}
	out := &ipamConfig{routes: asList(conf["routes"]), dns: asMap(conf["dns"])}
	for i := range entries {
		if entries[i].net == nil {
			n, err := parseCIDR(entries[i].text)
			if err != nil {
				return nil, cniError("the 'address' field is expected to be in CIDR notation, got: '%s'", entries[i].text)
			}
			entries[i].net = &n
		}
		out.addresses = append(out.addresses, address{*entries[i].net, entries[i].gateway})
	}
	return out, nil
}

// add is ADD's result.
func add(config string, args []ipam.Arg) (*ipam.Result, *ipam.Error) {
	conf, err := loadIPAMConfig(config, args)
	if err != nil {
		return nil, err
	}
	result := &ipam.Result{}
	for i, r := range conf.routes {
		route := asMap(r)
		if route == nil {
			// static prints `null` for it, which no CNI result may hold.
			return nil, cniError("ipam.routes[%d] is null", i)
		}
		out := ipam.Route{Dst: "<nil>"}
		if dst, ok := route["dst"].(ipNet); ok {
			out.Dst = dst.String()
		}
		if gw, _ := route["gw"].([]byte); gw != nil {
			out.GW = ipam.Some(ipString(gw))
		}
		result.Routes = append(result.Routes, out)
	}
	for _, a := range conf.addresses {
		ip := ipam.IPConfig{Address: a.net.String()}
		if a.gateway != nil {
			ip.Gateway = ipam.Some(ipString(a.gateway))
		}
		result.IPs = append(result.IPs, ip)
	}
	strs := func(v any) []string {
		var out []string
		for _, s := range asList(v) {
			out = append(out, s.(string))
		}
		return out
	}
	result.DNS.Nameservers = strs(conf.dns["nameservers"])
	if domain, _ := conf.dns["domain"].(string); domain != "" {
		result.DNS.Domain = &domain
	}
	result.DNS.Search = strs(conf.dns["search"])
	result.DNS.Options = strs(conf.dns["options"])
	return result, nil
}

// goMapValue is a value as it comes back from Go's `map[string]interface{}` and
// `json.Marshal`: objects with one entry per key (the last), sorted; numbers through
// float64.
func goMapValue(v any) any {
	switch v := v.(type) {
	case *object:
		last := map[string]any{}
		for _, p := range v.pairs {
			last[p.key] = goMapValue(p.value)
		}
		return sortedObject(last)
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = goMapValue(x)
		}
		return out
	case numberText:
		f, _ := strconv.ParseFloat(string(v), 64)
		if f == math.Trunc(f) && math.Abs(f) < 1e21 {
			return numberText(strconv.FormatFloat(f, 'f', -1, 64))
		}
		return numberText(pythonRepr(f))
	}
	return v
}

// pythonRepr is the shortest text that reads back as f, as static-py's emulation
// prints a non-integral float64 (Go's encoding/json prints it the same way for the
// values a prevResult holds).
func pythonRepr(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func sortedObject(m map[string]any) *object {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	o := &object{}
	for _, k := range keys {
		o.pairs = append(o.pairs, pair{k, m[k]})
	}
	return o
}

// check is static's CHECK: every configured address found in `prevResult` must have
// the configured gateway (when one is configured). Addresses missing from it are no
// error, as in static.
func check(config string, args []ipam.Arg, ifname string) *ipam.Error {
	conf, cerr := loadIPAMConfig(config, args)
	if cerr != nil {
		return cerr
	}
	doc, err := loads(config)
	if err != nil {
		return cniError("failed to load netconf: %v", err)
	}
	decoded, err := unmarshal(netConfType, doc)
	if err != nil {
		return cniError("failed to load netconf: %v", err)
	}
	netconf := asMap(decoded)
	raw := asMap(netconf["prevResult"])
	if raw == nil {
		return cniError("Required prevResult missing")
	}
	version := netconf["cniVersion"].(string)
	if v, _ := raw["CNIVersion"].(string); v == "" {
		raw["CNIVersion"] = version
	}
	types, ok := resultTypes[version]
	if !ok {
		return cniError("could not parse prevResult: unsupported CNI result version %s", strconv.Quote(version))
	}
	document := goMapValue(mapObject(raw))
	decodedResult, err := unmarshal(types.schema, document)
	if err != nil {
		return cniError("could not parse prevResult: %v", err)
	}
	result := asMap(decodedResult)
	found := false
	for _, v := range types.supported {
		found = found || v == result["cniVersion"]
	}
	if !found {
		return cniError("could not parse prevResult: result type supports [%s] but unmarshalled CNIVersion is %s",
			strings.Join(types.supported, " "), strconv.Quote(result["cniVersion"].(string)))
	}
	for _, a := range conf.addresses {
		for i, ip := range asList(result["ips"]) {
			ipConf := asMap(ip)
			if ipConf == nil {
				// static dereferences it and crashes.
				return cniError("prevResult.ips[%d] is null", i)
			}
			held, ok := ipConf["address"].(ipNet)
			if !ok || !ipEqual(a.net.ip, held.ip) {
				continue
			}
			gateway, _ := ipConf["gateway"].([]byte)
			if a.gateway == nil || (gateway != nil && ipEqual(a.gateway, gateway)) {
				break
			}
			return cniError("static: Failed to match addr %s on interface %s", ipString(held.ip), ifname)
		}
	}
	return nil
}

// mapObject is a decoded `map[string]interface{}` as a document object again.
func mapObject(m map[string]any) *object {
	o := &object{}
	for k, v := range m {
		o.pairs = append(o.pairs, pair{k, v})
	}
	return o
}
