package zone

import (
	"slices"

	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// Presence says what the zone holds at name, for the denial of a signed
// negative answer (internal/dnssec: RFC 9824's NSEC is made for the name
// asked): whether name exists, as a name of the zone (an empty
// non-terminal included) or as what a wildcard synthesizes for it; the
// types there, the wildcard's for a synthesized name (without RRSIG, NSEC
// and the store's policy types, which no client reads); and glue, whether
// name is at or below a zone cut of the zone, where its data is the
// child's and not signed.
func (z *Zone) Presence(name string) (exists bool, types []uint16, glue bool) {
	v := z.read()
	defer z.done(v)
	var buf [256]byte
	lname := appendLower(buf[:0], dns.Fqdn(name))
	encl, off, ok := v.closestEncloser(lname)
	if !ok {
		return false, nil, false
	}
	if cut, _, _, _ := v.above(lname, encl, off, dns.TypeA); cut != nil {
		glue = true
	}
	n := encl
	if off > 0 {
		if n = v.wildcard(lname, off, encl); n == nil {
			return false, nil, glue
		}
	}
	for _, rr := range n.records() {
		t := rr.Header().Rrtype
		if t != dns.TypeRRSIG && t != dns.TypeNSEC && !policy.Reserved(t) {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	return true, slices.Compact(types), glue
}

// Glue reports whether name is at or below a zone cut of the zone
// (Presence's glue).
func (z *Zone) Glue(name string) bool {
	v := z.read()
	defer z.done(v)
	var buf [256]byte
	lname := appendLower(buf[:0], dns.Fqdn(name))
	encl, off, ok := v.closestEncloser(lname)
	if !ok {
		return false
	}
	cut, _, _, _ := v.above(lname, encl, off, dns.TypeA)
	return cut != nil
}
