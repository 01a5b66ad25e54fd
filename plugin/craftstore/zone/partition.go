package zone

import (
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// Partition answers qname/qtype (class IN) into m for a router that spreads
// the names of the zone over several members (package shardproto), and
// returns what this member holds about qname. The sections, rcode and AA are
// those of Lookup, except that a CNAME is not followed: a name (or the
// wildcard that synthesizes it) holding a CNAME is answered with that CNAME
// RRset alone, NOERROR, and the router follows the target.
//
// The facts are Final when qname is outside the zone (REFUSED, no Origin),
// when a zone cut covers it (a referral; DS at the cut itself is answered by
// this, the parent, side), when it exists here (with data or as an empty
// non-terminal), when a DNAME here substitutes it (the DNAME and the
// synthesized CNAME, not followed) and when the zone has no SOA (SERVFAIL). They are Absent when
// qname does not exist here: Labels counts the labels of its closest encloser
// (RFC 4592 §3.3.1) on this member, and Wildcard says whether that
// encloser's wildcard child synthesized the answer; without one the answer is
// NXDOMAIN with the SOA.
//
// As with Lookup, the RRs appended are the zone's own (wildcard answers
// excepted): callers must not modify them.
func (z *Zone) Partition(m *dns.Msg, qname string, qtype uint16) shardproto.Facts {
	v := z.read()
	defer z.done(v)
	return v.partition(m, qname, qtype, nil)
}

// PartitionFor is Partition for client cl, as LookupFor is Lookup's.
func (z *Zone) PartitionFor(m *dns.Msg, qname string, qtype uint16, cl *policy.Client) shardproto.Facts {
	v := z.read()
	defer z.done(v)
	return v.partition(m, qname, qtype, cl)
}

func (z *view) partition(m *dns.Msg, qname string, qtype uint16, cl *policy.Client) shardproto.Facts {
	facts := shardproto.Facts{Kind: shardproto.Final, Origin: z.origin}
	if !z.begin(m) {
		return facts
	}
	c := chain{client: cl}
	_, _, f := z.answer(m, qname, qtype, 0, &c)
	switch f.where {
	case whereOutside:
		facts.Origin = ""
	case whereAbsent:
		facts.Kind = shardproto.Absent
		// The lower-cased name answer worked on has qname's offsets.
		facts.Labels = uint8(dns.CountLabel(qname[f.encl:]))
		facts.Wildcard = f.wild
	}
	return facts
}
