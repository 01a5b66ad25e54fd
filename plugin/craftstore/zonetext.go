package craftstore

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/miekg/dns"
)

// defaultTTL is the TTL of records written without one (RFC 1035 master
// files take it from $TTL; the API's record texts may omit it).
const defaultTTL = 3600

// parseZone parses zone file text for origin and checks it with checkZone.
func parseZone(origin, text string) ([]dns.RR, error) {
	zp := dns.NewZoneParser(strings.NewReader(text), origin, "")
	zp.SetIncludeAllowed(false)
	zp.SetDefaultTTL(defaultTTL)
	var rrs []dns.RR
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		rrs = append(rrs, rr)
	}
	if err := zp.Err(); err != nil {
		return nil, err
	}
	if err := checkZone(origin, rrs); err != nil {
		return nil, err
	}
	return rrs, nil
}

// checkZone checks what a zone needs: every record inside the zone and of
// class IN, exactly one SOA at the apex, NS records at the apex, no CNAME
// beside other data.
func checkZone(origin string, rrs []dns.RR) error {
	soa, ns := 0, 0
	kinds := map[string]uint8{} // name -> 1 CNAME, 2 other data, 3 both
	for _, rr := range rrs {
		if err := inZone(origin, rr); err != nil {
			return err
		}
		name := strings.ToLower(rr.Header().Name)
		switch rr.Header().Rrtype {
		case dns.TypeSOA:
			if name != origin {
				return fmt.Errorf("SOA record at %q is not at the zone apex %q", rr.Header().Name, origin)
			}
			soa++
		case dns.TypeNS:
			if name == origin {
				ns++
			}
		}
		if rr.Header().Rrtype == dns.TypeCNAME {
			kinds[name] |= 1
		} else if t := rr.Header().Rrtype; t != dns.TypeRRSIG && t != dns.TypeNSEC && t != dns.TypeNSEC3 {
			kinds[name] |= 2
		}
	}
	switch {
	case soa == 0:
		return fmt.Errorf("zone %q has no SOA record at its apex", origin)
	case soa > 1:
		return fmt.Errorf("zone %q has %d SOA records", origin, soa)
	case ns == 0:
		return fmt.Errorf("zone %q has no NS records at its apex", origin)
	}
	for name, k := range kinds {
		if k == 3 {
			return fmt.Errorf("CNAME and other data at %q (RFC 1034 section 3.6.2)", name)
		}
		if k&1 == 1 && name == origin {
			return fmt.Errorf("CNAME at the zone apex %q", origin)
		}
	}
	return nil
}

// parseRR parses one record in zone file syntax; relative names are relative
// to origin.
func parseRR(origin, text string) (dns.RR, error) {
	zp := dns.NewZoneParser(strings.NewReader(text), origin, "")
	zp.SetIncludeAllowed(false)
	zp.SetDefaultTTL(defaultTTL)
	rr, ok := zp.Next()
	if err := zp.Err(); err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("empty record")
	}
	if _, more := zp.Next(); more {
		return nil, fmt.Errorf("%q holds more than one record", text)
	}
	return rr, inZone(origin, rr)
}

func inZone(origin string, rr dns.RR) error {
	h := rr.Header()
	if h.Class != dns.ClassINET {
		return fmt.Errorf("record %q: class must be IN", rr.String())
	}
	if !dns.IsSubDomain(origin, strings.ToLower(h.Name)) {
		return fmt.Errorf("record %q: name is outside zone %q", h.Name, origin)
	}
	switch h.Rrtype {
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeANY:
		return fmt.Errorf("record %q: type %s cannot be stored", h.Name, dns.TypeToString[h.Rrtype])
	}
	return nil
}

// writeZone writes rrs as zone file text.
func writeZone(w io.Writer, rr dns.RR) error {
	_, err := io.WriteString(w, rr.String()+"\n")
	return err
}
