package replica

import (
	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// Export calls fn for every record of zone from one consistent read of this
// member's state, in DNS canonical order of names with the SOA first, as a
// zone file or AXFR wants them. Nothing is held in memory beyond one name.
func (r *Replica) Export(origin string, fn func(dns.RR) error) error {
	return r.db.View(func(tx *bolt.Tx) error {
		b := generation(tx).Bucket(bucketZones).Bucket([]byte(origin))
		if b == nil {
			return Errorf(ErrNotFound, "zone %q not found", origin)
		}
		apex, err := rrsAt(b, origin)
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
		return b.ForEach(func(_, v []byte) error {
			rrs, err := decodeRRs(v)
			if err != nil {
				return err
			}
			for _, rr := range rrs {
				if rr.Header().Rrtype == dns.TypeSOA {
					continue
				}
				if err := fn(rr); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
