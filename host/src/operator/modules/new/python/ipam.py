"""The module's logic, pure: it hands out the addresses of one range in order, one per
attachment, kept as `ip/<address>` -> `<container id>/<ifname>` in the store it is
given (the host's in the component, a dict in `test_ipam.py`)."""

import ipaddress
import json

NOT_IMPLEMENTED = 121  # the SDK's code for "this module does not do that"
POOL_FULL = 140  # the first code a module may use for its own failures
NOT_SERVED = 140  # a pod of a namespace the range does not serve: also the module's own


class CniError(Exception):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code
        self.msg = msg


# The module's own `ipam` keys, and the host's beside them (wasm-ipam's table).
KEYS = ("start", "end", "prefixLen", "namespaces")
HOST_KEYS = {{host_keys}}


def distance(a: str, b: str) -> int:
    """Levenshtein distance."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a):
        diagonal, row[0] = row[0], i + 1
        for j, cb in enumerate(b):
            diagonal, row[j + 1] = row[j + 1], min(row[j + 1] + 1, row[j] + 1, diagonal + (ca != cb))
    return row[len(b)]


def check_keys(ipam: dict) -> None:
    """A key that is neither this module's nor the host's but close to one of the
    module's (a letter off, or the same but for case) is refused naming it, as the Rust
    and Go SDKs refuse theirs: keys match exactly, case included."""
    for key in sorted(ipam):
        if key in KEYS or key in HOST_KEYS:
            continue
        near = [(distance(key.lower(), k.lower()), k) for k in KEYS]
        near = [(d, k) for d, k in near if d <= (1 if len(k) <= 4 else 2)]
        if near:
            raise CniError(7, f"ipam.{key} is not a key of this module: did you mean {min(near)[1]}? "
                              f"(keys match exactly, case included; its keys: {', '.join(KEYS)})")


def read_range(config: str):
    """`ipam.start`, `ipam.end` and `ipam.prefixLen`; one missing or wrong is named by
    its key path and value, as the host and the Rust and Go SDKs name theirs."""
    ipam = json.loads(config).get("ipam", {})
    check_keys(ipam)

    def field(key, parse):
        if key not in ipam:
            raise CniError(7, f"invalid ipam.{key}: missing")
        try:
            return parse(ipam[key])
        except (TypeError, ValueError) as e:
            raise CniError(7, f"invalid ipam.{key}: {ipam[key]!r}: {e}")

    return field("start", ipaddress.IPv4Address), field("end", ipaddress.IPv4Address), field("prefixLen", int)


def addresses(start, end):
    return [ipaddress.IPv4Address(n) for n in range(int(start), int(end) + 1)]


def owner(container_id: str, ifname: str) -> bytes:
    return f"{container_id}/{ifname}".encode()


def serves(config: str, namespace: str) -> None:
    """Refuses a pod of a namespace the range does not serve (`ipam.namespaces`; every
    namespace when absent). The runtime names the pod in CNI_ARGS
    (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`), as kubelet's runtimes do."""
    namespaces = json.loads(config).get("ipam", {}).get("namespaces")
    if namespaces is not None and namespace not in namespaces:
        raise CniError(NOT_SERVED, f"the range serves the namespaces {namespaces}, not {namespace!r}")


def add(store, config: str, container_id: str, ifname: str, namespace: str = "") -> str:
    """The attachment's own address again if it has one (a retried ADD), else the
    first free one, as `address/prefix`."""
    start, end, prefix_len = read_range(config)
    serves(config, namespace)
    me = owner(container_id, ifname)
    held = {ip: store.get(f"ip/{ip}") for ip in addresses(start, end)}
    mine = [ip for ip, who in held.items() if who == me]
    free = [ip for ip, who in held.items() if who is None]
    if not mine and not free:
        raise CniError(POOL_FULL, "no address left in the range")
    ip = (mine + free)[0]
    store.put(f"ip/{ip}", me)
    return f"{ip}/{prefix_len}"


def delete(store, container_id: str, ifname: str) -> None:
    me = owner(container_id, ifname)
    for key, who in store.list_prefix("ip/"):
        if who == me:
            store.delete(key)


def check(store, container_id: str, ifname: str) -> None:
    me = owner(container_id, ifname)
    if all(who != me for _, who in store.list_prefix("ip/")):
        raise CniError(3, "no address is allocated to this attachment")


def gc(store, valid: set) -> None:
    """Releases every address no attachment of `valid` (owners, as `owner` makes
    them) holds."""
    for key, who in store.list_prefix("ip/"):
        if who not in valid:
            store.delete(key)


def allocations(store):
    """(address, container id, ifname) of each address handed out."""
    held = []
    for key, who in store.list_prefix("ip/"):
        container_id, _, ifname = who.decode(errors="replace").partition("/")
        held.append((key[len("ip/"):], container_id, ifname))
    return held


def pool(store, config: str):
    """(name, capacity, in use) of the range."""
    start, end, _ = read_range(config)
    return f"{start}-{end}", int(end) - int(start) + 1, len(store.list_prefix("ip/"))
