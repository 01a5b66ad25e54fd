package replica

import (
	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// Export calls fn for every record of zone from one consistent read of this
// member's state, in DNS canonical order of names with the SOA first, as a
// zone file or AXFR wants them. Nothing is held in memory beyond one name.
func (r *Replica) Export(origin string, fn func(dns.RR) error) error {
	return r.ExportWhere(origin, nil, fn)
}

// ExportWhere is Export of the SOA and the names keep takes (canonical
// lower-case owner names; nil takes every name): the part of a zone that
// moves to another shard (internal/shardmap's partitions).
func (r *Replica) ExportWhere(origin string, keep func(name string) bool, fn func(dns.RR) error) error {
	return r.db.View(func(tx *bolt.Tx) error {
		b := fsm.Generation(tx).Bucket(fsm.BucketZones).Bucket([]byte(origin))
		if b == nil {
			return Errorf(ErrNotFound, "zone %q not found", origin)
		}
		apex, err := fsm.RRsAt(b, origin)
		if err != nil {
			return err
		}
		for _, rr := range apex {
			if rr.Header().Rrtype == dns.TypeSOA {
				if err := fn(rr); err != nil {
					return err
				}
			}
		}
		return fsm.EachName(b, func(rrs []dns.RR) error {
			if keep != nil && !keep(dnsname.Lower(rrs[0].Header().Name)) {
				return nil
			}
			for _, rr := range rrs {
				if err := fn(rr); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// ExportPartitions streams, from one consistent read of every zone, the
// records that move when partitions change owner in key mode "name": those
// of the names of partitions (of a map of of partitions) that only their
// owner holds (not the records every shard holds: fsm.SharedRRs), with
// their zones' origins. It reads the partition index when it is for of
// partitions, else every zone.
func (r *Replica) ExportPartitions(partitions []uint32, of int, fn func(origin string, rr dns.RR) error) error {
	return r.db.View(func(tx *bolt.Tx) error {
		g := fsm.Generation(tx)
		zones := g.Bucket(fsm.BucketZones)
		emit := func(zb *bolt.Bucket, origin, name string, rrs []dns.RR) error {
			_, owned, err := fsm.SharedRRs(zb, origin, name, rrs)
			if err != nil {
				return err
			}
			for _, rr := range owned {
				if err := fn(origin, rr); err != nil {
					return err
				}
			}
			return nil
		}
		if fsm.IndexedParts(g) == of {
			_, err := fsm.EachInPartitions(g, partitions, func(origin, name string) error {
				zb := zones.Bucket([]byte(origin))
				if zb == nil {
					return nil
				}
				rrs, err := fsm.RRsAt(zb, name)
				if err != nil {
					return err
				}
				return emit(zb, origin, name, rrs)
			})
			return err
		}
		set := map[int]bool{}
		for _, p := range partitions {
			set[int(p)] = true
		}
		return eachZone(zones, func(origin string, zb *bolt.Bucket) error {
			return fsm.EachName(zb, func(rrs []dns.RR) error {
				name := dnsname.Lower(rrs[0].Header().Name)
				if !set[shardmap.PartitionOf(name, of)] {
					return nil
				}
				return emit(zb, origin, name, rrs)
			})
		})
	})
}

// ExportShared streams, from one consistent read of every zone, in
// canonical order zone by zone, the records every shard holds in key mode
// "name": the apex RRsets, every RRset at or below a zone cut, every
// DNAME RRset (fsm.SharedRRs), with their zones' origins.
func (r *Replica) ExportShared(fn func(origin string, rr dns.RR) error) error {
	return r.db.View(func(tx *bolt.Tx) error {
		return eachZone(fsm.Generation(tx).Bucket(fsm.BucketZones), func(origin string, zb *bolt.Bucket) error {
			return zb.ForEach(func(_, v []byte) error {
				if v == nil {
					return nil
				}
				rrs, err := fsm.DecodeRRs(v)
				if err != nil || len(rrs) == 0 {
					return err
				}
				shared, _, err := fsm.SharedRRs(zb, origin, dnsname.Lower(rrs[0].Header().Name), rrs)
				for _, rr := range shared {
					if err == nil {
						err = fn(origin, rr)
					}
				}
				return err
			})
		})
	})
}

// eachZone calls fn with every zone of bucket zones.
func eachZone(zones *bolt.Bucket, fn func(origin string, zb *bolt.Bucket) error) error {
	return zones.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		if zb := zones.Bucket(k); zb != nil {
			return fn(string(k), zb)
		}
		return nil
	})
}
