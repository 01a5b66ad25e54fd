package zone

import (
	"net"
	"slices"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// NameRecords is the full set of RRs at one owner name after a change.
type NameRecords struct {
	Name string
	RRs  []dns.RR
	// Old is the number of records the name held before, for a paged
	// zone's counts (a zone held in memory knows).
	Old int
}

// Set replaces, atomically for readers, all RRs at each given owner name. An
// empty RRs deletes all data at that name. Names are matched
// case-insensitively; names outside the zone are ignored. Empty non-terminals
// appear and disappear as names below them are added and deleted.
//
// The zone keeps the RRs (not copies) and hands them out in responses:
// callers must not modify them afterwards. Set sorts its input before it
// waits for other writers; readers never wait: they see the zone before the
// change or after it (Zone). Build large loads in a fresh Zone with Load
// instead.
func (z *Zone) Set(changes []NameRecords) {
	if z.pg != nil {
		z.pg.set(changes) // the storage holds them already
		return
	}
	type prepared struct {
		key string
		rrs []dns.RR
	}
	prep := make([]prepared, 0, len(changes))
	for _, c := range changes {
		key := dnsname.Lower(dns.Fqdn(c.Name))
		if !dns.IsSubDomain(z.origin, key) {
			continue
		}
		prep = append(prep, prepared{key: key, rrs: sortRRs(c.RRs)})
	}
	z.write(func(v *view) {
		for _, p := range prep {
			v.set(p.key, p.rrs)
		}
		v.refreshApex()
	})
}

// With returns a zone that is z with changes applied as Set applies them,
// and leaves z as it is: the new zone shares z's current version and
// copies only what the changes touch. A member answers from it for a
// transaction part that is committed but not applied yet (a preview).
func (z *Zone) With(changes []NameRecords) *Zone {
	if z.pg != nil {
		return z.withPaged(changes)
	}
	out := &Zone{origin: z.origin}
	next := *z.v.Load()
	next.ed = newEdit()
	for _, c := range changes {
		key := dnsname.Lower(dns.Fqdn(c.Name))
		if dns.IsSubDomain(z.origin, key) {
			next.set(key, sortRRs(c.RRs))
		}
	}
	next.refreshApex()
	out.v.Store(&next)
	return out
}

// Load adds rrs to the zone, grouping them by owner name; RRs outside the
// zone are ignored. It is meant for bulk loads (a zone file, a snapshot) into
// a fresh Zone that no reader sees yet; readers of a zone in use see it
// before the load or after it. The zone keeps the RRs; callers must not
// modify them afterwards.
func (z *Zone) Load(rrs []dns.RR) {
	z.write(func(v *view) {
		var touched []*node
		for _, rr := range rrs {
			key := dnsname.Lower(rr.Header().Name)
			if !dns.IsSubDomain(z.origin, key) {
				continue
			}
			n := v.mine(key)
			if n == nil {
				n = v.insert(key)
			}
			if n.flags&fLoading == 0 {
				n.flags |= fLoading
				n.setRecords(n.records()) // from its wire, which uncount drops
				v.uncount(n)
				touched = append(touched, n)
			}
			n.setRecords(append(n.records(), rr))
		}
		for _, n := range touched {
			n.flags &^= fLoading
			rrs := n.records()
			slices.SortStableFunc(rrs, byType)
			rrs = dedup(rrs)
			if cap(rrs) > len(rrs) {
				rrs = slices.Clone(rrs)
			}
			n.setRecords(rrs)
			v.count(n)
		}
		v.refreshApex()
	})
}

// mine returns the node at key for the write building v to change: the
// node itself when this write made it, else a copy that replaces it in v
// (readers of earlier versions keep the original). nil if key does not
// exist.
func (v *view) mine(key string) *node {
	n := v.names.get(key)
	if n == nil || n.ed == v.ed.id {
		return n
	}
	c := *n
	c.ed = v.ed.id
	c.flags &^= fBlock // a plain node, its wire and name in n's block
	if n.rrs != nil {
		// The copy's own slice header (setRecords writes it); an
		// append must not write into the original's array. A block's
		// copy has none: it decodes its RRs from n's block, as n does.
		rrs := (*n.rrs)[:len(*n.rrs):len(*n.rrs)]
		c.rrs = &rrs
	}
	v.names.set(v.ed, key, &c)
	if n == v.apex {
		v.apex = &c
	}
	return &c
}

// set replaces the data at key. The node that holds the new data is made
// once, in its block (dataNode), from a draft on the stack: the old node is
// not copied first.
func (v *view) set(key string, rrs []dns.RR) {
	old := v.names.get(key)
	if len(rrs) == 0 {
		if old == nil || !old.hasData() {
			return
		}
		v.discount(old)
		if old.kids == 0 && old != v.apex {
			v.remove(key)
			return
		}
		// An empty non-terminal: a new plain node, neither the old data's
		// allocation nor a change to it (a block of this write may be one
		// the collector does not scan: wire.go).
		e := &node{name: key, kids: old.kids, flags: old.flags &^ fOwn, ed: v.ed.id}
		if old == v.apex {
			v.apex = e
		}
		v.names.set(v.ed, key, e)
		return
	}
	draft := node{name: key, ed: v.ed.id}
	apex := old != nil && old == v.apex
	if old != nil {
		v.discount(old)
		draft.kids, draft.flags = old.kids, old.flags&^fOwn
	}
	draft.flags |= nodeFlags(rrs, apex)
	n := dataNode(&draft, rrs, v.ed)
	if n == nil {
		c, list := draft, rrs // RRs that do not pack: a plain node
		c.rrs = &list
		n = &c
	}
	switch {
	case old == nil:
		v.link(key, n)
	case apex:
		v.apex = n
		fallthrough
	default:
		v.names.set(v.ed, key, n)
	}
	v.tally(n)
}

// count adds n's data (Load's) to the zone's counters and sets its data
// flags. It replaces n in v with the node made for queries (dataNode), when
// its RRs pack.
func (v *view) count(n *node) {
	if !n.hasData() {
		return
	}
	rrs := n.records()
	n.flags |= nodeFlags(rrs, n == v.apex)
	if d := dataNode(n, rrs, v.ed); d != nil {
		v.names.set(v.ed, d.name, d)
		if n == v.apex {
			v.apex = d
		}
		n = d
	}
	v.tally(n)
}

// tally adds n's data to the zone's counters.
func (v *view) tally(n *node) {
	v.records += n.count()
	v.named++
	if n.flags&fCut != 0 {
		v.cuts++
	}
	if n.flags&fDNAME != 0 {
		v.dnames++
	}
	if n.flags&fPolicy != 0 {
		v.policy++
	}
}

// discount removes n's data from the zone's counters; n is left alone.
func (v *view) discount(n *node) {
	if !n.hasData() {
		return
	}
	v.records -= n.count()
	v.named--
	if n.flags&fCut != 0 {
		v.cuts--
	}
	if n.flags&fDNAME != 0 {
		v.dnames--
	}
	if n.flags&fPolicy != 0 {
		v.policy--
	}
}

// uncount removes n's data from the zone's counters and clears its data
// flags; n.rrs is left alone.
func (v *view) uncount(n *node) {
	if !n.hasData() {
		return
	}
	v.discount(n)
	n.flags &^= fData
	n.wlen = 0
}

// insert adds an empty node for key, and empty non-terminals for its
// missing ancestors, maintaining the child counts. key is below the apex.
func (v *view) insert(key string) *node {
	n := &node{name: key, ed: v.ed.id}
	v.link(key, n)
	return n
}

// link adds n (this write's) at key, which does not exist, and empty
// non-terminals for its missing ancestors, maintaining the child counts.
// key is below the apex.
func (v *view) link(key string, n *node) {
	v.names.set(v.ed, key, n)
	pk := parentKey(key)
	p := v.mine(pk)
	if p == nil {
		p = v.insert(pk)
	}
	p.kids++
	if isWildcard(key) {
		p.flags |= fWild
	}
}

// remove deletes the node at key, which holds no data and has no children,
// and every ancestor that becomes an empty non-terminal without children.
func (v *view) remove(key string) {
	for key != v.origin {
		v.names.set(v.ed, key, nil)
		pk := parentKey(key)
		p := v.mine(pk)
		p.kids--
		if isWildcard(key) {
			p.flags &^= fWild
		}
		if p.kids > 0 || p.hasData() || p == v.apex {
			return
		}
		key = pk
	}
}

// sortRRs returns rrs grouped by type (stable within a type) without
// duplicates, in a new slice. Types are in numeric order so that rrset can
// stop early.
func sortRRs(rrs []dns.RR) []dns.RR {
	if len(rrs) == 0 {
		return nil
	}
	out := slices.Clone(rrs)
	slices.SortStableFunc(out, byType)
	return dedup(out)
}

// dedup removes, in place, RRs that repeat an earlier one of rrs (sorted by
// type) but for the TTL, as NSD does when it loads a zone. RRs of one RRset
// with different TTLs are kept as they are, as NSD does too.
func dedup(rrs []dns.RR) []dns.RR {
	out := rrs[:0]
	for i := 0; i < len(rrs); {
		j := i + 1
		for j < len(rrs) && rrs[j].Header().Rrtype == rrs[i].Header().Rrtype {
			j++
		}
		start := len(out)
		if j-i > 64 {
			// Large RRsets: by text, TTL and owner normalized.
			seen := make(map[string]bool, j-i)
			for _, rr := range rrs[i:j] {
				c := dns.Copy(rr)
				c.Header().Ttl, c.Header().Name = 0, dnsname.Lower(c.Header().Name)
				if k := c.String(); !seen[k] {
					seen[k] = true
					out = append(out, rr)
				}
			}
		} else {
		next:
			for _, rr := range rrs[i:j] {
				for _, kept := range out[start:] {
					if dns.IsDuplicate(kept, rr) {
						continue next
					}
				}
				out = append(out, rr)
			}
		}
		i = j
	}
	clear(rrs[len(out):])
	return out
}

func byType(a, b dns.RR) int { return int(a.Header().Rrtype) - int(b.Header().Rrtype) }

// withOwner returns rr, or for the common types a copy of it whose owner is
// name (equal to rr's: the node's name, in its block) and whose address is
// held in the copy itself. rr itself is left alone: other zones may hold
// it.
func withOwner(rr dns.RR, name string) dns.RR {
	switch rr := rr.(type) {
	case *dns.A:
		if rr.A.To4() == nil {
			return rr
		}
		c := new(struct {
			rr dns.A
			ip [net.IPv4len]byte
		})
		c.rr, c.ip = *rr, [net.IPv4len]byte(rr.A.To4())
		c.rr.A, c.rr.Hdr.Name = c.ip[:], name
		return &c.rr
	case *dns.AAAA:
		if len(rr.AAAA) != net.IPv6len {
			return withName(rr, name)
		}
		c := new(struct {
			rr dns.AAAA
			ip [net.IPv6len]byte
		})
		c.rr, c.ip = *rr, [net.IPv6len]byte(rr.AAAA)
		c.rr.AAAA, c.rr.Hdr.Name = c.ip[:], name
		return &c.rr
	case *dns.CNAME:
		return withName(rr, name)
	case *dns.MX:
		return withName(rr, name)
	case *dns.TXT:
		return withName(rr, name)
	case *dns.NS:
		return withName(rr, name)
	case *dns.PTR:
		return withName(rr, name)
	case *dns.SRV:
		return withName(rr, name)
	}
	return rr
}

// withName returns a copy of rr owned by name.
func withName[T any, P interface {
	*T
	dns.RR
}](rr P, name string) dns.RR {
	c := P(new(T))
	*c = *rr
	c.Header().Name = name
	return c
}
