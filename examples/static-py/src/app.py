"""The component's exports: `cni:ipam@0.2.5`'s handler, inspect, migrate, nodes and
capabilities, over the pure functions of `static_ipam`.

static keeps no state, so this module never touches the store: DEL, GC and STATUS
succeed with nothing to do, and `inspect` answers honestly that nothing is allocated
(`wasm-ipam list` shows no addresses, `stats` no pools). There is nothing to take
over from another plugin, so `migrate` refuses every format, and nothing is kept per
node, so `nodes` has nothing to release; `capabilities` says those two are not
implemented.
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import capabilities, inspect, migrate, nodes
from wit_world.imports import types

import static_ipam
from static_ipam import CniError

# codes/: what the guest SDK answers for an operation or import format a module does
# not implement.
NOT_IMPLEMENTED = 121


def _error(e: CniError) -> Err:
    return Err(types.Error(code=e.code, msg=e.msg, details=""))


def _result(result: dict) -> types.IpamResult:
    dns = result["dns"]
    return types.IpamResult(
        ips=[
            types.IpConfig(address=ip["address"], gateway=ip["gateway"])
            for ip in result["ips"]
        ],
        routes=[
            types.Route(
                dst=route["dst"],
                gw=route["gw"],
                mtu=None,
                advmss=None,
                priority=None,
                table=None,
                scope=None,
            )
            for route in result["routes"]
        ],
        dns=types.Dns(
            nameservers=dns["nameservers"] or [],
            domain=dns["domain"] or None,
            search=dns["search"] or [],
            options=dns["options"] or [],
        ),
    )


class Handler(exports.Handler):
    def add(self, request: types.Request) -> types.IpamResult:
        try:
            return _result(static_ipam.add(request.config, request.args))
        except CniError as e:
            raise _error(e)

    def del_(self, request: types.Request) -> None:
        # Nothing required: static allocates nothing, and its DEL reads no config.
        return None

    def check(self, request: types.Request) -> None:
        try:
            static_ipam.check(request.config, request.args, request.ifname)
        except CniError as e:
            raise _error(e)

    def gc(self, request: types.Request, valid_attachments: list[types.Attachment]) -> None:
        return None

    def status(self, request: types.Request) -> None:
        return None


class Inspect(exports.Inspect):
    def allocations(self, context: inspect.Context) -> list[inspect.Allocation]:
        return []

    def pools(self, context: inspect.Context) -> list[inspect.Pool]:
        return []


class Migrate(exports.Migrate):
    def import_state(
        self,
        format: str,
        network_name: str,
        config: str | None,
        files: list[migrate.StateFile],
    ) -> migrate.ImportReport:
        raise Err(
            types.Error(
                code=NOT_IMPLEMENTED,
                msg=f"static keeps no state: nothing to import from {format!r}",
                details="",
            )
        )


class Nodes(exports.Nodes):
    def release_node(
        self, context: nodes.Context, node: str, dry_run: bool
    ) -> nodes.ReleaseReport:
        raise Err(
            types.Error(
                code=NOT_IMPLEMENTED,
                msg=f"static keeps nothing per node: nothing to release for node {node!r}",
                details="",
            )
        )


class Reservations(exports.Reservations):
    def _none(self, what: str):
        return Err(
            types.Error(code=NOT_IMPLEMENTED, msg=f"static keeps no reservations{what}", details="")
        )

    def reserve(self, context: nodes.Context, cidr: str, note: str, force: bool):
        raise self._none(f": cannot reserve {cidr}")

    def unreserve(self, context: nodes.Context, cidr: str):
        raise self._none(f": cannot unreserve {cidr}")

    def all(self, context: nodes.Context):
        raise self._none("")


class Usage(exports.Usage):
    def pools(self, context: inspect.Context) -> list:
        return []


class WideUsage(exports.WideUsage):
    def pools(self, context: inspect.Context) -> list:
        return []


class Capabilities(exports.Capabilities):
    def functions(self) -> list[capabilities.Function]:
        """Everything above is this module's own answer, but migrate, nodes and
        reservations only say they do not apply (`wasm-ipam inspect` shows them as not implemented)."""
        origin = capabilities.Origin
        not_implemented = {
            "migrate.import-state", "nodes.release-node", "reservations.reserve",
            "reservations.unreserve", "reservations.all",
        }
        names = [
            "handler.add", "handler.del", "handler.check", "handler.gc", "handler.status",
            "inspect.allocations", "inspect.pools", "migrate.import-state", "nodes.release-node",
            "reservations.reserve", "reservations.unreserve", "reservations.all", "usage.pools",
            "wide-usage.pools",
        ]
        return [
            capabilities.Function(
                name=name,
                origin=origin.NOT_IMPLEMENTED if name in not_implemented else origin.MODULE,
            )
            for name in names
        ]
