package policy

import (
	"hash/maphash"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"

	"github.com/miekg/dns"
)

// Client is who a query's answer is chosen for, and what the choice used.
type Client struct {
	// Addr is the client's address (ClientOf): the ECS option's, else
	// the query's source; the zero Addr matches only default rules.
	Addr netip.Addr
	// Used is set when a policy chose an answer; Scope is then the prefix
	// length that chose it (RFC 7871 section 7.2.1: 0 for the default
	// rule), the longest of the answers' when several did.
	Used  bool
	Scope uint8
}

// compiled is a policy record made ready for queries, with the region
// table it was made with.
type compiled struct {
	rr, regions dns.RR // the records compiled: the cache's key
	rules       []rule
	count       int
}

// rule holds the subnets a rule matches (its own and its regions') and
// its pool's fallback chain, with the TTL the rule answers with.
type rule struct {
	nets  []netip.Prefix // longest first
	chain []*pool
}

type pool struct {
	rrs    []dns.RR // one per value, the answer's records
	weight []uint32
	down   []bool // the value's status says down
	total  uint64 // of the weights of the values that are not down
}

// cacheSlots is the size of the cache of compiled policies: a policy
// answers from its compiled form while it stays in its slot, and is
// compiled again (a JSON read) when another policy took the slot.
const cacheSlots = 1 << 14

var (
	cache     [cacheSlots]atomic.Pointer[compiled]
	cacheSeed = maphash.MakeSeed()
)

// load returns rr compiled with region table regions (nil: none): from
// the cache when it is there, else compiled now and put there. A record
// that does not read (not reached: the API checks what it writes) gives
// nil.
func load(rr, regions dns.RR) *compiled {
	slot := &cache[maphash.Comparable(cacheSeed, rr)&(cacheSlots-1)]
	if c := slot.Load(); c != nil && c.rr == rr && c.regions == regions {
		return c
	}
	c := compile(rr, regions)
	if c != nil {
		slot.Store(c)
	}
	return c
}

func compile(rr, regions dns.RR) *compiled {
	p, t, err := Read(rr)
	if err != nil || len(p.Rules) == 0 || !Covered(t) {
		return nil
	}
	var table *Regions
	if regions != nil {
		table, _ = ReadRegions(regions)
	}
	owner := rr.Header().Name
	c := &compiled{rr: rr, regions: regions, count: max(p.Count, 1)}
	pools := map[string]*pool{}
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
			key := name
			if ttl != 0 {
				key = name + "\x00ttl"
			}
			cp := pools[key]
			if cp == nil {
				cp = newPool(owner, t, pp, firstTTL(ttl, pp.TTL, p.TTL))
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
		def := len(r.Subnets) == 0 && len(r.Regions) == 0
		if !def && len(nets) == 0 {
			continue
		}
		// The longest prefix that holds the client is the scope.
		sortLongestFirst(nets)
		c.rules = append(c.rules, rule{nets: nets, chain: chain(r.Pool, r.TTL)})
	}
	return c
}

func newPool(owner string, t uint16, pp *Pool, ttl uint32) *pool {
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
		down := v.Status == statusDown
		cp.down = append(cp.down, down)
		if !down {
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
	c := load(rr, regions)
	if c == nil {
		return nil, false
	}
	addr := cl.Addr.Unmap()
	for i := range c.rules {
		r := &c.rules[i]
		scope, ok := r.match(addr)
		if !ok {
			continue
		}
		cl.Used = true
		cl.Scope = max(cl.Scope, scope)
		return r.answer(c.count), true
	}
	return nil, false // no default rule: not reached, Check requires one
}

// match reports whether the rule holds addr, and by which prefix length.
func (r *rule) match(addr netip.Addr) (uint8, bool) {
	if len(r.nets) == 0 {
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
