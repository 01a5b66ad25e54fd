package craftstore

import (
	"errors"
	"strings"
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
// signed now as it streams out of one read of the member's state
// (dnssec.ZoneStream: RRSIGs, the keys, an NSEC chain; the zone comes in
// canonical order, one name at a time, so it is not held whole), as a
// secondary serves it with its own answers; an IXFR gets the whole zone
// too (RFC 1995 section 4 allows it: the chain's changes are not
// journaled), an IXFR at the current serial the SOA alone.
func (c *Craftstore) signedTransfer(rep *replica.Replica, sec *signing, keys *dnssec.Keys, origin string, serial uint32) <-chan []dns.RR {
	ch := make(chan []dns.RR)
	go func() {
		defer close(ch)
		if serial != 0 {
			// Current (or newer): the SOA alone, as unsigned.
			var first []dns.RR
			err := rep.Transfer(origin, serial, func(b []dns.RR) error {
				first = append(first, b...)
				if len(first) > 1 {
					return errNotCurrent
				}
				return nil
			})
			if err == nil && len(first) == 1 {
				ch <- first
				return
			}
			if err != nil && !errors.Is(err, errNotCurrent) {
				log.Errorf("signed transfer of %s (serial %d): %v", origin, serial, err)
				return
			}
		}
		out := make([]dns.RR, 0, xfrOut)
		emit := func(rrs ...dns.RR) error {
			out = append(out, rrs...)
			if len(out) >= xfrOut {
				ch <- out
				out = make([]dns.RR, 0, xfrOut)
			}
			return nil
		}
		var (
			zs      *dnssec.ZoneStream
			name    []dns.RR // the records of the name being read
			closing *dns.SOA
		)
		err := rep.Transfer(origin, 0, func(b []dns.RR) error {
			for _, rr := range policy.Without(b) {
				if soa, ok := rr.(*dns.SOA); ok && dnsname.Lower(soa.Hdr.Name) == origin {
					if zs == nil { // the opening SOA: the zone's
						var err error
						zs, err = sec.signer.NewZoneStream(keys, soa, time.Now(), emit)
						if err != nil {
							return err
						}
					} else {
						closing = soa
					}
					continue
				}
				if zs == nil {
					return errNoOpeningSOA
				}
				if len(name) > 0 && !strings.EqualFold(name[0].Header().Name, rr.Header().Name) {
					if err := zs.Add(name); err != nil {
						return err
					}
					name = nil
				}
				name = append(name, rr)
			}
			return nil
		})
		if err == nil && (zs == nil || closing == nil) {
			err = errNoOpeningSOA
		}
		if err == nil && len(name) > 0 {
			err = zs.Add(name)
		}
		if err == nil {
			err = zs.Close()
		}
		if err != nil {
			log.Errorf("signed transfer of %s (serial %d): %v", origin, serial, err)
			return // the closing SOA is missing: the secondary discards it
		}
		ch <- append(out, closing)
	}()
	return ch
}

// xfrOut is how many records a signed transfer hands the transfer plugin
// at a time.
const xfrOut = 500

var (
	errNotCurrent   = errors.New("the secondary's serial is not current")
	errNoOpeningSOA = errors.New("the zone's transfer is not framed by its SOA")
)
