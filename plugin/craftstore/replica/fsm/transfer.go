package fsm

import (
	"slices"

	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// XfrBatch is how many records a zone transfer hands over at a time.
const XfrBatch = 512

// Transfer is Transfer within one read of generation g; start, when not
// nil, learns the serial and base of the state before the first records.
// With net, an incremental Transfer is one difference, the journal's
// changes folded (netChanges).
func Transfer(g *bolt.Bucket, origin string, serial uint32, net bool, start func(XfrStart) error, fn func([]dns.RR) error) error {
	zb := g.Bucket(BucketZones).Bucket([]byte(origin))
	if zb == nil {
		return Errorf(ErrNotFound, "zone %q not found", origin)
	}
	apex, err := RRsAt(zb, origin)
	if err != nil {
		return err
	}
	var soa *dns.SOA
	for _, rr := range apex {
		if s, ok := rr.(*dns.SOA); ok {
			soa = s
		}
	}
	if soa == nil {
		return Errorf(ErrInternal, "zone %q has no SOA", origin)
	}
	if start != nil {
		st := XfrStart{Serial: soa.Serial, Base: soa.Serial}
		if base, ok := SerialBase(g, origin); ok {
			st.Base = base
		}
		if err := start(st); err != nil {
			return err
		}
	}
	if serial != 0 {
		if serial == soa.Serial || zonerules.SerialAfter(serial, soa.Serial) {
			return fn([]dns.RR{soa})
		}
		inc := incremental
		if net {
			inc = netIncremental
		}
		ok, err := inc(g, origin, serial, soa, fn)
		if ok || err != nil {
			return err
		}
	}
	return full(zb, soa, fn)
}

// incremental sends the changes from serial to soa's serial, if the
// journal has them all.
func incremental(g *bolt.Bucket, origin string, serial uint32, soa *dns.SOA, fn func([]dns.RR) error) (bool, error) {
	first := true
	ok, err := journalChanges(g, origin, serial, soa.Serial, func(removed, added []dns.RR) error {
		batch := make([]dns.RR, 0, len(removed)+len(added)+1)
		if first {
			batch = append(batch, soa)
			first = false
		}
		return fn(append(append(batch, removed...), added...))
	})
	if !ok || err != nil {
		return ok, err
	}
	return true, fn([]dns.RR{soa})
}

// netIncremental sends the changes from serial to soa's serial as one
// difference (RFC 1995 section 4: the SOA, the old SOA, the records
// removed, the SOA, the records added, the SOA), if the journal has them
// all.
func netIncremental(g *bolt.Bucket, origin string, serial uint32, soa *dns.SOA, fn func([]dns.RR) error) (bool, error) {
	old, removed, added, ok, err := netChanges(g, origin, serial, soa)
	if !ok || err != nil {
		return ok, err
	}
	all := make([]dns.RR, 0, len(removed)+len(added)+4)
	all = append(append(append(all, soa, old), removed...), soa)
	all = append(append(all, added...), soa)
	for len(all) > 0 {
		n := min(len(all), XfrBatch)
		if err := fn(all[:n:n]); err != nil {
			return true, err
		}
		all = all[n:]
	}
	return true, nil
}

// full sends the SOA, every other record of the zone in DNS canonical order
// of names, and the SOA again.
func full(zb *bolt.Bucket, soa *dns.SOA, fn func([]dns.RR) error) error {
	batch := make([]dns.RR, 0, XfrBatch)
	batch = append(batch, soa)
	err := EachName(zb, func(rrs []dns.RR) error {
		batch = append(batch, rrs...)
		if len(batch) >= XfrBatch {
			if err := fn(batch); err != nil {
				return err
			}
			batch = make([]dns.RR, 0, XfrBatch)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return fn(append(batch, soa))
}

// EachName calls fn with the records of each name of zone bucket zb, the
// SOA left out, in DNS canonical order of names, reading one name at a
// time: a zone file or a transfer puts the SOA around them.
func EachName(zb *bolt.Bucket, fn func(rrs []dns.RR) error) error {
	return zb.ForEach(func(_, v []byte) error {
		rrs, err := DecodeRRs(v)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeSOA }) {
			rrs = slices.DeleteFunc(slices.Clone(rrs), func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeSOA })
		}
		if len(rrs) == 0 {
			return nil
		}
		return fn(rrs)
	})
}
