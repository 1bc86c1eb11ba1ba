"""The reference `static` IPAM plugin's semantics (containernetworking/plugins
v1.1.1, Debian bookworm's `/usr/lib/cni/static`), as pure functions of the call.

static keeps no state: ADD answers the addresses, routes and DNS its configuration
names; CHECK compares them with `prevResult`; DEL has nothing to release. Addresses
come from `ipam.addresses`, plus CNI_ARGS `IP=...;GATEWAY=...` (a gateway applies to
the CNI_ARGS addresses that contain it); `args.cni.ips`, and after it the runtime's
`ips` capability (`runtimeConfig.ips`), replace them all. Errors carry skel's code for
a plain Go error, 999, and static's text.

Nothing here knows WebAssembly: `app.py` adapts these functions to `cni:ipam`, and
`test_static_ipam.py` runs them under any Python.
"""

from dataclasses import dataclass
from typing import Any, Optional

from gojson import (
    Bool,
    Custom,
    GoError,
    GoNumber,
    GoType,
    Int,
    IP,
    Interface,
    JsonObject,
    Map,
    Ptr,
    Slice,
    Str,
    Struct,
    go_quote,
    loads,
    unmarshal,
)
from goip import IPNet, ParseError, ip_equal, ip_string, parse_cidr, parse_ip

# skel's code for an error that is not a `*types.Error`: every error static returns.
ERR_INTERNAL = 999


class CniError(Exception):
    def __init__(self, msg: str, code: int = ERR_INTERNAL):
        super().__init__(msg)
        self.code = code
        self.msg = msg


def _ipnet(value: Any) -> IPNet:
    """libcni's `types.IPNet`: a string parsed by `ParseCIDR`, host bits kept."""
    return parse_cidr(unmarshal(Str(), value))


def _not_emulated(key: str) -> Custom:
    def refuse(value: Any) -> None:
        if value is not None:
            raise GoError(f"static-py does not emulate the Go-internal key {key!r}")

    return Custom("", refuse)


IPNET = Custom("types.IPNet", _ipnet)
ROUTE_FIELDS = Struct("types.route", "route", [("dst", IPNET), ("gw", IP())])
ROUTE = Custom("types.Route", lambda value: unmarshal(ROUTE_FIELDS, value))
DNS = Struct(
    "types.DNS",
    "DNS",
    [
        ("nameservers", Slice(Str())),
        ("domain", Str()),
        ("search", Slice(Str())),
        ("options", Slice(Str())),
    ],
)
ADDRESS = Struct(
    "main.Address",
    "Address",
    [
        ("address", Str()),
        ("gateway", IP()),
        ("Address", _not_emulated("Address")),
        ("Version", Str()),
    ],
)
IPAM_CONFIG = Struct(
    "main.IPAMConfig",
    "IPAMConfig",
    [
        ("Name", Str()),
        ("type", Str()),
        ("routes", Slice(Ptr(ROUTE))),
        ("addresses", Slice(ADDRESS)),
        ("dns", DNS),
    ],
)
IPAM_ARGS = Struct("main.IPAMArgs", "IPAMArgs", [("ips", Slice(Str()))])
NET = Struct(
    "main.Net",
    "Net",
    [
        ("name", Str()),
        ("cniVersion", Str()),
        ("ipam", Ptr(IPAM_CONFIG)),
        (
            "runtimeConfig",
            Struct(
                'struct { IPs []string "json:\\"ips,omitempty\\"" }',
                "",
                [("ips", Slice(Str()))],
            ),
        ),
        (
            "args",
            Ptr(
                Struct(
                    'struct { A *main.IPAMArgs "json:\\"cni\\"" }',
                    "",
                    [("cni", Ptr(IPAM_ARGS))],
                )
            ),
        ),
    ],
)
# libcni's `types.NetConf`, which CHECK decodes again for `prevResult`.
NETCONF = Struct(
    "types.NetConf",
    "NetConf",
    [
        ("cniVersion", Str()),
        ("name", Str()),
        ("type", Str()),
        ("capabilities", Map(Bool())),
        ("ipam", Struct("types.IPAM", "IPAM", [("type", Str())])),
        ("dns", DNS),
        ("prevResult", Map(Interface())),
    ],
)


def _result_schema(package: str, ip_fields: list[tuple[str, GoType]]) -> Struct:
    ip_config = Struct(f"{package}.ipConfig", "ipConfig", ip_fields)
    interface = Struct(
        f"{package}.Interface",
        "Interface",
        [("name", Str()), ("mac", Str()), ("sandbox", Str())],
    )
    return Struct(
        f"{package}.Result",
        "Result",
        [
            ("cniVersion", Str()),
            ("interfaces", Slice(Ptr(interface))),
            (
                "ips",
                Slice(
                    Ptr(
                        Custom(
                            f"{package}.IPConfig",
                            lambda value: unmarshal(ip_config, value),
                        )
                    )
                ),
            ),
            ("routes", Slice(Ptr(ROUTE))),
            ("dns", DNS),
        ],
    )


_IP_CONFIG_FIELDS = [
    ("interface", Ptr(Int())),
    ("address", IPNET),
    ("gateway", IP()),
]
# Which result type libcni decodes `prevResult` into, by the config's cniVersion, and
# the result versions that type accepts. 1.1.0 is not spoken by Debian's static
# (libcni 1.1); it is decoded as libcni 1.2 does.
_RESULT_040 = _result_schema("types040", [("version", Str())] + _IP_CONFIG_FIELDS)
_RESULT_100 = _result_schema("types100", _IP_CONFIG_FIELDS)
RESULT_TYPES = {
    "0.3.0": (_RESULT_040, ["0.3.0", "0.3.1", "0.4.0"]),
    "0.3.1": (_RESULT_040, ["0.3.0", "0.3.1", "0.4.0"]),
    "0.4.0": (_RESULT_040, ["0.3.0", "0.3.1", "0.4.0"]),
    "1.0.0": (_RESULT_100, ["1.0.0"]),
    "1.1.0": (_RESULT_100, ["1.0.0", "1.1.0"]),
}

# Go's `unicode.IsSpace`, which `strings.TrimSpace` trims.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


@dataclass
class Address:
    net: IPNet
    gateway: Optional[bytes]


@dataclass
class _Entry:
    """An address as static collects it: its text, parsed where it came from (CNI_ARGS,
    `ips`) or only once all are collected (`ipam.addresses`)."""

    text: str
    net: Optional[IPNet]
    gateway: Optional[bytes] = None


@dataclass
class IpamConfig:
    addresses: list[Address]
    routes: list[Optional[dict]]
    dns: dict


def _env_args(pairs: list[tuple[str, str]]) -> tuple[str, str]:
    """libcni's `LoadArgs` into static's `IPAMEnvArgs`: IP and GATEWAY.

    The host has split CNI_ARGS at `;` and each pair at its first `=`; Go splits a pair
    at every `=` and refuses more than one."""
    ip = gateway = ""
    ignore_unknown = False
    unknown = []
    for key, value in pairs:
        pair = f"{key}={value}"
        if "=" in value:
            raise CniError(f"ARGS: invalid pair {go_quote(pair)}")
        if key == "IP":
            ip = value
        elif key == "GATEWAY":
            gateway = value
        elif key == "IgnoreUnknown":
            lowered = value.lower()
            if lowered not in ("1", "true", "0", "false"):
                raise CniError(
                    f"ARGS: error parsing value of pair {go_quote(pair)}: "
                    f"boolean unmarshal error: invalid input {lowered}"
                )
            ignore_unknown = lowered in ("1", "true")
        elif key == "CommonArgs":
            raise CniError(
                "ARGS: cannot unmarshal into field 'CommonArgs' - type "
                "'*types.CommonArgs' does not implement encoding.TextUnmarshaler"
            )
        else:
            unknown.append(pair)
    if unknown and not ignore_unknown:
        raise CniError(f"ARGS: unknown args [{' '.join(go_quote(p) for p in unknown)}]")
    return ip, gateway


def _replacing(ips: list[str]) -> list[_Entry]:
    entries = []
    for text in ips:
        try:
            entries.append(_Entry(text, parse_cidr(text)))
        except ParseError:
            raise CniError(
                f"an entry in the 'ips' field is NOT in CIDR notation, got: '{text}'"
            )
    return entries


def load_ipam_config(config: str, args: list[tuple[str, str]]) -> IpamConfig:
    """static's `LoadIPAMConfig`: the addresses, routes and DNS a call gets."""
    try:
        net = unmarshal(NET, loads(config))
    except (GoError, ParseError) as e:
        raise CniError(str(e))
    ipam = net["ipam"]
    if ipam is None:
        raise CniError("IPAM config missing 'ipam' key")
    entries = [_Entry(a["address"], None, a["gateway"]) for a in ipam["addresses"] or []]
    if args:
        ip_arg, gateway_arg = _env_args(args)
        if ip_arg:
            for item in ip_arg.split(","):
                text = item.strip(_GO_SPACE)
                try:
                    entries.append(_Entry(text, parse_cidr(text)))
                except ParseError:
                    raise CniError(
                        f"the 'ip' field is expected to be in CIDR notation, got: '{text}'"
                    )
        if gateway_arg:
            for item in gateway_arg.split(","):
                gateway = parse_ip(item.strip(_GO_SPACE))
                if gateway is None:
                    raise CniError(f"invalid gateway address: {item}")
                for entry in entries:
                    if entry.net is not None and entry.net.contains(gateway):
                        entry.gateway = gateway
    cni_args = net["args"] and net["args"]["cni"]
    if cni_args and cni_args["ips"]:
        entries = _replacing(cni_args["ips"])
    if net["runtimeConfig"]["ips"]:
        entries = _replacing(net["runtimeConfig"]["ips"])
    for entry in entries:
        if entry.net is None:
            try:
                entry.net = parse_cidr(entry.text)
            except ParseError:
                raise CniError(
                    "the 'address' field is expected to be in CIDR notation, "
                    f"got: '{entry.text}'"
                )
    return IpamConfig(
        addresses=[Address(e.net, e.gateway) for e in entries],
        routes=ipam["routes"] or [],
        dns=ipam["dns"],
    )


def add(config: str, args: list[tuple[str, str]]) -> dict:
    """ADD's result, in CNI 1.0.0 JSON form (the host converts it to the config's
    version): `{"ips": [...], "routes": [...], "dns": {...}}`."""
    conf = load_ipam_config(config, args)
    routes = []
    for i, route in enumerate(conf.routes):
        if route is None:
            # static prints `null` for it, which no CNI result may hold.
            raise CniError(f"ipam.routes[{i}] is null")
        dst = route["dst"]
        routes.append(
            {
                "dst": str(dst) if dst is not None else "<nil>",
                "gw": ip_string(route["gw"]) if route["gw"] is not None else None,
            }
        )
    return {
        "ips": [
            {
                "address": str(a.net),
                "gateway": ip_string(a.gateway) if a.gateway is not None else None,
            }
            for a in conf.addresses
        ],
        "routes": routes,
        "dns": conf.dns,
    }


def _go_map_value(value: Any) -> Any:
    """A value as it comes back from Go's `map[string]interface{}` and `json.Marshal`:
    objects with one entry per key (the last), sorted; numbers through float64."""
    if isinstance(value, JsonObject):
        return JsonObject(sorted((k, _go_map_value(v)) for k, v in dict(value).items()))
    if isinstance(value, list):
        return [_go_map_value(v) for v in value]
    if isinstance(value, GoNumber):
        number = float(value.text)
        if number.is_integer() and abs(number) < 1e21:
            return GoNumber(str(int(number)))
        return GoNumber(repr(number))
    return value


def check(config: str, args: list[tuple[str, str]], ifname: str) -> None:
    """static's CHECK: every configured address found in `prevResult` must have the
    configured gateway (when one is configured). Addresses missing from it are no
    error, as in static."""
    conf = load_ipam_config(config, args)
    try:
        netconf = unmarshal(NETCONF, loads(config))
    except (GoError, ParseError) as e:
        raise CniError(f"failed to load netconf: {e}")
    raw = netconf["prevResult"]
    if raw is None:
        raise CniError("Required prevResult missing")
    version = netconf["cniVersion"]
    if raw.get("CNIVersion", "") == "":
        raw["CNIVersion"] = version
    if version not in RESULT_TYPES:
        raise CniError(
            f"could not parse prevResult: unsupported CNI result version {go_quote(version)}"
        )
    schema, supported = RESULT_TYPES[version]
    document = _go_map_value(JsonObject(raw.items()))
    try:
        result = unmarshal(schema, document)
    except (GoError, ParseError) as e:
        raise CniError(f"could not parse prevResult: {e}")
    if result["cniVersion"] not in supported:
        raise CniError(
            f"could not parse prevResult: result type supports [{' '.join(supported)}] "
            f"but unmarshalled CNIVersion is {go_quote(result['cniVersion'])}"
        )
    for address in conf.addresses:
        for i, ip in enumerate(result["ips"] or []):
            if ip is None:
                # static dereferences it and crashes.
                raise CniError(f"prevResult.ips[{i}] is null")
            found = ip["address"]
            if found is None or not ip_equal(address.net.ip, found.ip):
                continue
            if address.gateway is None or (
                ip["gateway"] is not None and ip_equal(address.gateway, ip["gateway"])
            ):
                break
            raise CniError(
                f"static: Failed to match addr {ip_string(found.ip)} on interface {ifname}"
            )
