package zone

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// Paged zones. A paged zone keeps no records in memory: they stay in
// storage (craftstore's bbolt file, whose memory map the kernel pages in
// and out as file-backed memory), and each read looks the names it needs
// up there, all in one consistent state of the stored zone (a read
// transaction), with the same lookup code as a zone held in memory: the
// answers are the same. A bounded cache of decoded names sits in front.
// An entry is used only while the stored bytes at its name are the bytes
// it was decoded from, which the read compares in its own state: the cache
// needs no invalidation, and a read never mixes two states.

// Pages is one consistent state of a stored zone, which a paged zone
// reads: names are canonical (lower-case, fully qualified, presentation
// form). One read uses it, from one goroutine, until End.
type Pages interface {
	// Get returns the stored records at name, nil for none. The bytes
	// are valid until the read ends.
	Get(name []byte) []byte
	// Below reports whether a name below name holds records, not
	// counting those for which skip (when not nil) returns true.
	Below(name []byte, skip func(desc []byte) bool) bool
	// End ends the read: neither the Pages nor the bytes it returned are
	// used after.
	End()
}

// Storage is where a paged zone reads its records.
type Storage struct {
	// Read begins a read of one consistent state of the zone.
	Read func() (Pages, error)
	// Decode decodes the records Get returned.
	Decode func([]byte) ([]dns.RR, error)
}

// MinPagedCache is the smallest cache of a paged zone, in names.
const MinPagedCache = 64

// pager is a paged zone's storage, cache and what it keeps of the zone
// besides: the serial base, the counts, the names holding policies.
type pager struct {
	st     Storage
	cache  *nodeCache
	apex   atomic.Pointer[pagedApex]
	origin []byte // the zone's origin as Pages take names

	base    atomic.Uint64 // the serial base | 1<<32 when set
	records atomic.Int64
	named   atomic.Int64

	pmu      sync.Mutex
	policies map[string]struct{} // names holding a request-routing policy

	// over holds the names a preview (With) changes, nil in a zone's own
	// pager: their records, empty for a name deleted.
	over map[string][]dns.RR
	// overBelow holds the proper ancestors of over's names that hold
	// records after the preview.
	overBelow map[string]struct{}
}

// pagedApex is the apex node and what a view derives from it, kept while
// the stored apex is the bytes it was made from.
type pagedApex struct {
	val []byte
	v   view // origin, apex, soa, negSOA, apexNS and their wire forms
}

// NewPaged returns a zone for origin whose records stay in st, with a
// cache of up to cache decoded names (at least MinPagedCache).
func NewPaged(origin string, st Storage, cache int) *Zone {
	o := dnsname.Lower(dns.Fqdn(origin))
	z := &Zone{origin: o, pg: &pager{st: st, cache: newNodeCache(max(cache, MinPagedCache)), origin: []byte(o), policies: map[string]struct{}{}}}
	z.v.Store(&view{origin: o, apex: &node{name: o}})
	return z
}

// Paged reports whether the zone's records stay in storage (NewPaged).
func (z *Zone) Paged() bool { return z.pg != nil }

// SetCounts sets the records and the names holding them that a paged
// zone holds (counted in storage; Set keeps them since).
func (z *Zone) SetCounts(records, names int) {
	if z.pg != nil {
		z.pg.records.Store(int64(records))
		z.pg.named.Store(int64(names))
	}
}

// read returns the view a read of z uses, which done ends: a paged
// zone's in one state of its storage (on an error, a view without an SOA,
// which answers SERVFAIL).
func (z *Zone) read() *view {
	if z.pg == nil {
		return z.load()
	}
	return z.pg.read(z.origin)
}

// done ends the read of v (read).
func (z *Zone) done(v *view) {
	if r := v.src; r != nil {
		r.pages.End()
		q := r.q // r is in q: zeroed below
		*q = pagedQuery{}
		queries.Put(q)
	}
}

// pagedQuery is what one read of a paged zone needs, in one allocation
// that reads reuse.
type pagedQuery struct {
	v view
	r pagedRead
}

var queries = sync.Pool{New: func() any { return new(pagedQuery) }}

// read begins a read of the zone at origin.
func (p *pager) read(origin string) *view {
	pages, err := p.st.Read()
	if err != nil {
		return &view{origin: origin, apex: &node{name: origin}}
	}
	q := queries.Get().(*pagedQuery)
	q.r = pagedRead{p: p, pages: pages, origin: origin, q: q}
	p.apexView(&q.r, &q.v)
	q.v.src = &q.r
	return &q.v
}

// apexView sets v to the view of the zone at r's origin as r reads it.
func (p *pager) apexView(r *pagedRead, v *view) {
	origin := r.origin
	val := r.pages.Get(p.origin)
	if p.over != nil {
		if rrs, ok := p.over[origin]; ok {
			*v = view{origin: origin, apex: &node{name: origin, rrs: &rrs, flags: nodeFlags(rrs, true)}}
			if len(rrs) == 0 {
				v.apex = &node{name: origin}
			}
			v.refreshApex()
			v.cuts, v.dnames = 1, 1
			return
		}
	}
	if a := p.apex.Load(); a != nil && bytes.Equal(a.val, val) {
		*v = a.v
		return
	}
	a := &pagedApex{val: bytes.Clone(val)}
	a.v = view{origin: origin, apex: &node{name: origin}}
	if val != nil {
		if rrs, err := p.decode(val); err == nil {
			a.v.apex = &node{name: origin, rrs: &rrs, flags: nodeFlags(rrs, true)}
			if d := dataNode(a.v.apex, rrs, newEdit()); d != nil {
				a.v.apex = d
			}
		}
	}
	a.v.refreshApex()
	// Every read walks the names above a query name: a paged zone does
	// not count its cuts and DNAMEs.
	a.v.cuts, a.v.dnames = 1, 1
	p.apex.Store(a)
	*v = a.v
}

// decode decodes stored records, sorted by type as nodes hold them.
func (p *pager) decode(val []byte) ([]dns.RR, error) {
	rrs, err := p.st.Decode(val)
	if err != nil {
		return nil, err
	}
	return sortRRs(rrs), nil
}

// pagedRead is one read of a paged zone.
type pagedRead struct {
	p      *pager
	pages  Pages
	origin string
	q      *pagedQuery
	// seen are the nodes this read returned: a name asked again gets the
	// same node, as from a trie. A lookup tells RRsets apart by identity
	// (a CNAME loop, a DNAME applied again, a compiled policy), which a
	// name decoded anew (evicted from the cache meanwhile) would not keep.
	seen    []seenNode
	seenBuf [8]seenNode // seen's first array
}

type seenNode struct {
	name string
	n    *node
}

// node returns the node at name (canonical), an empty non-terminal when
// only names below it hold records, nil when it does not exist.
func (r *pagedRead) node(name []byte) *node {
	for _, s := range r.seen {
		if s.name == string(name) {
			return s.n
		}
	}
	n := r.lookup(name)
	if n != nil {
		if r.seen == nil {
			r.seen = r.seenBuf[:0]
		}
		r.seen = append(r.seen, seenNode{n.name, n})
	}
	return n
}

// lookup reads the node at name (node).
func (r *pagedRead) lookup(name []byte) *node {
	if r.p.over != nil {
		if rrs, ok := r.p.over[string(name)]; ok {
			if len(rrs) > 0 {
				return &node{name: string(name), rrs: &rrs, flags: nodeFlags(rrs, string(name) == r.origin)}
			}
			if r.below(name) {
				return &node{name: string(name), kids: 1}
			}
			return nil
		}
	}
	val := r.pages.Get(name)
	if val == nil {
		if r.below(name) {
			return &node{name: string(name), kids: 1}
		}
		return nil
	}
	if n := r.p.cache.get(name, val); n != nil {
		return n
	}
	rrs, err := r.p.decode(val)
	if err != nil || len(rrs) == 0 {
		return nil
	}
	n := &node{name: string(name), rrs: &rrs, flags: nodeFlags(rrs, string(name) == r.origin)}
	if d := dataNode(n, rrs, newEdit()); d != nil {
		n = d // its RRs packed too, for AppendReply
	}
	r.p.cache.put(n.name, bytes.Clone(val), n)
	return n
}

// below reports whether a name below name holds records in this read.
func (r *pagedRead) below(name []byte) bool {
	if r.p.over == nil {
		return r.pages.Below(name, nil)
	}
	if _, ok := r.p.overBelow[string(name)]; ok {
		return true
	}
	return r.pages.Below(name, func(desc []byte) bool {
		rrs, ok := r.p.over[string(desc)]
		return ok && len(rrs) == 0 // deleted by the preview
	})
}

// get returns the node at name in v: from the trie, or in a paged zone
// from its read.
func (z *view) get(name []byte) *node {
	if z.src != nil {
		return z.src.node(name)
	}
	return z.names.getBytes(name)
}

// nodeCache is a bounded cache of decoded names, each kept with the
// stored bytes it was decoded from. It evicts at random (the order of
// Go's map iteration): the names a query load asks most are soon back.
type nodeCache struct {
	shards [16]cacheShard
	per    int // entries per shard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cachedNode
}

type cachedNode struct {
	val []byte
	n   *node
}

func newNodeCache(size int) *nodeCache {
	c := &nodeCache{per: max(size/16, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cachedNode)
	}
	return c
}

func (c *nodeCache) shard(name []byte) *cacheShard {
	var h uint32 = 2166136261
	for _, b := range name {
		h = (h ^ uint32(b)) * 16777619
	}
	return &c.shards[h%uint32(len(c.shards))]
}

// get returns the node cached for name when it was decoded from val.
func (c *nodeCache) get(name, val []byte) *node {
	s := c.shard(name)
	s.mu.RLock()
	e, ok := s.m[string(name)]
	s.mu.RUnlock()
	if ok && bytes.Equal(e.val, val) {
		return e.n
	}
	return nil
}

// put caches n, decoded from val, for name.
func (c *nodeCache) put(name string, val []byte, n *node) {
	if c.per == 0 {
		return // a cache that keeps nothing (tests: every name decoded anew)
	}
	s := c.shard([]byte(name))
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[name]; !ok && len(s.m) >= c.per {
		for k := range s.m {
			delete(s.m, k)
			break
		}
	}
	s.m[name] = cachedNode{val, n}
}

// set notes, in a paged zone, changes the storage already holds: the
// counts (by NameRecords.Old) and the names holding policies.
func (p *pager) set(changes []NameRecords) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	for _, c := range changes {
		name := dnsname.Lower(dns.Fqdn(c.Name))
		p.records.Add(int64(len(c.RRs) - c.Old))
		switch {
		case len(c.RRs) > 0 && c.Old == 0:
			p.named.Add(1)
		case len(c.RRs) == 0 && c.Old > 0:
			p.named.Add(-1)
		}
		if nodeFlags(c.RRs, false)&fPolicy != 0 {
			p.policies[name] = struct{}{}
		} else {
			delete(p.policies, name)
		}
	}
}

// policyNames returns the names holding policies, sorted.
func (p *pager) policyNames() []string {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	out := make([]string, 0, len(p.policies))
	for n := range p.policies {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// NotePolicy notes, while a paged zone's storage is counted at its start,
// that name holds a request-routing policy.
func (z *Zone) NotePolicy(name string) {
	if z.pg != nil {
		z.pg.pmu.Lock()
		z.pg.policies[dnsname.Lower(dns.Fqdn(name))] = struct{}{}
		z.pg.pmu.Unlock()
	}
}

// withPaged returns a preview of the paged zone z with changes applied
// (With): a pager that reads z's storage with changes over it.
func (z *Zone) withPaged(changes []NameRecords) *Zone {
	p := z.pg
	// No cache: a preview lives for one query, whose read keeps the
	// names it decoded (pagedRead.seen).
	np := &pager{st: p.st, cache: &nodeCache{}, origin: p.origin, policies: map[string]struct{}{},
		over: map[string][]dns.RR{}, overBelow: map[string]struct{}{}}
	np.base.Store(p.base.Load())
	for _, c := range changes {
		name := dnsname.Lower(dns.Fqdn(c.Name))
		if !dns.IsSubDomain(z.origin, name) {
			continue
		}
		np.over[name] = sortRRs(c.RRs)
	}
	for name, rrs := range np.over {
		if len(rrs) == 0 {
			continue
		}
		for n := name; n != z.origin; {
			i := bytes.IndexByte([]byte(n), '.')
			if i < 0 || i == len(n)-1 {
				break
			}
			n = n[i+1:]
			np.overBelow[n] = struct{}{}
		}
	}
	nz := &Zone{origin: z.origin, pg: np}
	nz.v.Store(&view{origin: z.origin, apex: &node{name: z.origin}})
	return nz
}

// pagedNode returns the records at name (canonical) of a paged zone, and
// whether it holds records and has names below it.
func (z *Zone) pagedNode(name string) (rrs []dns.RR, recs, below bool) {
	v := z.read()
	defer z.done(v)
	n := v.get([]byte(name))
	if n == nil {
		return nil, false, false
	}
	if n.hasData() {
		return n.records(), true, v.src.below([]byte(name))
	}
	return nil, false, true
}

// pagedPolicies calls fn with the policy records of each name of a paged
// zone that holds one, in order, until fn returns false.
func (z *Zone) pagedPolicies(fn func(name string, rrs []dns.RR) bool) {
	for _, name := range z.pg.policyNames() {
		rrs, _, _ := z.pagedNode(name)
		var ps []dns.RR
		for _, rr := range rrs {
			if policy.Reserved(rr.Header().Rrtype) {
				ps = append(ps, rr)
			}
		}
		if len(ps) > 0 && !fn(name, ps) {
			return
		}
	}
}
