package dnssec

import (
	"fmt"
	"slices"

	"github.com/miekg/dns"
)

// CompactNSEC returns the NSEC record of RFC 9824's compact denial of
// existence at qname, whose next owner name is qname's immediate successor
// (\000.qname), so that it covers nothing but qname itself: one record,
// made for the query, that needs no chain of the zone's names and so works
// when the zone's names are spread over shards.
//
// exists false: qname does not exist (the answer to a query for it is
// NOERROR with this NSEC, whose bitmap is NSEC, RRSIG and NXNAME, instead
// of NXDOMAIN). exists true: a NODATA answer, whose bitmap is types (the
// types at qname; none at an empty non-terminal), NSEC and RRSIG. ttl is
// the negative TTL, min(SOA TTL, SOA minimum) (RFC 9077).
func CompactNSEC(qname string, types []uint16, exists bool, ttl uint32) (*dns.NSEC, error) {
	next := "\\000." + dns.CanonicalName(qname)
	var buf [512]byte
	if n, err := dns.PackDomainName(next, buf[:], 0, nil, false); err != nil || n > 255 {
		return nil, fmt.Errorf("%s: no immediate successor within 255 octets", qname)
	}
	bitmap := []uint16{dns.TypeNSEC, dns.TypeRRSIG}
	if !exists {
		bitmap = append(bitmap, dns.TypeNXNAME)
	} else {
		for _, t := range types {
			if t != dns.TypeNSEC && t != dns.TypeRRSIG && t != dns.TypeNXNAME {
				bitmap = append(bitmap, t)
			}
		}
	}
	slices.Sort(bitmap)
	bitmap = slices.Compact(bitmap)
	return &dns.NSEC{
		Hdr:        dns.RR_Header{Name: dns.CanonicalName(qname), Rrtype: dns.TypeNSEC, Class: dns.ClassINET, Ttl: ttl},
		NextDomain: next,
		TypeBitMap: bitmap,
	}, nil
}
