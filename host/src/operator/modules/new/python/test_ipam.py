"""The module's logic over a dict standing in for the host's store: `python3 -m
unittest`, no host and no component needed."""

import json
import unittest

import ipam

CONFIG = json.dumps({"ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24}})


class DictStore:
    """The host store's functions (`get`, `put`, `delete`, `list_prefix`) over a dict."""

    def __init__(self):
        self.entries = {}

    def get(self, key):
        return self.entries.get(key)

    def put(self, key, value):
        self.entries[key] = value

    def delete(self, key):
        return self.entries.pop(key, None) is not None

    def list_prefix(self, prefix):
        return sorted((k, v) for k, v in self.entries.items() if k.startswith(prefix))


class HandsOutTheRange(unittest.TestCase):
    def test_in_order_and_takes_it_back(self):
        store = DictStore()
        self.assertEqual(ipam.add(store, CONFIG, "a", "eth0"), "10.99.0.10/24")
        self.assertEqual(ipam.add(store, CONFIG, "a", "eth0"), "10.99.0.10/24")
        self.assertEqual(ipam.add(store, CONFIG, "b", "eth0"), "10.99.0.11/24")
        with self.assertRaises(ipam.CniError):
            ipam.add(store, CONFIG, "c", "eth0")
        ipam.delete(store, "a", "eth0")
        self.assertEqual(ipam.add(store, CONFIG, "c", "eth0"), "10.99.0.10/24")
        self.assertEqual(ipam.allocations(store), [("10.99.0.10", "c", "eth0"), ("10.99.0.11", "b", "eth0")])


class ServesOnlyTheNamespacesItLists(unittest.TestCase):
    def test_a_namespace_not_listed_is_refused(self):
        config = json.dumps({"ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24, "namespaces": ["team-a"]}})
        store = DictStore()
        self.assertEqual(ipam.add(store, config, "a", "eth0", "team-a"), "10.99.0.10/24")
        with self.assertRaises(ipam.CniError) as raised:
            ipam.add(store, config, "b", "eth0", "team-b")
        self.assertEqual(raised.exception.code, ipam.NOT_SERVED)


class NamesAMisspeltKey(unittest.TestCase):
    def test_with_the_key_it_likely_means(self):
        for key, meant in [("strat", "start"), ("PrefixLen", "prefixLen"), ("prefixlen", "prefixLen")]:
            config = json.dumps({"ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24, key: 1}})
            with self.assertRaises(ipam.CniError) as raised:
                ipam.add(DictStore(), config, "a", "eth0")
            self.assertEqual(raised.exception.code, 7)
            self.assertTrue(raised.exception.msg.startswith(f"ipam.{key} is not a key of this module: did you mean {meant}?"),
                            raised.exception.msg)

    def test_the_hosts_keys_and_keys_close_to_none_pass(self):
        config = json.dumps({"ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24,
                                      "module": "/m.wasm", "moduleMaxMiB": 64, "somethingElse": 1}})
        self.assertEqual(ipam.add(DictStore(), config, "a", "eth0"), "10.99.0.10/24")


class NamesAWrongSetting(unittest.TestCase):
    def test_by_its_key_path_and_value(self):
        bad = json.dumps({"ipam": {"start": "10.99.0.x", "end": "10.99.0.11", "prefixLen": 24}})
        with self.assertRaises(ipam.CniError) as raised:
            ipam.add(DictStore(), bad, "a", "eth0")
        self.assertEqual(raised.exception.code, 7)
        self.assertTrue(raised.exception.msg.startswith("invalid ipam.start: '10.99.0.x': "), raised.exception.msg)
        missing = json.dumps({"ipam": {"start": "10.99.0.10", "end": "10.99.0.11"}})
        with self.assertRaises(ipam.CniError) as raised:
            ipam.add(DictStore(), missing, "a", "eth0")
        self.assertEqual(raised.exception.msg, "invalid ipam.prefixLen: missing")


if __name__ == "__main__":
    unittest.main()
