package replica

import (
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
