// Package zone holds the in-memory read view of one authoritative zone and
// answers queries from it (RFC 1034 §4.3.2, RFC 4592, RFC 2308).
//
// Owner names are kept in a hash trie keyed by their canonical (lower-case)
// presentation form. Every ancestor of a name that holds data exists in the
// trie too, as an empty non-terminal when it holds no data of its own, so
// the closest encloser of a query name is the longest of its suffixes found
// in the trie. The RRs at a name are stored once, sorted by type; an RRset
// is a run of that slice and is placed straight into responses without
// copying.
//
// Reads take no lock: a lookup loads the zone's current version (an atomic
// pointer) and answers from it alone, so it never waits for a write and
// never sees half of one. A write (Set, Load) builds the next version from
// the current one, copying only the paths to the names it changes, and
// publishes it with one atomic store (read-copy-update); writers wait for
// each other. A large bulk load should still be built in a fresh Zone (New
// then Load) and swapped in by the caller.
package zone

import (
	"sync"
	"sync/atomic"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// Zone is the read view of one authoritative zone. The zero value is not
// usable; create one with New.
type Zone struct {
	origin string // canonical (lower-case, fully qualified) origin

	wmu sync.Mutex           // serializes writers
	v   atomic.Pointer[view] // the version readers see

	pg *pager // a paged zone's storage (paged.go); nil: held in memory
}

// view is one version of a zone. Readers load the current one and never
// wait: a write builds the next version from the current one, sharing all
// it does not change (trie), and publishes it with one atomic store. A
// published view and its nodes are never changed again.
type view struct {
	origin  string
	names   trie     // canonical owner name → node; ENTs included
	apex    *node    // the node at origin, in names
	soa     *dns.SOA // apex SOA, nil if none
	negSOA  dns.RR   // SOA for negative answers, TTL per RFC 2308 §3
	apexNS  []dns.RR // apex NS RRset, added to the authority section of positive answers
	records int      // number of RRs
	named   int      // number of owner names holding data
	cuts    int      // number of delegation points (NS below the apex)
	dnames  int      // number of names holding a DNAME
	policy  int      // number of names holding a request-routing policy
	base    uint32   // serial base (SetSerialBase), when hasBase
	hasBase bool
	ed      *edit // the write building this view

	// apexNSWire and negWire are apexNS and negSOA packed (wire.go).
	apexNSWire, negWire []byte

	src *pagedRead // a paged zone's read: names come from it, not from names
}

// node is one owner name.
type node struct {
	name  string    // canonical
	rrs   *[]dns.RR // all RRs at the name, sorted by type (records); nil for an ENT and for a block (block.go), whose RRs are only packed
	ed    uint64    // the id of the write that made this node: only it may change it
	kids  uint32    // number of child names in the trie: the ENT reference count
	wlen  uint16    // length of rrs packed, right before name (wire.go); 0 if not
	flags uint8
}

const (
	fCut     uint8 = 1 << iota // NS below the apex: a delegation point (zone cut)
	fCNAME                     // holds a CNAME
	fWild                      // a child named "*" exists (data or ENT)
	fLoading                   // being filled by Load
	fDNAME                     // holds a DNAME (RFC 6672)
	fBlock                     // a block the collector does not scan (block.go): it points only into itself
	fPolicy                    // holds a request-routing policy (internal/policy)

	fData = fCut | fCNAME | fDNAME | fPolicy // the flags nodeFlags derives from a node's RRs
	fOwn  = fData | fBlock                   // the flags of a node's data and allocation, not for another node
)

// New returns an empty zone for origin (any case; stored canonical lower-case FQDN).
func New(origin string) *Zone {
	o := dnsname.Lower(dns.Fqdn(origin))
	ed := newEdit()
	v := &view{origin: o, apex: &node{name: o, ed: ed.id}, ed: ed}
	v.names.set(ed, o, v.apex)
	z := &Zone{origin: o}
	z.v.Store(v)
	return z
}

// load returns the current version.
func (z *Zone) load() *view { return z.v.Load() }

// write applies fn to a new version made from the current one and
// publishes it; writers wait for each other, readers for nobody.
func (z *Zone) write(fn func(v *view)) {
	z.wmu.Lock()
	defer z.wmu.Unlock()
	next := *z.v.Load()
	next.ed = newEdit()
	fn(&next)
	z.v.Store(&next)
}

// Node reports what the zone holds at name (canonical): records of its
// own, descendants (names with data, or empty non-terminals above them).
func (z *Zone) Node(name string) (recs, below bool) {
	if z.pg != nil {
		_, recs, below = z.pagedNode(name)
		return recs, below
	}
	n := z.load().names.get(name)
	if n == nil {
		return false, false
	}
	return n.hasData(), n.kids > 0
}

// Origin returns the canonical origin of the zone.
func (z *Zone) Origin() string { return z.origin }

// SetSerialBase records the zone's serial base: the SOA serial it was last
// given explicitly, so that the serial minus the base counts the changes
// since (craftstore's replica keeps it; craftroute adds the counts of a
// zone's shards up to one serial).
func (z *Zone) SetSerialBase(base uint32) {
	if z.pg != nil {
		z.pg.base.Store(uint64(base) | 1<<32)
		return
	}
	z.write(func(v *view) { v.base, v.hasBase = base, true })
}

// Serial returns the apex SOA serial and the serial base; without a base
// recorded the base is the serial. ok is false when the zone has no SOA.
func (z *Zone) Serial() (serial, base uint32, ok bool) {
	v := z.read()
	defer z.done(v)
	if z.pg != nil {
		b := z.pg.base.Load()
		v.base, v.hasBase = uint32(b), b&(1<<32) != 0
	}
	if v.soa == nil {
		return 0, 0, false
	}
	if !v.hasBase {
		return v.soa.Serial, v.soa.Serial, true
	}
	return v.soa.Serial, v.base, true
}

// SOA returns a copy of the apex SOA record, or nil if the zone has none.
func (z *Zone) SOA() *dns.SOA {
	v := z.read()
	defer z.done(v)
	if v.soa == nil {
		return nil
	}
	return dns.Copy(v.soa).(*dns.SOA)
}

// Records returns the number of RRs in the zone.
func (z *Zone) Records() int {
	if z.pg != nil {
		return int(z.pg.records.Load())
	}
	return z.load().records
}

// Names returns the number of owner names holding data; empty non-terminals
// are not counted.
func (z *Zone) Names() int {
	if z.pg != nil {
		return int(z.pg.named.Load())
	}
	return z.load().named
}

// RRs returns a copy of the RRs at name (type 0 = all types) for the API. It
// returns nil if there are none.
func (z *Zone) RRs(name string, qtype uint16) []dns.RR {
	key := dnsname.Lower(dns.Fqdn(name))
	var rrs []dns.RR
	if z.pg != nil {
		rrs, _, _ = z.pagedNode(key)
	} else if n := z.load().names.get(key); n != nil {
		rrs = n.records()
	}
	if rrs == nil {
		return nil
	}
	n := &node{rrs: &rrs}
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

// rrset returns the RRset of type t at n, a sub-slice of n.rrs; for a
// node whose RRs are only packed (block.go), the RRset decoded, new on each
// call.
func (n *node) rrset(t uint16) []dns.RR {
	if n.rrs == nil {
		if n.wlen == 0 {
			return nil
		}
		s := n.packedSet(t)
		if s.count == 0 {
			return nil
		}
		return unpackRRs(n.wireOf()[s.from:s.to], n.name)
	}
	rrs := *n.rrs
	for i := 0; i < len(rrs); i++ {
		rt := rrs[i].Header().Rrtype
		if rt < t {
			continue
		}
		if rt > t {
			return nil
		}
		j := i + 1
		for j < len(rrs) && rrs[j].Header().Rrtype == t {
			j++
		}
		return rrs[i:j:j]
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
		case policy.TypePolicy:
			f |= fPolicy
		}
	}
	return f
}

// refreshApex recomputes the cached apex RRsets of a version being written.
func (z *view) refreshApex() {
	z.soa, z.negSOA, z.negWire = nil, nil, nil
	if soa := z.apex.rrset(dns.TypeSOA); len(soa) > 0 {
		z.soa = soa[0].(*dns.SOA)
		// RFC 2308 §3: the TTL of the SOA in a negative answer is the minimum
		// of the SOA's own TTL and its MINIMUM field.
		neg := dns.Copy(z.soa).(*dns.SOA)
		neg.Hdr.Ttl = min(neg.Hdr.Ttl, neg.Minttl)
		z.negSOA = neg
		z.negWire = packRRs([]dns.RR{neg})
	}
	z.apexNS = z.apex.rrset(dns.TypeNS)
	z.apexNSWire = packRRs(z.apexNS)
}
