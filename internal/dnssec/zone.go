package dnssec

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// SignZone returns the signed form of zone k.Zone's records rrs (its whole
// content, the SOA once), for a secondary that serves it as it is (a zone
// transfer): the apex's DNSKEY RRset (and CDS and CDNSKEY) added, an NSEC
// chain over the zone's names in canonical order (RFC 4034 section 4; RFC
// 4035 section 2.3: every name with authoritative data or a delegation,
// the last pointing back to the apex; none at glue below a cut) with the
// negative TTL, and an RRSIG over every RRset but a delegation's NS and
// glue. The SOA comes first. A secondary needs the chain to deny names
// itself: it holds no key for compact denial.
func (s *Signer) SignZone(rrs []dns.RR, k *Keys, now time.Time) ([]dns.RR, error) {
	if len(k.Signing) == 0 {
		return nil, ErrNoKeys
	}
	period := k.Period
	if period <= 0 {
		period = DefaultPeriod
	}
	w := WindowAt(now, period)
	zone := dnsname.Lower(k.Zone)

	// The names, their RRsets, and the cuts.
	type name struct {
		key   []byte
		owner string
		sets  map[uint16][]dns.RR
		order []uint16
	}
	names := map[string]*name{}
	var negTTL uint32
	cuts := map[string]bool{}
	add := func(rr dns.RR) {
		h := rr.Header()
		lower := dnsname.Lower(h.Name)
		n := names[lower]
		if n == nil {
			n = &name{key: dnsname.CanonicalKey(lower), owner: h.Name, sets: map[uint16][]dns.RR{}}
			names[lower] = n
		}
		if n.sets[h.Rrtype] == nil {
			n.order = append(n.order, h.Rrtype)
		}
		n.sets[h.Rrtype] = append(n.sets[h.Rrtype], rr)
	}
	for _, rr := range rrs {
		h := rr.Header()
		switch h.Rrtype {
		case dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeNSEC3PARAM, dns.TypeDNSKEY, dns.TypeCDS, dns.TypeCDNSKEY:
			continue // the signer's own
		case dns.TypeSOA:
			soa := rr.(*dns.SOA)
			negTTL = min(soa.Hdr.Ttl, soa.Minttl)
		case dns.TypeNS:
			if l := dnsname.Lower(h.Name); l != zone {
				cuts[l] = true
			}
		}
		add(rr)
	}
	for _, set := range [][]dns.RR{k.DNSKEYs(), k.CDS(), k.CDNSKEY()} {
		for _, rr := range set {
			add(rr)
		}
	}
	apex := names[zone]
	if apex == nil || apex.sets[dns.TypeSOA] == nil {
		return nil, errNoSOA
	}
	// below reports a name under a cut (glue, occluded data).
	below := func(l string) bool {
		for p := l; p != zone; {
			i := strings.IndexByte(p, '.')
			if i < 0 || i == len(p)-1 {
				return false
			}
			p = p[i+1:]
			if p != zone && cuts[p] {
				return true
			}
			if len(p) <= len(zone) {
				return false
			}
		}
		return false
	}

	var chain []*name
	for l, n := range names {
		if !below(l) {
			chain = append(chain, n)
		}
	}
	slices.SortFunc(chain, func(a, b *name) int { return bytes.Compare(a.key, b.key) })

	out := make([]dns.RR, 0, 3*len(rrs))
	ksk, zsk := k.signers()
	sign := func(set []dns.RR) (err error) {
		out, err = s.signSet(out, set, ksk, zsk, w)
		return err
	}
	// The SOA first.
	out = append(out, apex.sets[dns.TypeSOA]...)
	if err := sign(apex.sets[dns.TypeSOA]); err != nil {
		return nil, err
	}
	for i, n := range chain {
		l := dnsname.Lower(n.owner)
		cut := cuts[l]
		for _, t := range n.order {
			if t == dns.TypeSOA {
				continue
			}
			set := n.sets[t]
			out = append(out, set...)
			if cut && t != dns.TypeDS {
				continue // the child's NS; data at a cut other than DS is glue
			}
			if err := sign(set); err != nil {
				return nil, err
			}
		}
		next := chain[(i+1)%len(chain)].owner
		types := []uint16{dns.TypeNSEC, dns.TypeRRSIG}
		for _, t := range n.order {
			if !cut || t == dns.TypeNS || t == dns.TypeDS {
				types = append(types, t)
			}
		}
		slices.Sort(types)
		nsec := &dns.NSEC{Hdr: dns.RR_Header{Name: n.owner, Rrtype: dns.TypeNSEC, Class: dns.ClassINET, Ttl: negTTL},
			NextDomain: next, TypeBitMap: slices.Compact(types)}
		out = append(out, nsec)
		if err := sign([]dns.RR{nsec}); err != nil {
			return nil, err
		}
	}
	// Glue, unsigned, with no NSEC.
	var glue []*name
	for l, n := range names {
		if below(l) {
			glue = append(glue, n)
		}
	}
	slices.SortFunc(glue, func(a, b *name) int { return bytes.Compare(a.key, b.key) })
	for _, n := range glue {
		for _, t := range n.order {
			out = append(out, n.sets[t]...)
		}
	}
	return out, nil
}

var errNoSOA = errors.New("the zone has no SOA")
