package zone

import (
	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// maxChain bounds the names one lookup visits. Loops end earlier, on the
// first repeated (CNAME RRset, owner) pair, as in NSD; this bound only cuts
// absurdly long chains without a loop (NSD follows those to any length).
const maxChain = 64

// Lookup answers qname/qtype (class IN) authoritatively into m: it sets
// m.Rcode, m.Authoritative and appends to m.Answer, m.Ns and m.Extra.
// qname is inside the zone (the caller checked), in any case.
//
// The answers follow RFC 1034 §4.3.2, RFC 4592 and RFC 2308 and equal NSD's
// (4.x, default configuration) in rcode, AA, answer and authority sections:
//   - positive answers carry the apex NS RRset in the authority section,
//     except for DS, DNSKEY and ANY queries and when it is the answer;
//   - CNAMEs are followed inside the zone; the rcode and authority section
//     describe the last name of the chain (RFC 6604); a chain stops, without
//     authority, when it would add a CNAME RRset a second time for the same
//     owner (a loop), or when it leaves the zone;
//   - a referral clears AA unless a CNAME led to it;
//   - ANY gets one RRset (RFC 8482 §4.1).
//
// The RRs appended are the zone's own (wildcard answers excepted): callers
// must not modify them.
func (z *Zone) Lookup(m *dns.Msg, qname string, qtype uint16) {
	v := z.read()
	v.lookup(m, qname, qtype, nil)
	z.done(v)
}

// LookupFor is Lookup for client cl: a name with a request-routing policy
// for qtype answers with what the policy chooses for cl (policy.Pick),
// and cl says whether one did, by which prefix. Lookup answers such a name
// with its records: the values of the policy's default pool.
func (z *Zone) LookupFor(m *dns.Msg, qname string, qtype uint16, cl *policy.Client) {
	v := z.read()
	v.lookup(m, qname, qtype, cl)
	z.done(v)
}

func (z *view) lookup(m *dns.Msg, qname string, qtype uint16, cl *policy.Client) {
	if !z.begin(m) {
		return
	}
	c := chain{client: cl}
	name := qname
	for step := 0; step < maxChain; step++ {
		next, follow, _ := z.answer(m, name, qtype, step, &c)
		if !follow {
			return
		}
		name = next
	}
}

// begin sets the rcode and AA of an answer. It answers SERVFAIL and returns
// false when the zone has no SOA: configured, not loaded.
func (z *view) begin(m *dns.Msg) bool {
	m.Rcode = dns.RcodeSuccess
	if z.soa == nil {
		m.Rcode = dns.RcodeServerFailure
		return false
	}
	m.Authoritative = true
	return true
}

// found is what one step of a lookup learned about its name: the facts that
// partition mode reports (shardproto, facts.go).
type found struct {
	where where
	encl  int  // whereAbsent: the offset of the closest encloser in the name
	wild  bool // whereAbsent: a wildcard synthesized the answer
}

// where says where a step of a lookup found its name.
type where uint8

const (
	whereOutside where = iota // not in the zone
	whereCut                  // at or below a zone cut: a referral
	whereName                 // the name exists, with data or as an empty non-terminal
	whereAbsent               // the name does not exist
)

// answer answers for one name of a lookup: the query name (step 0) or the
// target of the CNAME answered in the previous step. It returns the next
// CNAME target to follow, if any, and where it found the name.
func (z *view) answer(m *dns.Msg, qname string, qtype uint16, step int, c *chain) (string, bool, found) {
	var buf [256]byte
	name := appendLower(buf[:0], qname)

	encl, off, ok := z.closestEncloser(name)
	if !ok {
		if step == 0 {
			m.Rcode = dns.RcodeRefused
			m.Authoritative = false
		}
		return "", false, found{where: whereOutside} // a CNAME target outside the zone ends the chain
	}
	cut, cutOff, d, dOff := z.above(name, encl, off, qtype)
	if cut != nil && (d == nil || cutOff >= dOff) {
		// A cut at or above a DNAME owner: the DNAME is the child's.
		z.referral(m, cut, step)
		return "", false, found{where: whereCut}
	}
	if d != nil {
		next, follow := z.substitute(m, d, qname, name, dOff, qtype, c)
		return next, follow, found{where: whereName}
	}
	if off == 0 {
		next, follow := z.fromNode(m, encl, qname, "", qtype, step, c)
		return next, follow, found{where: whereName}
	}

	// RFC 4592 §3.3.1: qname does not exist; a wildcard child of the closest
	// encloser synthesizes the answer, owned by qname.
	f := found{where: whereAbsent, encl: off}
	n := z.wildcard(name, off, encl)
	if n == nil {
		z.negative(m, dns.RcodeNameError)
		return "", false, f
	}
	f.wild = true
	next, follow := z.fromNode(m, n, qname, qname, qtype, step, c)
	return next, follow, f
}

// fromNode answers from n, the node at qname or the source of synthesis when
// owner is set (RFC 1034 §4.3.2 step 3a, 3c).
func (z *view) fromNode(m *dns.Msg, n *node, qname, owner string, qtype uint16, step int, c *chain) (string, bool) {
	if policy.Reserved(qtype) {
		// Policies are the store's, not data a client reads.
		z.negative(m, dns.RcodeSuccess)
		return "", false
	}
	if qtype == dns.TypeANY {
		if rrs := n.anyRRset(); rrs != nil {
			m.Answer = appendRRs(m.Answer, rrs, owner)
		} else {
			z.negative(m, dns.RcodeSuccess)
		}
		return "", false
	}

	rrs := n.rrset(qtype)
	if n.flags&fPolicy != 0 && c.client != nil && rrs != nil {
		if picked, ok := policy.Pick(n.records(), z.regions(), qtype, c.client); ok {
			rrs = picked
		}
	}
	if rrs != nil {
		m.Answer = appendRRs(m.Answer, rrs, owner)
		// NSD adds the apex NS RRset, as RFC 1034 §6.2.1 shows, but not for
		// DS and DNSKEY whose answers are large already, and not twice.
		if qtype != dns.TypeDS && qtype != dns.TypeDNSKEY && !(qtype == dns.TypeNS && n == z.apex) {
			m.Ns = append(m.Ns, z.apexNS...)
		}
		return "", false
	}

	if n.flags&fCNAME != 0 {
		cname := n.rrset(dns.TypeCNAME)
		// NSD's loop check: an RRset is not added twice for the same owner.
		// A wildcard synthesizing for the query name counts as a distinct
		// owner from the same name reached later through a CNAME.
		key := qname
		if owner != "" && step == 0 {
			key = ""
		}
		if !c.add(n, dns.TypeCNAME, key) {
			return "", false
		}
		m.Answer = appendRRs(m.Answer, cname, owner)
		// RFC 1034 §4.3.2 step 3a: restart with the (first) CNAME's target.
		if target, ok := cname[0].(*dns.CNAME); ok {
			return target.Target, true
		}
		return "", false
	}

	z.negative(m, dns.RcodeSuccess)
	return "", false
}

// substitute answers qname, below the owner of DNAME node d (at offset dOff
// in name, qname's lower-case form), by DNAME substitution (RFC 6672 §2.2,
// §3.2): the DNAME RRset, then a CNAME from qname to the substituted name,
// with the DNAME's TTL, which the lookup follows like any CNAME. A
// substitution that leads below the same DNAME again (its target an
// ancestor of its owner) applies it again, as BIND, Knot, NSD and PowerDNS
// do, with the DNAME RRset in the answer once; the same DNAME for the same
// name twice is a loop, which ends the chain, and so does a DNAME whose
// target is in its own subtree, after its first CNAME. A substituted name longer than
// a domain name may be is answered YXDOMAIN with the DNAME alone. A query
// for the CNAME ends with it.
func (z *view) substitute(m *dns.Msg, d *node, qname string, name []byte, dOff int, qtype uint16, c *chain) (string, bool) {
	rrs := d.rrset(dns.TypeDNAME)
	again := c.has(d, dns.TypeDNAME)
	if !c.add(d, dns.TypeDNAME, qname) {
		return "", false
	}
	if !again {
		m.Answer = append(m.Answer, rrs...)
	}
	dn, ok := rrs[0].(*dns.DNAME)
	if !ok {
		return "", false
	}
	target := string(name[:dOff]) + dn.Target
	if dn.Target == "." {
		target = string(name[:dOff]) // the prefix is fully qualified already
	}
	if !fitsWire(target) {
		m.Rcode = dns.RcodeYXDomain
		return "", false
	}
	m.Answer = append(m.Answer, &dns.CNAME{
		Hdr:    dns.RR_Header{Name: qname, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: dn.Hdr.Ttl},
		Target: target,
	})
	if qtype == dns.TypeCNAME || dns.IsSubDomain(dn.Hdr.Name, dn.Target) {
		// A DNAME to its own subtree would apply to the name it
		// synthesized again and again, each longer: the chain ends, as
		// in NSD.
		return "", false
	}
	return target, true
}

// fitsWire reports whether name (presentation form, fully qualified) is at
// most 255 octets on the wire (RFC 1035 §2.3.4); dns.IsDomainName allows 256.
func fitsWire(name string) bool {
	var buf [512]byte
	n, err := dns.PackDomainName(name, buf[:], 0, nil, false)
	return err == nil && n <= 255
}

// chain records the CNAME RRsets a lookup added, with their owners, so that a
// loop stops when it would add one a second time.
type chain struct {
	client *policy.Client // the lookup's client, nil for none (Lookup)

	n     int
	fixed [8]visit
	more  []visit
}

// visit is a CNAME or DNAME RRset added, identified by its node and type
// (a lookup reads one version of the zone, whose nodes do not change; the
// RRs a block decodes are new on each call), with the name it answered for.
type visit struct {
	n     *node
	t     uint16
	owner string // the name it answered for, any case; "" for the query name via a wildcard
}

// has reports whether the RRset of type t at n was added, for any owner.
func (c *chain) has(n *node, t uint16) bool {
	for _, v := range c.fixed[:min(c.n, len(c.fixed))] {
		if v.n == n && v.t == t {
			return true
		}
	}
	for _, v := range c.more {
		if v.n == n && v.t == t {
			return true
		}
	}
	return false
}

// add records the RRset of type t at n for owner and reports whether it
// was new.
func (c *chain) add(n *node, t uint16, owner string) bool {
	seen := c.fixed[:min(c.n, len(c.fixed))]
	for _, v := range seen {
		if v.n == n && v.t == t && equalFold(v.owner, owner) {
			return false
		}
	}
	for _, v := range c.more {
		if v.n == n && v.t == t && equalFold(v.owner, owner) {
			return false
		}
	}
	if c.n < len(c.fixed) {
		c.fixed[c.n] = visit{n, t, owner}
	} else {
		c.more = append(c.more, visit{n, t, owner})
	}
	c.n++
	return true
}
