package replica

import (
	"fmt"
	"maps"
	"slices"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// zoneSet is an immutable map of canonical origin to the zone's read view;
// adding or removing a zone swaps in a new set, so lookups take no lock.
type zoneSet map[string]*zone.Zone

// Match returns the view of the most specific zone containing qname, which
// must be a lower-case FQDN, or nil. It does not allocate.
func (r *Replica) Match(qname string) *zone.Zone {
	zs := *r.zones.Load()
	if len(zs) == 0 {
		return nil
	}
	for off, end := 0, false; !end; off, end = dns.NextLabel(qname, off) {
		if z, ok := zs[qname[off:]]; ok {
			return z
		}
	}
	if z, ok := zs["."]; ok {
		return z
	}
	return nil
}

// Zone returns the view of the zone with the given canonical origin, or nil.
func (r *Replica) Zone(origin string) *zone.Zone { return (*r.zones.Load())[origin] }

// Zones returns the canonical origins of all zones, sorted.
func (r *Replica) Zones() []string {
	return slices.Sorted(maps.Keys(*r.zones.Load()))
}

// swapZone installs (or with z nil removes) the view of one zone. Only the
// Ready loop and Open call it.
func (r *Replica) swapZone(origin string, z *zone.Zone) {
	old := *r.zones.Load()
	next := make(zoneSet, len(old)+1)
	for o, v := range old {
		next[o] = v
	}
	if z == nil {
		delete(next, origin)
	} else {
		next[origin] = z
	}
	r.zones.Store(&next)
}

// loadZone builds a fresh view of zone origin from generation g: in
// paged mode one that reads the file (loadPaged), else one holding every
// record.
func (r *Replica) loadZone(g *bolt.Bucket, origin string) (*zone.Zone, error) {
	if r.cfg.PagedCache > 0 {
		return r.loadPaged(g, origin)
	}
	return loadMemory(g, origin)
}

// loadMemory builds a view of zone origin holding every record of it in
// generation g.
func loadMemory(g *bolt.Bucket, origin string) (*zone.Zone, error) {
	b := g.Bucket(fsm.BucketZones).Bucket([]byte(origin))
	z := zone.New(origin)
	if base, ok := fsm.SerialBase(g, origin); ok {
		z.SetSerialBase(base)
	}
	batch := make([]zone.NameRecords, 0, 1024)
	err := b.ForEach(func(k, v []byte) error {
		rrs, err := fsm.DecodeRRs(v)
		if err != nil {
			return fmt.Errorf("zone %s: %w", origin, err)
		}
		if len(rrs) == 0 {
			return nil
		}
		batch = append(batch, zone.NameRecords{Name: rrs[0].Header().Name, RRs: rrs})
		if len(batch) == cap(batch) {
			z.Set(batch)
			batch = batch[:0]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	z.Set(batch)
	return z, nil
}

// loadAllZones replaces every view with one read from the current generation.
func (r *Replica) loadAllZones() error {
	next := zoneSet{}
	var seeded map[string]bool
	err := r.db.View(func(tx *bolt.Tx) error {
		var err error
		if seeded, err = fsm.SeededZones(fsm.Generation(tx)); err != nil {
			return err
		}
		return fsm.Generation(tx).Bucket(fsm.BucketZones).ForEach(func(k, _ []byte) error {
			z, err := r.loadZone(fsm.Generation(tx), string(k))
			if err != nil {
				return err
			}
			next[string(k)] = z
			return nil
		})
	})
	if err != nil {
		return err
	}
	r.zones.Store(&next)
	r.seeded.Store(&seeded)
	return r.loadLocks()
}

// reloadZone rebuilds the view of one zone after an import committed.
func (r *Replica) reloadZone(origin string) error {
	var z *zone.Zone
	err := r.db.View(func(tx *bolt.Tx) error {
		if fsm.Generation(tx).Bucket(fsm.BucketZones).Bucket([]byte(origin)) == nil {
			return nil
		}
		var err error
		z, err = r.loadZone(fsm.Generation(tx), origin)
		return err
	})
	if err != nil {
		return err
	}
	r.swapZone(origin, z)
	return nil
}
