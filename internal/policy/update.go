package policy

import "github.com/miekg/dns"

// The RRs of the RFC 2136 UPDATEs the policy API writes with (RFC 2136
// section 2.4 and 2.5).

// Replace returns the updates that put policy record rr, covering t, in
// the place of old (nil: none) at owner, with defaults as owner's t RRset.
func Replace(owner string, t uint16, old, rr dns.RR, defaults []dns.RR) []dns.RR {
	var out []dns.RR
	if old != nil {
		out = append(out, Deletion(old))
	}
	out = append(out, DeleteRRset(owner, t))
	out = append(out, defaults...)
	return append(out, rr)
}

// ReplaceRegions returns the updates that make rr the region table at apex.
func ReplaceRegions(apex string, rr dns.RR) []dns.RR {
	return []dns.RR{DeleteRRset(apex, TypeRegions), rr}
}

// Deletion returns the update that deletes record rr of a reserved type
// (class NONE, RFC 2136 section 2.5.4).
func Deletion(rr dns.RR) dns.RR {
	g := dns.Copy(rr).(*dns.RFC3597)
	g.Hdr.Class, g.Hdr.Ttl = dns.ClassNONE, 0
	// Its length says it names one record, not an RRset.
	g.Hdr.Rdlength = uint16(len(g.Rdata) / 2)
	return g
}

// DeleteRRset returns the update that deletes owner's RRset of type t
// (class ANY, RFC 2136 section 2.5.2).
func DeleteRRset(owner string, t uint16) dns.RR {
	return &dns.ANY{Hdr: dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassANY}}
}

// Absent returns the prerequisite that owner has no RRset of type t
// (RFC 2136 section 2.4.3).
func Absent(owner string, t uint16) dns.RR {
	return &dns.ANY{Hdr: dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassNONE}}
}

// Unchanged returns the prerequisites that owner's policy RRset is rrs,
// as read: value dependent (RFC 2136 section 2.4.2), or absent.
func Unchanged(owner string, rrs []dns.RR) []dns.RR {
	if len(rrs) == 0 {
		return []dns.RR{Absent(owner, TypePolicy)}
	}
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		c := dns.Copy(rr)
		c.Header().Class, c.Header().Ttl = dns.ClassINET, 0
		out[i] = c
	}
	return out
}
