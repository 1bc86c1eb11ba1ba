"""Go's `net` address parsing and printing, as the reference static plugin sees them.

Debian bookworm's static is built with Go 1.19, whose `net.ParseIP` and
`net.ParseCIDR` have their own parsers (not `netip`'s): an IPv6 group may have more
than four hex digits if its value fits, a prefix length may have leading zeros, an
IPv4 part may not. Python's `ipaddress` differs on each of these, so this file
follows Go's code instead, and prints addresses as Go's `IP.String` and
`IPNet.String` do (an IPv4-mapped IPv6 address prints as IPv4).
"""

from dataclasses import dataclass
from typing import Optional

_BIG = 0xFFFFFF
_V4_IN_V6_PREFIX = bytes(10) + b"\xff\xff"


class ParseError(Exception):
    """Go's `*net.ParseError`: "invalid <what>: <text>"."""

    def __init__(self, what: str, text: str):
        super().__init__(f"invalid {what}: {text}")


def _dtoi(s: str) -> tuple[int, int, bool]:
    n = 0
    i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        n = n * 10 + ord(s[i]) - ord("0")
        if n >= _BIG:
            return _BIG, i, False
        i += 1
    return n, i, i > 0


def _xtoi(s: str) -> tuple[int, int, bool]:
    n = 0
    i = 0
    while i < len(s) and s[i] in "0123456789abcdefABCDEF":
        n = n * 16 + int(s[i], 16)
        if n >= _BIG:
            return 0, i, False
        i += 1
    return n, i, i > 0


def _parse_ipv4(s: str) -> Optional[bytes]:
    """16 bytes (the IPv4-in-IPv6 form Go's parser returns), or None."""
    parts = bytearray()
    for i in range(4):
        if not s:
            return None
        if i > 0:
            if s[0] != ".":
                return None
            s = s[1:]
        n, c, ok = _dtoi(s)
        if not ok or n > 0xFF:
            return None
        if c > 1 and s[0] == "0":
            return None
        s = s[c:]
        parts.append(n)
    if s:
        return None
    return _V4_IN_V6_PREFIX + bytes(parts)


def _parse_ipv6(s: str) -> Optional[bytes]:
    ip = bytearray(16)
    ellipsis = -1
    if s.startswith("::"):
        ellipsis = 0
        s = s[2:]
        if not s:
            return bytes(ip)
    i = 0
    while i < 16:
        n, c, ok = _xtoi(s)
        if not ok or n > 0xFFFF:
            return None
        if c < len(s) and s[c] == ".":
            if ellipsis < 0 and i != 12:
                return None
            if i + 4 > 16:
                return None
            ip4 = _parse_ipv4(s)
            if ip4 is None:
                return None
            ip[i : i + 4] = ip4[12:]
            s = ""
            i += 4
            break
        ip[i] = n >> 8
        ip[i + 1] = n & 0xFF
        i += 2
        s = s[c:]
        if not s:
            break
        if s[0] != ":" or len(s) == 1:
            return None
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                return None
            ellipsis = i
            s = s[1:]
            if not s:
                break
    if s:
        return None
    if i < 16:
        if ellipsis < 0:
            return None
        n = 16 - i
        ip[ellipsis + n : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + n] = bytes(n)
    elif ellipsis >= 0:
        return None
    return bytes(ip)


def to4(ip: bytes) -> Optional[bytes]:
    """Go's `IP.To4`: the 4-byte form of an IPv4 (or IPv4-mapped) address."""
    if len(ip) == 4:
        return ip
    if len(ip) == 16 and ip[:12] == _V4_IN_V6_PREFIX:
        return ip[12:]
    return None


def parse_ip(s: str) -> Optional[bytes]:
    """Go's `net.ParseIP`: the family is chosen by the first `.` or `:`."""
    for ch in s:
        if ch == ".":
            return _parse_ipv4(s)
        if ch == ":":
            return _parse_ipv6(s)
    return None


@dataclass(frozen=True)
class IPNet:
    """Go's `net.IPNet` as `ParseCIDR` builds it, with the address's host bits kept
    (static and libcni's `types.ParseCIDR` put the parsed IP back into the net)."""

    ip: bytes
    """16 bytes."""
    prefix: int
    """The mask's length in bits of `mask_bits`."""
    mask_bits: int
    """32 when the address was written as IPv4, else 128."""

    def _number_and_prefix(self) -> tuple[bytes, int]:
        """Go's `networkNumberAndMask`: an IPv4-mapped address under a 128-bit mask
        keeps only the mask's last 32 bits."""
        v4 = to4(self.ip)
        if v4 is None:
            return self.ip, self.prefix
        if self.mask_bits == 32:
            return v4, self.prefix
        return v4, max(0, self.prefix - 96)

    def __str__(self) -> str:
        ip, prefix = self._number_and_prefix()
        return f"{ip_string(ip)}/{prefix}"

    def contains(self, other: bytes) -> bool:
        ip, prefix = self._number_and_prefix()
        other = to4(other) or other
        if len(other) != len(ip):
            return False
        bits = len(ip) * 8
        shift = bits - prefix
        return (int.from_bytes(ip, "big") >> shift) == (
            int.from_bytes(other, "big") >> shift
        )


def parse_cidr(s: str) -> IPNet:
    """Go's `net.ParseCIDR`; raises `ParseError("CIDR address", s)`."""
    slash = s.find("/")
    if slash < 0:
        raise ParseError("CIDR address", s)
    addr, mask = s[:slash], s[slash + 1 :]
    bits = 32
    ip = _parse_ipv4(addr)
    if ip is None:
        bits = 128
        ip = _parse_ipv6(addr)
    n, i, ok = _dtoi(mask)
    if ip is None or not ok or i != len(mask) or n > bits:
        raise ParseError("CIDR address", s)
    return IPNet(ip, n, bits)


def ip_string(ip: bytes) -> str:
    """Go's `IP.String`: dotted IPv4 for IPv4 and IPv4-mapped addresses, else IPv6
    with the first longest run of two or more zero groups written `::`."""
    v4 = to4(ip)
    if v4 is not None:
        return ".".join(str(b) for b in v4)
    groups = [ip[i] << 8 | ip[i + 1] for i in range(0, 16, 2)]
    best_start, best_len = -1, 0
    i = 0
    while i < 8:
        j = i
        while j < 8 and groups[j] == 0:
            j += 1
        if j - i > best_len:
            best_start, best_len = i, j - i
        i = max(j, i + 1)
    if best_len < 2:
        return ":".join(f"{g:x}" for g in groups)
    head = ":".join(f"{g:x}" for g in groups[:best_start])
    tail = ":".join(f"{g:x}" for g in groups[best_start + best_len :])
    return f"{head}::{tail}"


def ip_equal(a: bytes, b: bytes) -> bool:
    """Go's `IP.Equal`: an IPv4 address equals its IPv4-mapped form."""
    return (to4(a) or a) == (to4(b) or b)
