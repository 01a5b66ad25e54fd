// Package zone holds the in-memory read view of one authoritative zone and
// answers queries from it (RFC 1034 §4.3.2, RFC 4592, RFC 2308).
//
// Owner names are kept in a hash map keyed by their canonical (lower-case)
// presentation form. Every ancestor of a name that holds data exists in the
// map too, as an empty non-terminal when it holds no data of its own, so the
// closest encloser of a query name is the longest of its suffixes found in
// the map. The RRs at a name are stored once, sorted by type; an RRset is a
// run of that slice and is placed straight into responses without copying.
//
// Readers take a read lock for the duration of one lookup. Set holds the
// write lock only while it swaps in slices it prepared beforehand; a large
// bulk load should be built in a fresh Zone (New then Load) and swapped in by
// the caller.
package zone

import (
	"sync"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// Zone is the read view of one authoritative zone. The zero value is not
// usable; create one with New.
type Zone struct {
	origin string // canonical (lower-case, fully qualified) origin

	mu      sync.RWMutex
	names   map[string]*node // canonical owner name → node; ENTs included
	wilds   map[*node]*node  // node → its child "*" (RFC 4592 wildcard), only where there is one
	apex    *node
	soa     *dns.SOA // apex SOA, nil if none
	negSOA  dns.RR   // SOA for negative answers, TTL per RFC 2308 §3
	apexNS  []dns.RR // apex NS RRset, added to the authority section of positive answers
	records int      // number of RRs
	named   int      // number of owner names holding data
	cuts    int      // number of delegation points (NS below the apex)
	dnames  int      // number of names holding a DNAME
	base    uint32   // serial base (SetSerialBase), when hasBase
	hasBase bool
}

// node is one owner name. It holds no copy of its name: the map key is the
// name.
type node struct {
	rrs   []dns.RR // all RRs at the name, sorted by type; nil for an ENT
	kids  uint32   // number of child names in the map: the ENT reference count
	flags uint8
}

const (
	fCut     uint8 = 1 << iota // NS below the apex: a delegation point (zone cut)
	fCNAME                     // holds a CNAME
	fWild                      // a child named "*" exists (data or ENT), in Zone.wilds
	fLoading                   // being filled by Load
	fDNAME                     // holds a DNAME (RFC 6672)
)

// New returns an empty zone for origin (any case; stored canonical lower-case FQDN).
func New(origin string) *Zone {
	apex := &node{}
	o := dnsname.Lower(dns.Fqdn(origin))
	return &Zone{
		origin: o,
		names:  map[string]*node{o: apex},
		wilds:  map[*node]*node{},
		apex:   apex,
	}
}

// Origin returns the canonical origin of the zone.
func (z *Zone) Origin() string { return z.origin }

// SetSerialBase records the zone's serial base: the SOA serial it was last
// given explicitly, so that the serial minus the base counts the changes
// since (craftstore's replica keeps it; craftroute adds the counts of a
// zone's shards up to one serial).
func (z *Zone) SetSerialBase(base uint32) {
	z.mu.Lock()
	z.base, z.hasBase = base, true
	z.mu.Unlock()
}

// Serial returns the apex SOA serial and the serial base; without a base
// recorded the base is the serial. ok is false when the zone has no SOA.
func (z *Zone) Serial() (serial, base uint32, ok bool) {
	z.mu.RLock()
	defer z.mu.RUnlock()
	if z.soa == nil {
		return 0, 0, false
	}
	if !z.hasBase {
		return z.soa.Serial, z.soa.Serial, true
	}
	return z.soa.Serial, z.base, true
}

// SOA returns a copy of the apex SOA record, or nil if the zone has none.
func (z *Zone) SOA() *dns.SOA {
	z.mu.RLock()
	defer z.mu.RUnlock()
	if z.soa == nil {
		return nil
	}
	return dns.Copy(z.soa).(*dns.SOA)
}

// Records returns the number of RRs in the zone.
func (z *Zone) Records() int {
	z.mu.RLock()
	defer z.mu.RUnlock()
	return z.records
}

// Names returns the number of owner names holding data; empty non-terminals
// are not counted.
func (z *Zone) Names() int {
	z.mu.RLock()
	defer z.mu.RUnlock()
	return z.named
}

// RRs returns a copy of the RRs at name (type 0 = all types) for the API. It
// returns nil if there are none.
func (z *Zone) RRs(name string, qtype uint16) []dns.RR {
	key := dnsname.Lower(dns.Fqdn(name))
	z.mu.RLock()
	defer z.mu.RUnlock()
	n := z.names[key]
	if n == nil {
		return nil
	}
	rrs := n.rrs
	if qtype != 0 {
		rrs = n.rrset(qtype)
	}
	if len(rrs) == 0 {
		return nil
	}
	cp := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		cp[i] = dns.Copy(rr)
	}
	return cp
}

// rrset returns the RRset of type t at n, a sub-slice of n.rrs.
func (n *node) rrset(t uint16) []dns.RR {
	for i := 0; i < len(n.rrs); i++ {
		rt := n.rrs[i].Header().Rrtype
		if rt < t {
			continue
		}
		if rt > t {
			return nil
		}
		j := i + 1
		for j < len(n.rrs) && n.rrs[j].Header().Rrtype == t {
			j++
		}
		return n.rrs[i:j:j]
	}
	return nil
}

// nodeFlags computes the data flags of a node holding rrs.
func nodeFlags(rrs []dns.RR, apex bool) uint8 {
	var f uint8
	for _, rr := range rrs {
		switch rr.Header().Rrtype {
		case dns.TypeNS:
			if !apex {
				f |= fCut
			}
		case dns.TypeCNAME:
			f |= fCNAME
		case dns.TypeDNAME:
			f |= fDNAME
		}
	}
	return f
}

// refreshApex recomputes the cached apex RRsets. Callers hold the write lock.
func (z *Zone) refreshApex() {
	z.soa, z.negSOA = nil, nil
	if soa := z.apex.rrset(dns.TypeSOA); len(soa) > 0 {
		z.soa = soa[0].(*dns.SOA)
		// RFC 2308 §3: the TTL of the SOA in a negative answer is the minimum
		// of the SOA's own TTL and its MINIMUM field.
		neg := dns.Copy(z.soa).(*dns.SOA)
		neg.Hdr.Ttl = min(neg.Hdr.Ttl, neg.Minttl)
		z.negSOA = neg
	}
	z.apexNS = z.apex.rrset(dns.TypeNS)
}
