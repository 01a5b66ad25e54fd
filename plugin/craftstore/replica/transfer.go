package replica

import (
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// Transfer hands fn the records of a zone transfer of origin to a secondary
// whose copy has the given serial (0: it has none), in batches, from one
// consistent read of this member's state. Nothing beyond a batch is held in
// memory, so a zone of any size streams. What fn receives, in order:
//
//   - serial 0, or a serial the journal does not reach back to: a full
//     transfer (RFC 5936 section 2.2), the SOA, every other record, the
//     SOA again;
//   - a serial equal to or newer than the zone's (RFC 1982): the SOA alone
//     (RFC 1995 section 2);
//   - otherwise an incremental transfer (RFC 1995 section 4): the SOA, per
//     change the old SOA, the records removed, the new SOA, the records
//     added, and the SOA again.
//
// fn may keep the slices it gets. An unknown zone is a 404 *Error.
func (r *Replica) Transfer(origin string, serial uint32, fn func([]dns.RR) error) error {
	return r.db.View(func(tx *bolt.Tx) error {
		return fsm.Transfer(fsm.Generation(tx), origin, serial, false, nil, fn)
	})
}

// announce tells Config.OnChange about the zones whose data a Ready
// changed, once each, after the views show the change. After a snapshot
// every zone may have changed.
func (r *Replica) announce(p *pending) {
	f := r.cfg.OnChange
	if f == nil {
		return
	}
	if p.snapshot {
		for _, z := range r.Zones() {
			f(z)
		}
		return
	}
	var seen map[string]bool
	for _, e := range p.effects {
		if e.Zone == "" || e.Deleted || seen[e.Zone] {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[e.Zone] = true
		f(e.Zone)
	}
}
