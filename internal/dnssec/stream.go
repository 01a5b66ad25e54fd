package dnssec

import (
	"slices"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// ZoneStream signs a zone transfer as it streams by: SignZone's records
// (the apex's keys, an NSEC chain in canonical order, an RRSIG over every
// RRset but a delegation's NS and glue) without holding the zone. It takes
// the zone's owner names in canonical order, each with all of its records
// at once (a router merges the shards' transfers so); a name's NSEC goes
// out when the next name of the chain is known, the last one's at Close.
type ZoneStream struct {
	s        *Signer
	k        *Keys
	w        Window
	zone     string
	ksk, zsk []*Key
	negTTL   uint32
	emit     func(...dns.RR) error
	apex     string // the apex's owner as the SOA spells it
	apexDone bool
	cut      string    // the last zone cut met: names below it are glue
	prev     *dns.NSEC // the chain's last NSEC, its next name not known yet
}

// NewZoneStream starts the signed transfer of zone k.Zone whose SOA is
// soa: emit gets the SOA and its RRSIG at once, then every record Add and
// Close make, in order.
func (s *Signer) NewZoneStream(k *Keys, soa *dns.SOA, now time.Time, emit func(...dns.RR) error) (*ZoneStream, error) {
	if len(k.Signing) == 0 {
		return nil, ErrNoKeys
	}
	period := k.Period
	if period <= 0 {
		period = DefaultPeriod
	}
	z := &ZoneStream{s: s, k: k, w: WindowAt(now, period), zone: dnsname.Lower(k.Zone), emit: emit,
		negTTL: min(soa.Hdr.Ttl, soa.Minttl), apex: soa.Hdr.Name}
	z.ksk, z.zsk = k.signers()
	if err := emit(soa); err != nil {
		return nil, err
	}
	return z, z.sign([]dns.RR{soa})
}

// sign emits set's RRSIGs.
func (z *ZoneStream) sign(set []dns.RR) error {
	sigs, err := z.s.signSet(nil, set, z.ksk, z.zsk, z.w)
	if err != nil {
		return err
	}
	return z.emit(sigs...)
}

// Add takes the records of the next owner name (canonical order): the
// signer's own types (RRSIG, NSEC, NSEC3, DNSKEY, CDS, CDNSKEY) and the
// SOA, sent already, are dropped.
func (z *ZoneStream) Add(group []dns.RR) error {
	var rrs []dns.RR
	for _, rr := range group {
		switch rr.Header().Rrtype {
		case dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeNSEC3PARAM, dns.TypeDNSKEY, dns.TypeCDS, dns.TypeCDNSKEY, dns.TypeSOA:
			continue
		}
		rrs = append(rrs, rr)
	}
	if len(group) == 0 {
		return nil
	}
	owner := group[0].Header().Name
	lower := dnsname.Lower(owner)
	if lower == z.zone {
		z.apexDone = true
		return z.name(z.apex, append(rrs, z.keySets()...), false)
	}
	if !z.apexDone {
		// The apex holds only its SOA in the stream: its keys and NSEC.
		if err := z.Add([]dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: z.apex, Rrtype: dns.TypeSOA}}}); err != nil {
			return err
		}
	}
	if len(rrs) == 0 {
		return nil
	}
	if z.cut != "" && dns.IsSubDomain(z.cut, lower) {
		return z.emit(rrs...) // glue, or occluded below a cut: unsigned, no NSEC
	}
	cut := slices.ContainsFunc(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeNS })
	z.cut = ""
	if cut {
		z.cut = lower
	}
	return z.name(owner, rrs, cut)
}

// keySets are the apex's DNSKEY, CDS and CDNSKEY records.
func (z *ZoneStream) keySets() []dns.RR {
	return slices.Concat(z.k.DNSKEYs(), z.k.CDS(), z.k.CDNSKEY())
}

// name emits owner's RRsets with their signatures (a cut's NS and other
// data but DS unsigned) after the NSEC that points to it, and makes its
// own NSEC.
func (z *ZoneStream) name(owner string, rrs []dns.RR, cut bool) error {
	if err := z.flushNSEC(owner); err != nil {
		return err
	}
	types := []uint16{dns.TypeNSEC, dns.TypeRRSIG}
	if dnsname.Lower(owner) == z.zone {
		types = append(types, dns.TypeSOA)
	}
	var order []uint16
	for _, rr := range rrs {
		if t := rr.Header().Rrtype; !slices.Contains(order, t) {
			order = append(order, t)
		}
	}
	for _, t := range order {
		var set []dns.RR
		for _, rr := range rrs {
			if rr.Header().Rrtype == t {
				set = append(set, rr)
			}
		}
		if err := z.emit(set...); err != nil {
			return err
		}
		if !cut || t == dns.TypeNS || t == dns.TypeDS {
			types = append(types, t)
		}
		if cut && t != dns.TypeDS {
			continue // the child's NS; data at a cut other than DS is glue
		}
		if err := z.sign(set); err != nil {
			return err
		}
	}
	slices.Sort(types)
	z.prev = &dns.NSEC{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeNSEC, Class: dns.ClassINET, Ttl: z.negTTL},
		TypeBitMap: slices.Compact(types)}
	return nil
}

// flushNSEC emits the chain's pending NSEC, pointing to next.
func (z *ZoneStream) flushNSEC(next string) error {
	if z.prev == nil {
		return nil
	}
	n := z.prev
	z.prev = nil
	n.NextDomain = next
	if err := z.emit(n); err != nil {
		return err
	}
	return z.sign([]dns.RR{n})
}

// Close ends the chain: the last NSEC points back to the apex. The
// closing SOA is the caller's.
func (z *ZoneStream) Close() error {
	if !z.apexDone {
		if err := z.Add([]dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: z.apex, Rrtype: dns.TypeSOA}}}); err != nil {
			return err
		}
	}
	return z.flushNSEC(z.apex)
}
