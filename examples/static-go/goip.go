package main

// Go 1.19's `net` address parsing and printing, as the reference static plugin (built
// with Go 1.19) sees them. The Go this module is built with parses differently (its
// `net.ParseIP` refuses an IPv6 group of five hex digits, which 1.19 takes when its
// value fits), so this file follows 1.19's code, as examples/static-py/src/goip.py
// does: an IPv4 part may not have a leading zero, a prefix length may; an
// IPv4-mapped IPv6 address prints as IPv4.

import (
	"bytes"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

const bigNumber = 0xFFFFFF

var v4InV6Prefix = []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}

// parseError is Go's `*net.ParseError`: "invalid <what>: <text>".
type parseError struct{ what, text string }

func (e *parseError) Error() string { return "invalid " + e.what + ": " + e.text }

func dtoi(s string) (int, int, bool) {
	n, i := 0, 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		n = n*10 + int(s[i]-'0')
		if n >= bigNumber {
			return bigNumber, i, false
		}
		i++
	}
	return n, i, i > 0
}

func xtoi(s string) (int, int, bool) {
	n, i := 0, 0
	for ; i < len(s); i++ {
		c := s[i]
		var d int
		switch {
		case '0' <= c && c <= '9':
			d = int(c - '0')
		case 'a' <= c && c <= 'f':
			d = int(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = int(c-'A') + 10
		default:
			return n, i, i > 0
		}
		n = n*16 + d
		if n >= bigNumber {
			return 0, i, false
		}
	}
	return n, i, i > 0
}

// parseIPv4 returns 16 bytes (the IPv4-in-IPv6 form Go's parser returns), or nil.
func parseIPv4(s string) []byte {
	var parts []byte
	for i := 0; i < 4; i++ {
		if s == "" {
			return nil
		}
		if i > 0 {
			if s[0] != '.' {
				return nil
			}
			s = s[1:]
		}
		n, c, ok := dtoi(s)
		if !ok || n > 0xFF {
			return nil
		}
		if c > 1 && s[0] == '0' {
			return nil
		}
		s = s[c:]
		parts = append(parts, byte(n))
	}
	if s != "" {
		return nil
	}
	return append(append([]byte{}, v4InV6Prefix...), parts...)
}

func parseIPv6(s string) []byte {
	ip := make([]byte, 16)
	ellipsis := -1
	if strings.HasPrefix(s, "::") {
		ellipsis = 0
		s = s[2:]
		if s == "" {
			return ip
		}
	}
	i := 0
	for i < 16 {
		n, c, ok := xtoi(s)
		if !ok || n > 0xFFFF {
			return nil
		}
		if c < len(s) && s[c] == '.' {
			if ellipsis < 0 && i != 12 {
				return nil
			}
			if i+4 > 16 {
				return nil
			}
			ip4 := parseIPv4(s)
			if ip4 == nil {
				return nil
			}
			copy(ip[i:i+4], ip4[12:])
			s = ""
			i += 4
			break
		}
		ip[i] = byte(n >> 8)
		ip[i+1] = byte(n)
		i += 2
		s = s[c:]
		if s == "" {
			break
		}
		if s[0] != ':' || len(s) == 1 {
			return nil
		}
		s = s[1:]
		if s[0] == ':' {
			if ellipsis >= 0 {
				return nil
			}
			ellipsis = i
			s = s[1:]
			if s == "" {
				break
			}
		}
	}
	if s != "" {
		return nil
	}
	if i < 16 {
		if ellipsis < 0 {
			return nil
		}
		n := 16 - i
		for j := i - 1; j >= ellipsis; j-- {
			ip[j+n] = ip[j]
		}
		for j := ellipsis + n - 1; j >= ellipsis; j-- {
			ip[j] = 0
		}
	} else if ellipsis >= 0 {
		return nil
	}
	return ip
}

// to4 is Go's `IP.To4`: the 4-byte form of an IPv4 (or IPv4-mapped) address.
func to4(ip []byte) []byte {
	if len(ip) == 4 {
		return ip
	}
	if len(ip) == 16 && bytes.Equal(ip[:12], v4InV6Prefix) {
		return ip[12:]
	}
	return nil
}

// parseIP is Go 1.19's `net.ParseIP`: the family is chosen by the first `.` or `:`.
func parseIP(s string) []byte {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			return parseIPv4(s)
		case ':':
			return parseIPv6(s)
		}
	}
	return nil
}

// ipNet is Go's `net.IPNet` as `ParseCIDR` builds it, with the address's host bits
// kept (static and libcni's `types.ParseCIDR` put the parsed IP back into the net).
type ipNet struct {
	ip       []byte // 16 bytes
	prefix   int
	maskBits int // 32 when written as IPv4, else 128
}

func (n ipNet) numberAndPrefix() ([]byte, int) {
	v4 := to4(n.ip)
	if v4 == nil {
		return n.ip, n.prefix
	}
	if n.maskBits == 32 {
		return v4, n.prefix
	}
	return v4, max(0, n.prefix-96)
}

func (n ipNet) String() string {
	ip, prefix := n.numberAndPrefix()
	return fmt.Sprintf("%s/%d", ipString(ip), prefix)
}

func (n ipNet) contains(other []byte) bool {
	ip, prefix := n.numberAndPrefix()
	if v4 := to4(other); v4 != nil {
		other = v4
	}
	if len(other) != len(ip) {
		return false
	}
	shift := uint(len(ip)*8 - prefix)
	a := new(big.Int).Rsh(new(big.Int).SetBytes(ip), shift)
	b := new(big.Int).Rsh(new(big.Int).SetBytes(other), shift)
	return a.Cmp(b) == 0
}

// parseCIDR is Go 1.19's `net.ParseCIDR`.
func parseCIDR(s string) (ipNet, error) {
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		return ipNet{}, &parseError{"CIDR address", s}
	}
	addr, mask := s[:slash], s[slash+1:]
	bits := 32
	ip := parseIPv4(addr)
	if ip == nil {
		bits = 128
		ip = parseIPv6(addr)
	}
	n, i, ok := dtoi(mask)
	if ip == nil || !ok || i != len(mask) || n > bits {
		return ipNet{}, &parseError{"CIDR address", s}
	}
	return ipNet{ip, n, bits}, nil
}

// ipString is Go's `IP.String`: dotted IPv4 for IPv4 and IPv4-mapped addresses, else
// IPv6 with the first longest run of two or more zero groups written `::`.
func ipString(ip []byte) string {
	if v4 := to4(ip); v4 != nil {
		return fmt.Sprintf("%d.%d.%d.%d", v4[0], v4[1], v4[2], v4[3])
	}
	var groups [8]int
	for i := range groups {
		groups[i] = int(ip[2*i])<<8 | int(ip[2*i+1])
	}
	bestStart, bestLen := -1, 0
	for i := 0; i < 8; {
		j := i
		for j < 8 && groups[j] == 0 {
			j++
		}
		if j-i > bestLen {
			bestStart, bestLen = i, j-i
		}
		i = max(j, i+1)
	}
	hex := func(gs []int) string {
		out := make([]string, len(gs))
		for i, g := range gs {
			out[i] = strconv.FormatInt(int64(g), 16)
		}
		return strings.Join(out, ":")
	}
	if bestLen < 2 {
		return hex(groups[:])
	}
	return hex(groups[:bestStart]) + "::" + hex(groups[bestStart+bestLen:])
}

// ipEqual is Go's `IP.Equal`: an IPv4 address equals its IPv4-mapped form.
func ipEqual(a, b []byte) bool {
	if v4 := to4(a); v4 != nil {
		a = v4
	}
	if v4 := to4(b); v4 != nil {
		b = v4
	}
	return bytes.Equal(a, b)
}
