package zone

import (
	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// Building the sections of a response from one version of the zone.

// referral answers with the delegation at cut (RFC 1034 §4.3.2 step 3b): its
// NS RRset in the authority section and the addresses of in-zone name
// servers (glue, occluded names included) in the additional section. The
// answer is not authoritative, unless a CNAME led to it: the CNAME is (NSD).
func (z *view) referral(m *dns.Msg, cut *node, step int) {
	if step == 0 {
		m.Authoritative = false
	}
	ns := cut.rrset(dns.TypeNS)
	m.Ns = append(m.Ns, ns...)
	for _, rr := range ns {
		if ns, ok := rr.(*dns.NS); ok {
			z.glue(m, ns.Ns)
		}
	}
}

// glue appends the A and AAAA RRsets at target, if it is a name in the zone.
// Wildcards do not synthesize glue.
func (z *view) glue(m *dns.Msg, target string) {
	var buf [256]byte
	n := z.exact(appendLower(buf[:0], target))
	if n == nil {
		return
	}
	m.Extra = append(m.Extra, n.rrset(dns.TypeA)...)
	m.Extra = append(m.Extra, n.rrset(dns.TypeAAAA)...)
}

// negative answers NXDOMAIN (RFC 2308 §2.1) or NODATA (rcode NOERROR, RFC
// 2308 §2.2) with the zone's SOA in the authority section, its TTL capped by
// the SOA MINIMUM (RFC 2308 §3). After a CNAME chain the rcode describes the
// last name (RFC 6604 §3), as NSD does.
func (z *view) negative(m *dns.Msg, rcode int) {
	m.Rcode = rcode
	m.Ns = append(m.Ns, z.negSOA)
}

// anyRRset picks the one RRset answered to an ANY query (RFC 8482 §4.1). Like
// NSD it prefers small, popular types and shuns DNSSEC ones; unlike NSD,
// whose pick depends on the order of the zone file, it picks by type alone so
// that the answer is the same on every member.
func (n *node) anyRRset() []dns.RR {
	for _, t := range [...]uint16{dns.TypeSOA, dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypePTR} {
		if rrs := n.rrset(t); rrs != nil {
			return rrs
		}
	}
	var dnssec []dns.RR
	rrs := n.records()
	for i := 0; i < len(rrs); {
		t := rrs[i].Header().Rrtype
		j := i + 1
		for j < len(rrs) && rrs[j].Header().Rrtype == t {
			j++
		}
		switch t {
		case policy.TypePolicy, policy.TypeRegions:
			// Not data a client reads (internal/policy).
		case dns.TypeDNSKEY, dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3:
			if dnssec == nil {
				dnssec = rrs[i:j:j]
			}
		default:
			return rrs[i:j:j]
		}
		i = j
	}
	return dnssec
}

// appendRRs appends rrs to dst, as they are when owner is empty, else as
// copies owned by owner: a wildcard's RRs are answered with "the owner of the
// RR ... QNAME, and not the node with the "*" label" (RFC 1034 §4.3.2 step
// 3c).
func appendRRs(dst, rrs []dns.RR, owner string) []dns.RR {
	if owner == "" {
		return append(dst, rrs...)
	}
	for _, rr := range rrs {
		dst = append(dst, synthesize(rr, owner))
	}
	return dst
}

// synthesize returns a copy of rr owned by owner. Common types are copied
// shallowly: the copy shares RDATA slices with the stored RR, which nobody
// modifies.
func synthesize(rr dns.RR, owner string) dns.RR {
	var c dns.RR
	switch r := rr.(type) {
	case *dns.A:
		x := *r
		c = &x
	case *dns.AAAA:
		x := *r
		c = &x
	case *dns.CNAME:
		x := *r
		c = &x
	case *dns.TXT:
		x := *r
		c = &x
	case *dns.MX:
		x := *r
		c = &x
	case *dns.SRV:
		x := *r
		c = &x
	case *dns.NS:
		x := *r
		c = &x
	case *dns.PTR:
		x := *r
		c = &x
	default:
		c = dns.Copy(rr)
	}
	c.Header().Name = owner
	return c
}

// regions returns the zone's region table record (internal/policy), nil
// when it has none.
func (z *view) regions() dns.RR {
	if rrs := z.apex.rrset(policy.TypeRegions); len(rrs) > 0 {
		return rrs[0]
	}
	return nil
}

// Policies calls fn with the name and RRs of every name of the zone that
// holds a request-routing policy, in no order, until fn returns false.
// The RRs are the zone's own: fn must not modify them. A zone without
// policies costs nothing; one with policies is walked whole.
func (z *Zone) Policies(fn func(name string, rrs []dns.RR) bool) {
	if z.pg != nil {
		z.pagedPolicies(fn)
		return
	}
	v := z.load()
	if v.policy == 0 || v.names.root == nil {
		return
	}
	v.names.root.walk(func(n *node) bool {
		if n.flags&fPolicy == 0 {
			return true
		}
		return fn(n.name, n.records())
	})
}
