package zone

import (
	"slices"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// NameRecords is the full set of RRs at one owner name after a change.
type NameRecords struct {
	Name string
	RRs  []dns.RR
}

// Set replaces, atomically for readers, all RRs at each given owner name. An
// empty RRs deletes all data at that name. Names are matched
// case-insensitively; names outside the zone are ignored. Empty non-terminals
// appear and disappear as names below them are added and deleted.
//
// The zone keeps the RRs (not copies) and hands them out in responses:
// callers must not modify them afterwards. Set sorts its input outside the
// lock and holds the write lock only to swap the prepared slices in, so a
// change of a few hundred names stalls readers for microseconds; build large
// loads in a fresh Zone with Load instead.
func (z *Zone) Set(changes []NameRecords) {
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

	z.mu.Lock()
	defer z.mu.Unlock()
	for _, p := range prep {
		z.set(p.key, p.rrs)
	}
	z.refreshApex()
}

// Load adds rrs to the zone, grouping them by owner name; RRs outside the
// zone are ignored. It is meant for bulk loads (a zone file, a snapshot) into
// a fresh Zone that no reader sees yet: it holds the write lock for the whole
// load. The zone keeps the RRs; callers must not modify them afterwards.
func (z *Zone) Load(rrs []dns.RR) {
	z.mu.Lock()
	defer z.mu.Unlock()

	var touched []*node
	for _, rr := range rrs {
		key := dnsname.Lower(rr.Header().Name)
		if !dns.IsSubDomain(z.origin, key) {
			continue
		}
		n := z.names[key]
		if n == nil {
			n = z.insert(key)
		}
		if n.flags&fLoading == 0 {
			n.flags |= fLoading
			z.uncount(n)
			touched = append(touched, n)
		}
		n.rrs = append(n.rrs, rr)
	}
	for _, n := range touched {
		n.flags &^= fLoading
		slices.SortStableFunc(n.rrs, byType)
		n.rrs = dedup(n.rrs)
		if cap(n.rrs) > len(n.rrs) {
			n.rrs = slices.Clone(n.rrs)
		}
		z.count(n)
	}
	z.refreshApex()
}

// set replaces the data at key. Callers hold the write lock.
func (z *Zone) set(key string, rrs []dns.RR) {
	n := z.names[key]
	if n != nil {
		z.uncount(n)
		n.rrs = nil
	}
	if len(rrs) == 0 {
		if n != nil && n.kids == 0 && n != z.apex {
			z.remove(key)
		}
		return
	}
	if n == nil {
		n = z.insert(key)
	}
	n.rrs = rrs
	z.count(n)
}

// count adds n's data to the zone's counters and sets its data flags.
func (z *Zone) count(n *node) {
	if len(n.rrs) == 0 {
		return
	}
	n.flags |= nodeFlags(n.rrs, n == z.apex)
	z.records += len(n.rrs)
	z.named++
	if n.flags&fCut != 0 {
		z.cuts++
	}
	if n.flags&fDNAME != 0 {
		z.dnames++
	}
}

// uncount removes n's data from the zone's counters and clears its data
// flags; n.rrs is left alone.
func (z *Zone) uncount(n *node) {
	if len(n.rrs) == 0 {
		return
	}
	z.records -= len(n.rrs)
	z.named--
	if n.flags&fCut != 0 {
		z.cuts--
	}
	if n.flags&fDNAME != 0 {
		z.dnames--
	}
	n.flags &^= fCut | fCNAME | fDNAME
}

// insert adds an empty node for key, and empty non-terminals for its
// missing ancestors, maintaining the child counts. key is below the apex.
func (z *Zone) insert(key string) *node {
	n := &node{}
	z.names[key] = n
	pk := parentKey(key)
	p := z.names[pk]
	if p == nil {
		p = z.insert(pk)
	}
	p.kids++
	if isWildcard(key) {
		p.flags |= fWild
		z.wilds[p] = n
	}
	return n
}

// remove deletes the node at key, which holds no data and has no children,
// and every ancestor that becomes an empty non-terminal without children.
func (z *Zone) remove(key string) {
	for key != z.origin {
		delete(z.names, key)
		pk := parentKey(key)
		p := z.names[pk]
		p.kids--
		if isWildcard(key) {
			p.flags &^= fWild
			delete(z.wilds, p)
		}
		if p.kids > 0 || len(p.rrs) > 0 || p == z.apex {
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
