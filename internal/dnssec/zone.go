package dnssec

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// SignZone returns the signed form of zone k.Zone's records rrs (its whole
// content, the SOA once), for a secondary that serves it as it is (a zone
// transfer): ZoneStream's records (the apex's DNSKEY RRset, and CDS and
// CDNSKEY, added; an NSEC chain over the zone's names in canonical order,
// RFC 4034 section 4, RFC 4035 section 2.3: every name with authoritative
// data or a delegation, the last pointing back to the apex, none at glue
// below a cut, with the negative TTL; an RRSIG over every RRset but a
// delegation's NS and glue), for records that are not in canonical order.
// The SOA comes first. A secondary needs the chain to deny names itself:
// it holds no key for compact denial.
func (s *Signer) SignZone(rrs []dns.RR, k *Keys, now time.Time) ([]dns.RR, error) {
	var soa *dns.SOA
	names := map[string][]dns.RR{}
	for _, rr := range rrs {
		if x, ok := rr.(*dns.SOA); ok && soa == nil {
			soa = x
			continue
		}
		key := string(dnsname.CanonicalKey(dnsname.Lower(rr.Header().Name)))
		names[key] = append(names[key], rr)
	}
	if soa == nil {
		return nil, errNoSOA
	}
	out := make([]dns.RR, 0, 3*len(rrs))
	z, err := s.NewZoneStream(k, soa, now, func(rrs ...dns.RR) error {
		out = append(out, rrs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, key := range slices.Sorted(maps.Keys(names)) {
		if err := z.Add(names[key]); err != nil {
			return nil, err
		}
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

var errNoSOA = errors.New("the zone has no SOA")
