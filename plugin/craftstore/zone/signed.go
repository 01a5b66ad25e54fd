package zone

import (
	"slices"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"

	"github.com/miekg/dns"
)

// Complete adds to m, the zone's unsigned answer to a query with DO set,
// what a signed answer carries besides the signatures, which needs the
// zone's data but no key (internal/dnssec's Complete): the DS RRset of a
// referral's cut, RFC 9824's NSEC of a negative answer with the types at
// the name denied (keyTypes' too at the apex, asked only then: DNSKEY, and
// CDS and CDNSKEY while a key is for the DS), the NSEC of an insecure
// referral.
func (z *Zone) Complete(m *dns.Msg, keyTypes func() []uint16) error {
	origin := z.Origin()
	z.addDS(m)
	var a dnssec.Answer
	if name, neg := dnssec.Denied(m); neg {
		name = dnsname.Lower(name)
		exists, types, _ := z.Presence(name)
		if name == origin {
			types = append(types, keyTypes()...)
		}
		a.Negative = &dnssec.Denial{Name: name, Exists: exists, Types: types}
	}
	return dnssec.Complete(m, origin, a)
}

// GlueNames returns the owner names of m's answer and additional sections
// that are at or below a zone cut (glue: the child's data, not signed).
func (z *Zone) GlueNames(m *dns.Msg) []string {
	origin := z.Origin()
	var glue []string
	for _, rr := range append(m.Answer[:len(m.Answer):len(m.Answer)], m.Extra...) {
		h := rr.Header()
		if h.Rrtype == dns.TypeOPT || h.Rrtype == dns.TypeDS || h.Rrtype == dns.TypeNSEC {
			continue
		}
		name := dnsname.Lower(h.Name)
		if name != origin && !slices.Contains(glue, name) && z.Glue(name) {
			glue = append(glue, name)
		}
	}
	return glue
}

// KeyTypes are the types a signed zone's apex holds besides its data,
// for keys: DNSKEY, and CDS and CDNSKEY while a key is for the DS.
func KeyTypes(ds bool) []uint16 {
	if ds {
		return []uint16{dns.TypeDNSKEY, dns.TypeCDS, dns.TypeCDNSKEY}
	}
	return []uint16{dns.TypeDNSKEY}
}

// addDS adds to m, when it is (or ends in) a referral, the DS RRset of
// its cut, which a signed referral carries (RFC 4035 section 3.1.4): the
// delegation is then secure; without one the NSEC proves it insecure.
func (z *Zone) addDS(m *dns.Msg) {
	cut := dnssec.ReferralCut(m, z.Origin())
	if cut == "" {
		return
	}
	for _, rr := range m.Ns {
		if rr.Header().Rrtype == dns.TypeDS {
			return
		}
	}
	if ds := z.RRs(cut, dns.TypeDS); ds != nil {
		m.Ns = append(m.Ns, ds...)
	}
}
