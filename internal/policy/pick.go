package policy

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/coredns/coredns/plugin/metadata"

	"github.com/miekg/dns"
)

// Client is who a query's answer is chosen for, and what the choice used.
type Client struct {
	// Addr is the client's address (ClientOf): the ECS option's, else
	// the query's source; the zero Addr matches only default rules.
	Addr netip.Addr
	// Source is the prefix length of Addr the query gave: the ECS
	// option's source prefix, else the address's length.
	Source uint8
	// Meta, when set, is the query's context, whose metadata (the
	// *geoip* plugin's geoip/continent/code, ...) rules by geo read.
	Meta context.Context
	// Used is set when a policy chose an answer; Scope is then the prefix
	// length that chose it (RFC 7871 section 7.2.1: 0 for the default
	// rule), the longest of the answers' when several did.
	Used  bool
	Scope uint8
}

// geo reads a label of the query's metadata, "" when it has none.
func (cl *Client) geo(label string) string {
	if f := metadata.ValueFunc(cl.Meta, label); f != nil {
		return f()
	}
	return ""
}

// Geo labels of the *geoip* plugin's metadata.
const (
	geoContinent   = "geoip/continent/code"
	geoCountry     = "geoip/country/code"
	geoSubdivision = "geoip/subdivisions/code"
)

// compiled is a policy record made ready for queries, with the region
// table it was made with.
type compiled struct {
	rr, regions, health dns.RR // the records compiled: the cache's key
	rules               []rule
	count               int
}

// rule holds the subnets a rule matches (its own and its regions') and
// its pool's fallback chain, with the TTL the rule answers with.
type rule struct {
	nets  []netip.Prefix // longest first
	geos  [][]string     // continent, country, subdivision
	chain []*pool
}

type pool struct {
	rrs    []dns.RR // one per value, the answer's records
	weight []uint32
	down   []bool // the value's status says down
	total  uint64 // of the weights of the values that are not down
}

// cacheSlots is the size of the cache of compiled policies, in sets of
// cacheWays: a policy answers from its compiled form while it stays in
// its set, and is compiled again (a JSON read) when others took its place.
const (
	cacheSlots = 1 << 14
	cacheWays  = 4
)

var (
	cache     [cacheSlots]atomic.Pointer[compiled]
	cacheSeed = maphash.MakeSeed()
)

// load returns rr compiled with region table regions (nil: none) and
// health record health (nil: none): from the cache when it is there, else
// compiled now and put there. A record that does not read (not reached:
// the API checks what it writes) gives nil.
func load(rr, regions, health dns.RR) *compiled {
	h := maphash.Comparable(cacheSeed, rr)
	set := cache[h&(cacheSlots-1)&^(cacheWays-1):][:cacheWays]
	for i := range set {
		c := set[i].Load()
		if c == nil || c.rr != rr || c.health != health {
			continue
		}
		if c.regions == regions {
			return c
		}
		// Every write of the zone makes its apex anew (the serial), and
		// the region table's record with it: the same table, another
		// record. The entry takes the new one once, not a new compile.
		if sameRdata(c.regions, regions) {
			n := *c
			n.regions = regions
			set[i].Store(&n)
			return &n
		}
	}
	c := compile(rr, regions, health)
	if c == nil {
		return nil
	}
	way := int(h>>32) % cacheWays // a way of the set, at random
	for i := range set {
		if old := set[i].Load(); old == nil || old.rr == rr {
			way = i // an empty way, or this record's older form
			break
		}
	}
	set[way].Store(c)
	return c
}

// sameRdata reports whether a and b are both nil or generic records of
// the same RDATA.
func sameRdata(a, b dns.RR) bool {
	if a == nil || b == nil {
		return a == b
	}
	ga, ok1 := a.(*dns.RFC3597)
	gb, ok2 := b.(*dns.RFC3597)
	return ok1 && ok2 && ga.Rdata == gb.Rdata
}

func compile(rr, regions, health dns.RR) *compiled {
	p, t, err := Read(rr)
	if err != nil || len(p.Rules) == 0 || !Covered(t) {
		return nil
	}
	var table *Regions
	if regions != nil {
		table, _ = ReadRegions(regions)
	}
	var down map[string]bool
	if health != nil && p.Check != nil {
		if vals, _, err := Down(health); err == nil {
			down = map[string]bool{}
			for _, v := range vals {
				down[v] = true
			}
		}
	}
	owner := rr.Header().Name
	c := &compiled{rr: rr, regions: regions, health: health, count: max(p.Count, 1)}
	type poolKey struct {
		name string
		ttl  uint32 // the rule's, 0: the pool's own
	}
	pools := map[poolKey]*pool{}
	// chain returns the fallback chain from pool name, its answers with
	// ttl (0: each pool's own).
	chain := func(name string, ttl uint32) []*pool {
		var out []*pool
		for seen := map[string]bool{}; name != "" && !seen[name]; name = p.Pools[name].Fallback {
			seen[name] = true
			pp := p.Pools[name]
			if pp == nil {
				break
			}
			key := poolKey{name, ttl}
			cp := pools[key]
			if cp == nil {
				cp = newPool(owner, t, pp, firstTTL(ttl, pp.TTL, p.TTL), down)
				pools[key] = cp
			}
			out = append(out, cp)
		}
		return out
	}
	for _, r := range p.Rules {
		var nets []netip.Prefix
		for _, s := range r.Subnets {
			if pfx, err := ParsePrefix(s); err == nil {
				nets = append(nets, pfx)
			}
		}
		for _, name := range r.Regions {
			if table == nil {
				continue // a region no longer in the table holds no client
			}
			for _, s := range table.Regions[name] {
				if pfx, err := ParsePrefix(s); err == nil {
					nets = append(nets, pfx)
				}
			}
		}
		var geos [][]string
		for _, g := range r.Geos {
			geos = append(geos, strings.Split(g, "-"))
		}
		def := len(r.Subnets) == 0 && len(r.Regions) == 0 && len(r.Geos) == 0
		if !def && len(nets) == 0 && len(geos) == 0 {
			continue
		}
		// The longest prefix that holds the client is the scope.
		sortLongestFirst(nets)
		c.rules = append(c.rules, rule{nets: nets, geos: geos, chain: chain(r.Pool, r.TTL)})
	}
	return c
}

// newPool compiles pool pp; down are the values its policy's check found
// down (their status obeys it).
func newPool(owner string, t uint16, pp *Pool, ttl uint32, down map[string]bool) *pool {
	cp := &pool{}
	for _, v := range pp.Values {
		a, err := netip.ParseAddr(v.Value)
		if err != nil {
			continue
		}
		w := uint32(1)
		if v.Weight != nil {
			w = uint32(max(*v.Weight, 0))
		}
		cp.rrs = append(cp.rrs, addrRR(owner, t, ttl, a))
		cp.weight = append(cp.weight, w)
		isDown := v.Status == statusDown || (v.Status == "" && down[v.Value])
		cp.down = append(cp.down, isDown)
		if !isDown {
			cp.total += uint64(w)
		}
	}
	return cp
}

func sortLongestFirst(nets []netip.Prefix) {
	for i := 1; i < len(nets); i++ {
		for j := i; j > 0 && nets[j].Bits() > nets[j-1].Bits(); j-- {
			nets[j], nets[j-1] = nets[j-1], nets[j]
		}
	}
}

// Pick answers a query of type t for client cl from the records at a
// name (rrs, sorted by type) and the zone's region table record (nil:
// none): the values the name's policy for t chooses, and true; false when
// the name has no policy for t. The RRs returned are the policy's own:
// callers must not modify them.
func Pick(rrs []dns.RR, regions dns.RR, t uint16, cl *Client) ([]dns.RR, bool) {
	rr := Find(rrs, t)
	if rr == nil {
		return nil, false
	}
	c := load(rr, regions, FindHealth(rrs, t))
	if c == nil {
		return nil, false
	}
	addr := cl.Addr.Unmap()
	for i := range c.rules {
		r := &c.rules[i]
		scope, ok := r.match(addr, cl)
		if !ok {
			continue
		}
		cl.Used = true
		cl.Scope = max(cl.Scope, scope)
		return r.answer(c.count), true
	}
	return nil, false // no default rule: not reached, Check requires one
}

// match reports whether the rule holds addr, client cl's, and by which
// prefix length: a subnet's, or for a geo the query's source prefix (the
// database's network is not in the *geoip* plugin's metadata).
func (r *rule) match(addr netip.Addr, cl *Client) (uint8, bool) {
	if len(r.nets) == 0 && len(r.geos) == 0 {
		return 0, true // the default rule
	}
	if !addr.IsValid() {
		return 0, false
	}
	for _, n := range r.nets {
		if n.Contains(addr) {
			return uint8(n.Bits()), true
		}
	}
	if len(r.geos) == 0 || cl.Meta == nil {
		return 0, false
	}
	continent := cl.geo(geoContinent)
	if continent == "" {
		return 0, false
	}
	country, subdivision := "", ""
	for _, g := range r.geos {
		if g[0] != continent {
			continue
		}
		if len(g) > 1 {
			if country == "" {
				country = cl.geo(geoCountry)
			}
			if g[1] != country {
				continue
			}
		}
		if len(g) > 2 {
			if subdivision == "" {
				subdivision = cl.geo(geoSubdivision)
			}
			if !slices.Contains(strings.Split(subdivision, ","), g[2]) {
				continue
			}
		}
		return cl.Source, true
	}
	return 0, false
}

// answer draws n values from the first pool of the chain that has one up;
// with none up anywhere, the first pool answers with all of its values.
func (r *rule) answer(n int) []dns.RR {
	for _, p := range r.chain {
		if p.total > 0 {
			return p.draw(n)
		}
	}
	if len(r.chain) == 0 {
		return nil
	}
	return r.chain[0].rrs
}

// draw returns n values drawn by weight without replacement among the
// pool's values that are up (total > 0), all of them when n is as many.
func (p *pool) draw(n int) []dns.RR {
	if n == 1 {
		i := p.pick(p.total, nil)
		return p.rrs[i : i+1 : i+1]
	}
	var taken [MaxValues]bool
	out := make([]dns.RR, 0, n)
	total := p.total
	for len(out) < n && total > 0 {
		i := p.pick(total, &taken)
		taken[i] = true
		total -= uint64(p.weight[i])
		out = append(out, p.rrs[i])
	}
	return out
}

// pick draws one value among those up and not taken, whose weights sum to
// total (> 0).
func (p *pool) pick(total uint64, taken *[MaxValues]bool) int {
	x := rand.Uint64N(total)
	last := 0
	for i, w := range p.weight {
		if p.down[i] || (taken != nil && taken[i]) || w == 0 {
			continue
		}
		if x < uint64(w) {
			return i
		}
		x -= uint64(w)
		last = i
	}
	return last
}
