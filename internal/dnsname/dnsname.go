// Package dnsname holds helpers on presentation-format domain names that
// both plugins use.
package dnsname

import (
	"bytes"

	"github.com/miekg/dns"
)

// Lower returns s with ASCII letters lower-cased, s itself (no
// allocation) when it is lower-case already.
func Lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// In reports whether name is zone or a name below it, as dns.IsSubDomain
// does, for names both lower-case and fully qualified; it does not count
// labels, so it is cheap enough for every query.
func In(name, zone string) bool {
	if zone == "." {
		return true
	}
	i := len(name) - len(zone)
	if i < 0 || name[i:] != zone {
		return false
	}
	if i == 0 {
		return true
	}
	if name[i-1] != '.' {
		return false
	}
	// The dot ends a label unless a backslash escapes it: an odd run of
	// backslashes before it.
	n := 0
	for j := i - 2; j >= 0 && name[j] == '\\'; j-- {
		n++
	}
	return n%2 == 0
}

// CanonicalKey encodes a domain name so that the byte order of keys is DNS
// canonical order (RFC 4034 section 6.1): labels from the root down,
// lower-cased, each followed by a zero byte. The root itself is a single
// zero byte. Escaped characters (\DDD) count as their presentation
// form: keys of the same name are equal, and every user of the keys sees
// one order. craftstore keys its names with it, and so orders a zone
// transfer; a router merging shards' transfers compares names with it.
func CanonicalKey(name string) []byte {
	name = Lower(dns.Fqdn(name))
	if name == "." {
		return []byte{0}
	}
	var starts [16]int // room for the usual names without an allocation
	idx := labelStarts(name, starts[:0])
	k := make([]byte, 0, len(name)+1)
	for i := len(idx) - 1; i >= 0; i-- {
		end := len(name) - 1
		if i+1 < len(idx) {
			end = idx[i+1] - 1
		}
		k = append(k, name[idx[i]:end]...)
		k = append(k, 0)
	}
	return k
}

// KeyName returns the name whose key k is (CanonicalKey), canonical
// (lower-case, fully qualified, presentation form).
func KeyName(k []byte) []byte {
	if len(k) == 1 && k[0] == 0 {
		return []byte(".")
	}
	out := make([]byte, 0, len(k))
	end := len(k) - 1 // the zero byte after the last label
	for end > 0 {
		start := bytes.LastIndexByte(k[:end], 0) + 1
		out = append(out, k[start:end]...)
		out = append(out, '.')
		end = start - 1
	}
	return out
}

// AppendCanonicalKey appends to dst the key CanonicalKey makes of name,
// which must be canonical already (lower-case, fully qualified): no
// allocation when dst has room, for the paths that key a name per query (a
// paged member's lookups, a router's filter probes). A backslash escapes
// the byte after it (an escaped dot does not end a label), as
// dns.NextLabel reads names.
func AppendCanonicalKey[T ~string | ~[]byte](dst []byte, name T) []byte {
	if len(name) == 1 && name[0] == '.' {
		return append(dst, 0)
	}
	// The label ends, from the last label to the first.
	var ends [128]int // a name has at most 127 labels
	n := 0
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '\\':
			i++
		case '.':
			if n < len(ends) {
				ends[n] = i
				n++
			}
		}
	}
	for j := n - 1; j >= 0; j-- {
		from := 0
		if j > 0 {
			from = ends[j-1] + 1
		}
		dst = append(dst, name[from:ends[j]]...)
		dst = append(dst, 0)
	}
	return dst
}

// labelStarts appends to idx the offsets at which the labels of name (fully
// qualified, not the root) start: dns.Split's, from dns.NextLabel (which
// keeps a dot escaped by a backslash inside its label), without dns.Split's
// allocation when idx has room.
func labelStarts(name string, idx []int) []int {
	idx = append(idx, 0)
	for off, end := dns.NextLabel(name, 0); !end; off, end = dns.NextLabel(name, off) {
		idx = append(idx, off)
	}
	return idx
}
