package craftroute

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/coredns/coredns/plugin"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// Placement: which shard owns a name.

// shardFor returns the shard owning name (any case) under the key mode: in
// key mode "name" the shard of the canonical name itself, in key mode
// "zone" the shard of the longest known zone containing name.
func (c *Craftroute) shardFor(name string) *Shard { return c.ownerIn(c.routes(), name) }

// keyOf returns the ring key of canonical name in key mode key.
func (c *Craftroute) keyOf(key, name string) string {
	if key == keyZone {
		if z := c.zones.longest(name); z != "" {
			return z
		}
	}
	return name
}

// shard returns the shard called name.
func (c *Craftroute) shard(name string) *Shard { return c.routes().shard(name) }

// zoneSet is the set of zones the router knows: the server block's, the
// seeded ones, those created through its API and those the shards list. Key
// mode "zone" keys a name by the longest of them that contains it.
type zoneSet struct {
	mu    sync.Mutex
	fixed []string                        // server block zones and seeds, never removed
	cur   atomic.Pointer[map[string]bool] // canonical zone → true; copy on write
	// noticed counts the changes members notified (lease.go): a zone list
	// read while one arrived may predate it and must not replace the set.
	noticed atomic.Uint64
}

func newZoneSet(fixed []string) *zoneSet {
	zs := &zoneSet{}
	m := map[string]bool{}
	for _, z := range fixed {
		z = dnsname.Lower(dns.Fqdn(z))
		zs.fixed = append(zs.fixed, z)
		m[z] = true
	}
	zs.cur.Store(&m)
	return zs
}

// longest returns the longest known zone that contains canonical name, ""
// if none does. The root zone counts only when listed.
func (zs *zoneSet) longest(name string) string {
	m := *zs.cur.Load()
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		if m[name[off:]] {
			return name[off:]
		}
	}
	if m["."] {
		return "."
	}
	return ""
}

// add makes zone known.
func (zs *zoneSet) add(z string) {
	zs.update(func(m map[string]bool) { m[dnsname.Lower(dns.Fqdn(z))] = true })
}

// remove forgets zone unless it is fixed.
func (zs *zoneSet) remove(z string) {
	z = dnsname.Lower(dns.Fqdn(z))
	zs.update(func(m map[string]bool) {
		for _, f := range zs.fixed {
			if f == z {
				return
			}
		}
		delete(m, z)
	})
}

// replace sets the known zones to the fixed ones plus list.
func (zs *zoneSet) replace(list []string) {
	zs.update(func(m map[string]bool) {
		clear(m)
		for _, z := range zs.fixed {
			m[z] = true
		}
		for _, z := range list {
			m[dnsname.Lower(dns.Fqdn(z))] = true
		}
	})
}

func (zs *zoneSet) update(f func(map[string]bool)) {
	zs.mu.Lock()
	defer zs.mu.Unlock()
	old := *zs.cur.Load()
	m := make(map[string]bool, len(old)+1)
	for k := range old {
		m[k] = true
	}
	f(m)
	zs.cur.Store(&m)
}

// list returns the known zones, sorted.
func (zs *zoneSet) list() []string {
	return slices.Sorted(maps.Keys(*zs.cur.Load()))
}

// zoneOf returns the longest server block zone or known zone containing
// canonical name, "" if none: the zone the name is looked up in.
func (c *Craftroute) zoneOf(name string) string {
	if z := c.zones.longest(name); z != "" {
		return z
	}
	return plugin.Zones(c.Zones).Matches(name)
}
