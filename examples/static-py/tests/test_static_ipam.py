"""Unit tests of `static_ipam` under plain CPython (no WebAssembly, no host):
`python3 -m unittest discover examples/static-py/tests` (the integration suite runs it).

`reference.jsonl` holds calls recorded from Debian bookworm's
`/usr/lib/cni/static` (containernetworking-plugins 1.1.1+ds1-3+b5): command, CNI_ARGS,
netconf, exit code and stdout. Each is replayed here and must give static's result or
static's error. The integration tests (`tests/integration/static_py.rs`) run the
built component through `wasm-ipam` side by side with the live binary.
"""

import json
import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "src"))

import static_ipam  # noqa: E402
from static_ipam import CniError  # noqa: E402

REFERENCE = HERE / "reference.jsonl"


def _pairs(cni_args: str) -> list[tuple[str, str]]:
    """CNI_ARGS as the host hands them over: split at `;`, then at the first `=`."""
    return [tuple(pair.split("=", 1)) for pair in cni_args.split(";") if pair]


def _as_printed(result: dict) -> dict:
    """A 1.0.0 result as libcni prints it: empty fields left out, `dns` always."""
    printed = {"cniVersion": "1.0.0"}
    for key in ("ips", "routes"):
        entries = [{k: v for k, v in e.items() if v is not None} for e in result[key]]
        if entries:
            printed[key] = entries
    printed["dns"] = {k: v for k, v in result["dns"].items() if v}
    return printed


class ReplaysReference(unittest.TestCase):
    def test_every_recorded_call(self):
        records = [json.loads(line) for line in REFERENCE.read_text().splitlines()]
        self.assertGreater(len(records), 50)
        for record in records:
            with self.subTest(
                command=record["command"], config=record["config"], args=record["cniArgs"]
            ):
                self._replay(record)

    def _replay(self, record):
        args = _pairs(record["cniArgs"])
        try:
            if record["command"] == "ADD":
                got = _as_printed(static_ipam.add(record["config"], args))
            else:
                static_ipam.check(record["config"], args, "eth0")
                got = None
        except CniError as e:
            self.assertNotEqual(
                record["exitCode"], 0, f"static succeeded: {record['stdout']}"
            )
            self.assertEqual({"code": e.code, "msg": e.msg}, record["stdout"])
            return
        self.assertEqual(record["exitCode"], 0, f"static failed: {record['stdout']}")
        if got is not None:
            got["cniVersion"] = record["stdout"]["cniVersion"]
            for ip in record["stdout"].get("ips", []):
                ip.pop("version", None)
        self.assertEqual(got, record["stdout"])


class DeliberateDifferences(unittest.TestCase):
    """Where static's answer is not valid CNI (or it crashes), this module refuses."""

    def conf(self, ipam: dict, **top) -> str:
        return json.dumps({"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "static", **ipam}, **top})

    def test_a_null_route_is_refused(self):
        # static prints `"routes": [null]`.
        with self.assertRaisesRegex(CniError, r"ipam.routes\[0\] is null"):
            static_ipam.add(self.conf({"routes": [None]}), [])

    def test_a_null_previous_ip_is_refused(self):
        # static dereferences it and panics.
        conf = self.conf(
            {"addresses": [{"address": "10.0.0.2/24"}]},
            prevResult={"cniVersion": "1.0.0", "ips": [None]},
        )
        with self.assertRaisesRegex(CniError, r"prevResult.ips\[0\] is null"):
            static_ipam.check(conf, [], "eth0")

    def test_a_route_without_dst_prints_as_go_does(self):
        # Go prints a zero net as `<nil>`; the host refuses that result (106).
        result = static_ipam.add(self.conf({"routes": [{"gw": "10.0.0.1"}]}), [])
        self.assertEqual(result["routes"], [{"dst": "<nil>", "gw": "10.0.0.1"}])


if __name__ == "__main__":
    unittest.main()
