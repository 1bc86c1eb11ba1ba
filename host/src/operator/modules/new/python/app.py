"""The component's exports (`cni:ipam@0.2.5`, wit/ipam.wit): each interface is a class
named after it, one method per function, over the pure logic of `ipam.py`. A method
returns its value, or raises `Err` with a CNI error. `del` is `del_`, since `del` is a
Python keyword. The host's store is passed to `ipam` as its store."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import capabilities, inspect, usage, wide_usage
from wit_world.imports import store, types

import ipam
from ipam import CniError


def failed(e: CniError) -> Err:
    return Err(types.Error(code=e.code, msg=e.msg, details=""))


class Handler(exports.Handler):
    def add(self, request: types.Request) -> types.IpamResult:
        try:
            namespace = dict(request.args).get("K8S_POD_NAMESPACE", "")
            address = ipam.add(store, request.config, request.container_id, request.ifname, namespace)
        except CniError as e:
            raise failed(e)
        return types.IpamResult(
            ips=[types.IpConfig(address=address, gateway=None)],
            routes=[],
            dns=types.Dns(nameservers=[], domain=None, search=[], options=[]),
        )

    def del_(self, request: types.Request) -> None:
        ipam.delete(store, request.container_id, request.ifname)

    def check(self, request: types.Request) -> None:
        try:
            ipam.check(store, request.container_id, request.ifname)
        except CniError as e:
            raise failed(e)

    def gc(self, request: types.Request, valid_attachments: list[types.Attachment]) -> None:
        ipam.gc(store, {ipam.owner(a.container_id, a.ifname) for a in valid_attachments})

    def status(self, request: types.Request) -> None:
        return None


class Inspect(exports.Inspect):
    def allocations(self, context: inspect.Context) -> list[inspect.Allocation]:
        return [
            inspect.Allocation(
                address=address, container_id=container_id, ifname=ifname,
                since=None, attributes=[],
            )
            for address, container_id, ifname in ipam.allocations(store)
        ]

    def pools(self, context: inspect.Context) -> list[inspect.Pool]:
        if context.config is None:
            return []
        try:
            name, capacity, in_use = ipam.pool(store, context.config)
        except CniError as e:
            raise failed(e)
        return [
            inspect.Pool(
                name=name, capacity=capacity, in_use=in_use, excluded=0,
                cooling_down=0, free=max(capacity - in_use, 0),
            )
        ]


class Migrate(exports.Migrate):
    def import_state(self, format, network_name, config, files):
        raise failed(CniError(ipam.NOT_IMPLEMENTED, f"this module cannot import format {format!r}"))


class Nodes(exports.Nodes):
    def release_node(self, context, node, dry_run):
        raise failed(CniError(ipam.NOT_IMPLEMENTED, f"this module keeps nothing per node {node!r}"))


class Reservations(exports.Reservations):
    def reserve(self, context, cidr, note, force):
        raise failed(CniError(ipam.NOT_IMPLEMENTED, f"this module keeps no reservations: cannot reserve {cidr}"))

    def unreserve(self, context, cidr):
        raise failed(CniError(ipam.NOT_IMPLEMENTED, f"this module keeps no reservations: cannot unreserve {cidr}"))

    def all(self, context):
        raise failed(CniError(ipam.NOT_IMPLEMENTED, "this module keeps no reservations"))


class Usage(exports.Usage):
    def pools(self, context: inspect.Context) -> list[usage.PoolUsage]:
        return [
            usage.PoolUsage(
                kind=usage.Kind.POOL, name=p.name, parent=None, node=None,
                capacity=p.capacity, in_use=p.in_use, excluded=p.excluded,
                cooling_down=p.cooling_down, reserved=0, borrowed=0, free=p.free,
                warn_percent=None,
            )
            for p in Inspect().pools(context)
        ]


class WideUsage(exports.WideUsage):
    """`usage` with exact counts (`count` is `high` * 2**64 + `low`): Python's ints
    are exact, so a pool of any size counts right."""

    def pools(self, context: inspect.Context) -> list[wide_usage.PoolUsage]:
        def count(n: int) -> wide_usage.Count:
            return wide_usage.Count(high=n >> 64, low=n & (2**64 - 1))

        return [
            wide_usage.PoolUsage(
                kind=p.kind, name=p.name, parent=p.parent, node=p.node,
                capacity=None if p.capacity is None else count(p.capacity),
                in_use=count(p.in_use), excluded=count(p.excluded),
                cooling_down=count(p.cooling_down), reserved=count(p.reserved),
                borrowed=count(p.borrowed),
                free=None if p.free is None else count(p.free),
                warn_percent=p.warn_percent,
            )
            for p in Usage().pools(context)
        ]


class Capabilities(exports.Capabilities):
    """What `wasm-ipam inspect` shows as implemented: keep it true when you change the
    classes above."""

    def functions(self) -> list[capabilities.Function]:
        origin = capabilities.Origin
        not_implemented = {
            "migrate.import-state", "nodes.release-node", "reservations.reserve",
            "reservations.unreserve", "reservations.all",
        }
        derived = {"usage.pools", "wide-usage.pools"}  # both answer with Inspect's pools
        return [
            capabilities.Function(
                name=name,
                origin=origin.NOT_IMPLEMENTED if name in not_implemented
                else origin.DERIVED if name in derived
                else origin.MODULE,
            )
            for name in [
                "handler.add", "handler.del", "handler.check", "handler.gc",
                "handler.status", "inspect.allocations", "inspect.pools",
                "migrate.import-state", "nodes.release-node", "reservations.reserve",
                "reservations.unreserve", "reservations.all", "usage.pools",
                "wide-usage.pools",
            ]
        ]
