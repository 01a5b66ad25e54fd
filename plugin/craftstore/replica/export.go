package replica

import (
	"slices"

	"github.com/craftdns/craftdns/internal/dnsname"
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

// ExportPartitions streams, from one consistent read of every zone, in
// canonical order zone by zone, the records that move when partitions
// change owner in key mode "name": with shared clear, those of the names
// keep takes (their partitions) except the records every shard holds;
// with shared set, only the records every shard holds (the apex RRsets,
// every RRset at or below a zone cut, every DNAME RRset: the layout of
// craftroute's split.go), keep unused. fn gets each record with its
// zone's origin.
func (r *Replica) ExportPartitions(keep func(name string) bool, shared bool, fn func(origin string, rr dns.RR) error) error {
	return r.db.View(func(tx *bolt.Tx) error {
		zones := fsm.Generation(tx).Bucket(fsm.BucketZones)
		return zones.ForEach(func(k, v []byte) error {
			b := zones.Bucket(k)
			if v != nil || b == nil {
				return nil
			}
			origin := string(k)
			cut := "" // the last zone cut seen: names below it follow it in canonical order
			return b.ForEach(func(_, v []byte) error {
				if v == nil {
					return nil
				}
				rrs, err := fsm.DecodeRRs(v)
				if err != nil || len(rrs) == 0 {
					return err
				}
				name := dnsname.Lower(rrs[0].Header().Name)
				everyShard := name == origin
				if !everyShard && cut != "" && dns.IsSubDomain(cut, name) {
					everyShard = true
				} else if !everyShard && slices.ContainsFunc(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeNS }) {
					cut, everyShard = name, true
				}
				if !shared && !everyShard && keep != nil && !keep(name) {
					return nil
				}
				for _, rr := range rrs {
					if (everyShard || rr.Header().Rrtype == dns.TypeDNAME) != shared {
						continue
					}
					if err := fn(origin, rr); err != nil {
						return err
					}
				}
				return nil
			})
		})
	})
}
