// Package zonerules is what a zone may hold, in one place for every path
// that writes one: zone files and record changes through the HTTP API
// (internal/zoneapi), RFC 2136 UPDATE and every change as the state
// machine applies it (plugin/craftstore/replica), zone transfers in
// (internal/xfrstream) and the router's split of a zone over shards
// (plugin/craftroute). It knows DNS only: no HTTP, no storage. Its errors
// are plain errors whose text says which rule a zone or change breaks;
// callers give them their kind (an HTTP status, an rcode, a state machine
// refusal).
//
// The rules:
//   - a record: class IN, a name inside the zone, a data type (no query or
//     meta type), RDATA that packs and reads back the same (CheckRecord);
//   - a name: a CNAME is its only data, DNSSEC records aside (RFC 1034
//     section 3.6.2, RFC 2181 section 10.1; a DNAME is other data, RFC
//     6672 section 2.4), and SOA, CNAME and DNAME hold one record a name
//     (CheckName, Singleton);
//   - the apex: exactly one SOA, at least one NS, no CNAME (CheckApex);
//   - a DNAME: no name below its owner (RFC 6672 section 2.3), none beside
//     NS below the apex, which the zone cut would occlude (DNAMEAbove,
//     CheckDNAME);
//   - a change never touches a DNSSEC type one record at a time: without
//     online signing that would leave signatures and denial records that no
//     longer match (SignedType);
//   - serials compare in RFC 1982 serial number arithmetic (SerialAfter).
package zonerules

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// SignedType reports the DNSSEC types (RFC 4034, 5155, 7344, 8976; SIG,
// KEY and NXT of RFC 2535) that a change to a zone may not touch: a signed
// zone's are the online signer's (dnssec: signatures, denial, keys), and a
// record changed one at a time would leave those of a presigned zone out
// of step. A delegation's DS comes with an import of the zone. RFC 2136
// UPDATE and the API's record changes refuse them alike.
func SignedType(t uint16) bool {
	switch t {
	case dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeNSEC3PARAM, dns.TypeDNSKEY,
		dns.TypeDS, dns.TypeCDS, dns.TypeCDNSKEY, dns.TypeSIG, dns.TypeKEY, dns.TypeNXT, dns.TypeZONEMD:
		return true
	}
	return false
}

// RefuseSigned is the error for a change of DNSSEC type t (SignedType).
func RefuseSigned(t uint16) error {
	return fmt.Errorf("%s records cannot be changed one at a time: the online signer (dnssec) makes a signed zone's, and a delegation's DS comes with an import of the zone", dns.TypeToString[t])
}

// MetaType reports the query and meta types (RFC 6895 section 3.1) that no
// zone holds: imports, changes, UPDATE and the transfer stream refuse them.
func MetaType(t uint16) bool {
	switch t {
	case dns.TypeNone, dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeIXFR, dns.TypeAXFR,
		dns.TypeMAILA, dns.TypeMAILB, dns.TypeANY:
		return true
	}
	return false
}

// Singleton reports the types a name holds one record of: a new one
// replaces the old (SOA; CNAME, RFC 2181 section 10.1; DNAME, RFC 6672
// section 2.4), as RFC 2136 does.
func Singleton(t uint16) bool {
	return t == dns.TypeSOA || t == dns.TypeCNAME || t == dns.TypeDNAME
}

// besideCNAME reports the types that may stand at a CNAME's name: its
// signatures and denial records (RFC 4035 section 2.5, RFC 5155).
func besideCNAME(t uint16) bool {
	return t == dns.TypeCNAME || t == dns.TypeRRSIG || t == dns.TypeNSEC || t == dns.TypeNSEC3
}

// Storable reports whether rr packs in the wire format the store keeps, and
// reads back as the same wire: miekg/dns reads some RDATA it cannot write
// back, such as a NINFO with none ("TYPE56 \# 0" in a zone file, or from
// the wire), and spells some differently after a second read (a URI target
// with a backslash and digits in its octets), so that a transfer would
// carry another record than the store holds. Such a record is refused
// before it is proposed.
func Storable(rr dns.RR) bool {
	b := make([]byte, dns.Len(rr))
	n, err := dns.PackRR(rr, b, 0, nil, false)
	if err != nil {
		return false
	}
	back, _, err := dns.UnpackRR(b[:n], 0)
	if err != nil {
		return false
	}
	again := make([]byte, dns.Len(back))
	m, err := dns.PackRR(back, again, 0, nil, false)
	return err == nil && bytes.Equal(b[:n], again[:m])
}

// CheckRecord checks that zone origin can hold rr: class IN, a name inside
// the zone, a type that is data, and RDATA the store keeps as it is.
func CheckRecord(origin string, rr dns.RR) error {
	h := rr.Header()
	if h.Class != dns.ClassINET {
		return fmt.Errorf("record %q: class must be IN", rr.String())
	}
	if !dns.IsSubDomain(origin, strings.ToLower(h.Name)) {
		return fmt.Errorf("record %q: name is outside zone %q", h.Name, origin)
	}
	if MetaType(h.Rrtype) {
		return fmt.Errorf("record %q: type %s cannot be stored", h.Name, dns.TypeToString[h.Rrtype])
	}
	if !Storable(rr) {
		return fmt.Errorf("record %q: its %s RDATA cannot be stored", h.Name, dns.TypeToString[h.Rrtype])
	}
	return nil
}

// CheckName checks the records rrs of one name: a CNAME is the only data
// there, DNSSEC records aside (RFC 1034 section 3.6.2; a DNAME is other
// data, RFC 6672 section 2.4).
func CheckName(name string, rrs []dns.RR) error {
	cname, other := false, false
	for _, rr := range rrs {
		t := rr.Header().Rrtype
		cname = cname || t == dns.TypeCNAME
		other = other || !besideCNAME(t)
	}
	if cname && other {
		return fmt.Errorf("CNAME and other data at %q (RFC 1034 section 3.6.2)", name)
	}
	return nil
}

// CheckApex checks the records of the apex of zone origin: exactly one SOA,
// at least one NS, and no CNAME.
func CheckApex(origin string, apex []dns.RR) error {
	if err := CheckApexSoFar(origin, apex); err != nil {
		return err
	}
	soa, ns := 0, 0
	for _, rr := range apex {
		switch rr.Header().Rrtype {
		case dns.TypeSOA:
			soa++
		case dns.TypeNS:
			ns++
		}
	}
	switch {
	case soa == 0:
		return fmt.Errorf("zone %q has no SOA record at its apex", origin)
	case ns == 0:
		return fmt.Errorf("zone %q has no NS records at its apex", origin)
	}
	return nil
}

// CheckApexSoFar checks the apex records of zone origin read so far, of a
// zone read record by record (an import fed as it is parsed): what
// CheckApex refuses whatever follows, a CNAME or a second SOA (duplicates
// count: a zone file holds one).
func CheckApexSoFar(origin string, apex []dns.RR) error {
	soa := 0
	for _, rr := range apex {
		switch rr.Header().Rrtype {
		case dns.TypeSOA:
			soa++
		case dns.TypeCNAME:
			return fmt.Errorf("CNAME at the zone apex %q", origin)
		}
	}
	if soa > 1 {
		return fmt.Errorf("zone %q has %d SOA records", origin, soa)
	}
	return nil
}

// CheckDNAME checks the records rrs of name, a name of zone origin that
// holds a DNAME: below the apex no NS may stand beside it, since the zone
// cut occludes it (Knot and BIND refuse such a zone).
func CheckDNAME(origin, name string, rrs []dns.RR) error {
	if name == origin {
		return nil
	}
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeNS {
			return fmt.Errorf("DNAME beside NS at %q: below the apex the zone cut occludes it (Knot and BIND refuse such a zone)", name)
		}
	}
	return nil
}

// BelowDNAME is the error for name, which stands below the DNAME at owner
// (RFC 6672 section 2.3).
func BelowDNAME(name, owner string) error {
	return fmt.Errorf("%q is below the DNAME at %q (RFC 6672 section 2.3: a DNAME owner has no names below it)", name, owner)
}

// DNAMEAbove returns the name strictly above name, up to origin, for which
// isDNAME is true (the closest), or "". name and origin are lower case and
// fully qualified, name at or below origin.
func DNAMEAbove(name, origin string, isDNAME func(string) bool) string {
	if name == origin {
		return ""
	}
	for off, end := dns.NextLabel(name, 0); !end && len(name)-off >= len(origin); off, end = dns.NextLabel(name, off) {
		parent := name[off:]
		if isDNAME(parent) {
			return parent
		}
		if parent == origin {
			break
		}
	}
	return ""
}

// CheckZone checks a whole zone: every record as CheckRecord says, SOA
// records only at the apex, one CNAME and one DNAME at most at a name (RFC
// 2181 section 10.1, RFC 6672 section 2.4: a zone file holds one; a change
// replaces them, as RFC 2136 does), every name as CheckName says, the apex
// as CheckApex says, and the DNAME rules (CheckDNAME, no name below a DNAME
// owner).
func CheckZone(origin string, rrs []dns.RR) error {
	byName := map[string][]dns.RR{}
	var order []string
	for _, rr := range rrs {
		if err := CheckRecord(origin, rr); err != nil {
			return err
		}
		h := rr.Header()
		name := strings.ToLower(h.Name)
		if h.Rrtype == dns.TypeSOA && name != origin {
			return SOABelowApex(h.Name, origin)
		}
		if h.Rrtype == dns.TypeCNAME || h.Rrtype == dns.TypeDNAME {
			for _, other := range byName[name] {
				if other.Header().Rrtype == h.Rrtype && !dns.IsDuplicate(other, rr) {
					return TwoAliases(h.Name, h.Rrtype)
				}
			}
		}
		if _, ok := byName[name]; !ok {
			order = append(order, name)
		}
		byName[name] = append(byName[name], rr)
	}
	if err := CheckApex(origin, byName[origin]); err != nil {
		return err
	}
	dnames := map[string]bool{}
	for _, name := range order {
		for _, rr := range byName[name] {
			if rr.Header().Rrtype == dns.TypeDNAME {
				dnames[name] = true
			}
		}
	}
	for _, name := range order {
		if dnames[name] {
			if err := CheckDNAME(origin, name, byName[name]); err != nil {
				return err
			}
		}
	}
	if len(dnames) > 0 {
		isDNAME := func(n string) bool { return dnames[n] }
		for _, name := range order {
			if owner := DNAMEAbove(name, origin, isDNAME); owner != "" {
				return BelowDNAME(name, owner)
			}
		}
	}
	for _, name := range order {
		if err := CheckName(name, byName[name]); err != nil {
			return err
		}
	}
	return nil
}

// SOABelowApex is CheckZone's refusal of an SOA record at name, below the
// apex of zone origin.
func SOABelowApex(name, origin string) error {
	return fmt.Errorf("SOA record at %q is not at the zone apex %q", name, origin)
}

// TwoAliases is CheckZone's refusal of a second CNAME or DNAME (t) at
// name.
func TwoAliases(name string, t uint16) error {
	if t == dns.TypeCNAME {
		return fmt.Errorf("two CNAME records at %q (RFC 2181 section 10.1: an alias has one canonical name)", name)
	}
	return fmt.Errorf("two DNAME records at %q (RFC 6672 section 2.4: a name has one DNAME)", name)
}

// SerialAfter reports whether SOA serial a is after b (RFC 1982 section
// 3.2): a differs from b and lies less than 2^31 ahead of it.
func SerialAfter(a, b uint32) bool { return a != b && int32(a-b) > 0 }
