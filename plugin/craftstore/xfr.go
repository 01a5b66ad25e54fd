package craftstore

import (
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/transfer"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/policy"

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
// policies and region tables are left out.
func (c *Craftstore) Transfer(name string, serial uint32) (<-chan []dns.RR, error) {
	origin := dnsname.Lower(name)
	if plugin.Zones(c.Zones).Matches(origin) == "" {
		return nil, transfer.ErrNotAuthoritative
	}
	rep := c.rep.Load()
	if rep == nil || rep.Zone(origin) == nil {
		return nil, transfer.ErrNotAuthoritative
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
