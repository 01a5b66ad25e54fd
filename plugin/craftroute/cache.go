package craftroute

import (
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// negCache holds merged negative answers (NXDOMAIN and NODATA that took a
// broadcast) for the TTL of the SOA they carry, which craftstore caps at the
// SOA MINIMUM (RFC 2308 §3, §5). It is bounded: when full, an arbitrary
// entry makes room. Writes through this router purge the zone's entries;
// writes elsewhere show after at most the negative TTL, as with any cache.
type negCache struct {
	max int
	mu  sync.RWMutex // read-locked by lookups, which every query of key mode name makes
	m   map[negKey]*negEntry
	now func() time.Time
}

type negKey struct {
	name  string // canonical
	qtype uint16
	edns  bool // the answer carries an OPT record
	do    bool
}

type negEntry struct {
	msg     *dns.Msg
	origin  string // zone: the SOA's owner
	stored  time.Time
	expires time.Time
}

func newNegCache(max int) *negCache {
	return &negCache{max: max, m: map[negKey]*negEntry{}, now: time.Now}
}

// get returns a copy of the cached answer for name/qtype, its TTLs lowered
// by the time spent in the cache, or nil.
func (nc *negCache) get(name string, qtype uint16, edns, do bool) *dns.Msg {
	if nc.max == 0 {
		return nil
	}
	k := negKey{dnsname.Lower(name), qtype, edns, do}
	now := nc.now()
	nc.mu.RLock()
	e := nc.m[k]
	nc.mu.RUnlock()
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		nc.mu.Lock()
		if nc.m[k] == e {
			delete(nc.m, k)
		}
		nc.mu.Unlock()
		return nil
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, s := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range s {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl -= min(h.Ttl, age)
			}
		}
	}
	return m
}

// put caches negative answer m for the TTL of its SOA.
func (nc *negCache) put(name string, qtype uint16, edns, do bool, m *dns.Msg) {
	if nc.max == 0 {
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
	now := nc.now()
	e := &negEntry{msg: m.Copy(), origin: dnsname.Lower(soa.Hdr.Name), stored: now,
		expires: now.Add(time.Duration(soa.Hdr.Ttl) * time.Second)}
	k := negKey{dnsname.Lower(name), qtype, edns, do}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if _, ok := nc.m[k]; !ok && len(nc.m) >= nc.max {
		for old := range nc.m { // evict one: random enough, O(1)
			delete(nc.m, old)
			break
		}
	}
	nc.m[k] = e
}

// purge drops the entries of zone.
func (nc *negCache) purge(origin string) {
	origin = dnsname.Lower(dns.Fqdn(origin))
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for k, e := range nc.m {
		if e.origin == origin {
			delete(nc.m, k)
		}
	}
}

// len returns the number of entries.
func (nc *negCache) len() int {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return len(nc.m)
}

// purgeNegative drops the cached negative answers of zone (after a write).
func (c *Craftroute) purgeNegative(zone string) { c.neg.purge(zone) }
