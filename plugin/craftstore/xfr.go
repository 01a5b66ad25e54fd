package craftstore

import (
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/transfer"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

var _ transfer.Transferer = (*Craftstore)(nil)

// Transfer implements transfer.Transferer: with the transfer plugin in the
// same server block, it serves AXFR (RFC 5936) and IXFR (RFC 1995) of the
// zones this member holds. The records stream from one consistent read of
// the member's bbolt file, in batches (replica.Replica.Transfer):
// serial 0 or one older than the journal reaches back to gets the whole
// zone framed by its SOA, a current (or newer) serial the SOA alone, any
// other serial the changes since, from the journal. Request-routing
// policies and region tables are left out. A signed zone goes signed
// (signedTransfer).
func (c *Craftstore) Transfer(name string, serial uint32) (<-chan []dns.RR, error) {
	origin := dnsname.Lower(name)
	if plugin.Zones(c.Zones).Matches(origin) == "" {
		return nil, transfer.ErrNotAuthoritative
	}
	rep := c.rep.Load()
	if rep == nil || rep.Zone(origin) == nil {
		return nil, transfer.ErrNotAuthoritative
	}
	if sec := c.sec.Load(); sec != nil && sec.cfg.Signs(origin) {
		if keys := sec.keysFor(rep, origin); keys != nil {
			return c.signedTransfer(rep, sec, keys, origin, serial), nil
		}
	}
	ch := make(chan []dns.RR)
	go func() {
		defer close(ch)
		// The transfer plugin reads the channel to its end, even when the
		// client went away, so this never blocks for good.
		err := rep.Transfer(origin, serial, func(rrs []dns.RR) error {
			// Policies stay home: a secondary serves the owners'
			// records, the default pools' values (internal/policy).
			if rrs = policy.Without(rrs); len(rrs) > 0 {
				ch <- rrs
			}
			return nil
		})
		if err != nil {
			// The closing SOA is missing: the secondary discards the transfer.
			log.Errorf("transfer of %s (serial %d): %v", origin, serial, err)
		}
	}()
	return ch, nil
}

// signedTransfer serves a transfer of signed zone origin: the whole zone,
// signed now (dnssec.SignZone: RRSIGs, the keys, an NSEC chain), as a
// secondary serves it with its own answers; an IXFR gets the whole zone
// too (RFC 1995 section 4 allows it: the chain's changes are not
// journaled), an IXFR at the current serial the SOA alone.
func (c *Craftstore) signedTransfer(rep *replica.Replica, sec *signing, keys *dnssec.Keys, origin string, serial uint32) <-chan []dns.RR {
	ch := make(chan []dns.RR)
	go func() {
		defer close(ch)
		var rrs []dns.RR
		read := func(from uint32) error {
			rrs = rrs[:0]
			return rep.Transfer(origin, from, func(b []dns.RR) error {
				rrs = append(rrs, policy.Without(b)...)
				return nil
			})
		}
		err := read(serial)
		if err == nil && serial != 0 && len(rrs) > 1 {
			err = read(0) // not current: the whole zone
		}
		if err == nil && len(rrs) > 1 {
			// The zone framed by its SOA: the frame's SOA is the zone's.
			var signed []dns.RR
			if signed, err = sec.signer.SignZone(rrs[:len(rrs)-1], keys, time.Now()); err == nil {
				rrs = append(signed, rrs[len(rrs)-1])
			}
		}
		if err != nil {
			log.Errorf("signed transfer of %s (serial %d): %v", origin, serial, err)
			return // the closing SOA is missing: the secondary discards it
		}
		for len(rrs) > 0 {
			n := min(len(rrs), 500)
			ch <- rrs[:n]
			rrs = rrs[n:]
		}
	}()
	return ch
}
