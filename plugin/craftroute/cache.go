package craftroute

import (
	"time"

	"github.com/coredns/coredns/plugin/pkg/cache"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// negCache holds merged negative answers (NXDOMAIN and NODATA that took a
// broadcast) for the TTL of the SOA they carry, which craftstore caps at the
// SOA MINIMUM (RFC 2308 §3, §5). It is CoreDNS's plugin/pkg/cache, as the
// cache plugin uses: 256 shards with a lock each, and a random entry of a
// full shard evicted, so it holds about max entries (at least 4 per shard).
//
// Coherence: every entry records when its resolution began (the number of
// the last change notice then, changeTracker.begin), and a lookup passes
// only entries still valid by a check the caller gives (changeTracker.valid:
// no change at the name, above it or below it notified since), for the
// query name and for every name a CNAME chain in the answer led to (a
// CNAME's target, a DNAME-synthesized one's too): the answer is negative
// about the chain's last name, and each step depends on its own name. Every member
// notifies the router of a write before acknowledging it (lease.go), so no
// entry outlives a write that was acknowledged; the router uses the cache
// only while it holds a lease on every member.
type negCache struct {
	c   *cache.Cache[*negEntry] // nil: off
	now func() time.Time
}

type negKey struct {
	name  string // canonical
	qtype uint16
	edns  bool // the answer carries an OPT record
	do    bool
}

// hash is the key's cache index; the entry keeps its key, so that two keys
// with one hash never answer for each other.
func (k negKey) hash() uint64 {
	b := make([]byte, 0, len(k.name)+4)
	b = append(b, k.name...)
	b = append(b, byte(k.qtype>>8), byte(k.qtype))
	if k.edns {
		b = append(b, 1)
	}
	if k.do {
		b = append(b, 2)
	}
	return cache.Hash(b)
}

type negEntry struct {
	key     negKey
	chain   []string // canonical CNAME targets in msg's answer
	msg     *dns.Msg
	origin  string // zone: the SOA's owner
	start   uint64 // changeTracker.begin when its resolution began
	expires time.Time
}

func newNegCache(max int) *negCache {
	nc := &negCache{now: time.Now}
	if max > 0 {
		nc.c = cache.New[*negEntry](max)
	}
	return nc
}

// get returns a copy of the cached answer for name/qtype, or nil. Its TTLs
// are those the shards gave: an entry is void once a change touched it, so
// it is the zone's current answer, and one server answers it with the
// zone's TTLs (RFC 2308 section 3), not with a cache's countdown; a cache
// in front (the cache plugin) counts down itself. An entry for which valid (given
// the canonical name and the entry's start) is false is dropped.
func (nc *negCache) get(name string, qtype uint16, edns, do bool, valid func(name string, start uint64) bool) *dns.Msg {
	if e := nc.lookup(name, qtype, edns, do, valid); e != nil {
		return e.msg.Copy()
	}
	return nil
}

// has reports whether get would return an answer, without copying it.
func (nc *negCache) has(name string, qtype uint16, edns, do bool, valid func(name string, start uint64) bool) bool {
	return nc.lookup(name, qtype, edns, do, valid) != nil
}

// lookup returns get's entry, nil when there is none.
func (nc *negCache) lookup(name string, qtype uint16, edns, do bool, valid func(name string, start uint64) bool) *negEntry {
	if nc.c == nil {
		return nil
	}
	k := negKey{dnsname.Lower(name), qtype, edns, do}
	h := k.hash()
	e, ok := nc.c.Get(h)
	if !ok || e.key != k {
		return nil
	}
	now := nc.now()
	if !now.Before(e.expires) || !valid(k.name, e.start) {
		nc.c.Remove(h)
		return nil
	}
	for _, n := range e.chain {
		if !valid(n, e.start) {
			nc.c.Remove(h)
			return nil
		}
	}
	return e
}

// put caches negative answer m, whose resolution began at start, for the
// TTL of its SOA.
func (nc *negCache) put(name string, qtype uint16, edns, do bool, m *dns.Msg, start uint64) {
	if nc.c == nil {
		return
	}
	var soa *dns.SOA
	for _, rr := range m.Ns {
		if s, ok := rr.(*dns.SOA); ok {
			soa = s
		}
	}
	if soa == nil || soa.Hdr.Ttl == 0 {
		return
	}
	var chain []string
	for _, rr := range m.Answer {
		if cn, ok := rr.(*dns.CNAME); ok {
			chain = append(chain, dnsname.Lower(cn.Target))
		}
	}
	now := nc.now()
	k := negKey{dnsname.Lower(name), qtype, edns, do}
	nc.c.Add(k.hash(), &negEntry{key: k, chain: chain, msg: m.Copy(), origin: dnsname.Lower(soa.Hdr.Name), start: start,
		expires: now.Add(time.Duration(soa.Hdr.Ttl) * time.Second)})
}

// purge drops the entries of zone: a deleted zone's, which every later
// lookup would find void (changeTracker), are not kept until they expire.
func (nc *negCache) purge(origin string) {
	if nc.c == nil {
		return
	}
	origin = dnsname.Lower(dns.Fqdn(origin))
	nc.c.Walk(func(items map[uint64]*negEntry, k uint64) bool {
		if e, ok := items[k]; ok && e.origin == origin {
			delete(items, k)
		}
		return true
	})
}

// len returns the number of entries.
func (nc *negCache) len() int {
	if nc.c == nil {
		return 0
	}
	return nc.c.Len()
}
