package dnssec

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Keys are a signed zone's keys as the answers use them: Signing keys sign
// (the key-signing keys the DNSKEY, CDS and CDNSKEY RRsets, the
// zone-signing keys every other RRset; a combined key, flags 257, signs
// both), Published keys are in the DNSKEY RRset without signing (a new key
// before it is used, an old one after: a rollover's pre-publication).
type Keys struct {
	Zone      string // canonical
	Signing   []*Key
	Published []*Key
	// DS are the key-signing keys the parent's DS should list (CDS,
	// CDNSKEY); none: the zone publishes neither.
	DS     []*Key
	TTL    uint32        // of DNSKEY, CDS and CDNSKEY
	Period time.Duration // signatures' windows (WindowAt); 0: DefaultPeriod
}

// signers returns the signing keys of each kind: ksk sign the DNSKEY,
// CDS and CDNSKEY RRsets, zsk every other; a zone whose keys are all of
// one kind (a combined key, CSK) signs everything with them.
func (k *Keys) signers() (ksk, zsk []*Key) {
	for _, key := range k.Signing {
		if key.DNSKEY.Flags&dns.SEP != 0 {
			ksk = append(ksk, key)
		} else {
			zsk = append(zsk, key)
		}
	}
	if len(ksk) == 0 {
		ksk = zsk
	}
	if len(zsk) == 0 {
		zsk = ksk
	}
	return ksk, zsk
}

// signSet appends to out set's RRSIGs: by the key-signing keys ksk for
// the keys' own RRsets, by zsk for the rest.
func (s *Signer) signSet(out, set []dns.RR, ksk, zsk []*Key, w Window) ([]dns.RR, error) {
	keys := zsk
	switch set[0].Header().Rrtype {
	case dns.TypeDNSKEY, dns.TypeCDS, dns.TypeCDNSKEY:
		keys = ksk
	}
	for _, key := range keys {
		sig, err := s.Sign(key, set, w)
		if err != nil {
			return nil, err
		}
		out = append(out, sig)
	}
	return out, nil
}

// DNSKEYs is the zone's DNSKEY RRset: the signing and published keys.
func (k *Keys) DNSKEYs() []dns.RR {
	var out []dns.RR
	for _, key := range append(append([]*Key(nil), k.Signing...), k.Published...) {
		d := *key.DNSKEY
		d.Hdr.Name, d.Hdr.Ttl = k.Zone, k.TTL
		out = append(out, &d)
	}
	return out
}

// KeysReply is the unsigned reply to r when it asks for the zone's DNSKEY,
// CDS or CDNSKEY RRset (r's name being the apex: the caller's to check),
// which the keys make, not the zone's data; nil for any other type, or a
// set the keys do not make (no key for the DS: no CDS).
func (k *Keys) KeysReply(r *dns.Msg) *dns.Msg {
	var rrs []dns.RR
	switch r.Question[0].Qtype {
	case dns.TypeDNSKEY:
		rrs = k.DNSKEYs()
	case dns.TypeCDS:
		rrs = k.CDS()
	case dns.TypeCDNSKEY:
		rrs = k.CDNSKEY()
	}
	if rrs == nil {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Answer = rrs
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(dns.DefaultMsgSize, opt.Do())
	}
	return m
}

// DSInfo is what the parent zone needs of a signed zone (the members' and
// routers' GET /v1/zones/{zone}/ds).
type DSInfo struct {
	Zone   string   `json:"zone"`
	DS     []string `json:"ds"`     // the DS records to give the parent (SHA-256)
	DNSKEY []string `json:"dnskey"` // the zone's DNSKEY RRset
}

// Info returns the zone's DSInfo, in presentation format.
func (k *Keys) Info() DSInfo {
	v := DSInfo{Zone: k.Zone, DS: []string{}, DNSKEY: []string{}}
	for _, key := range k.DS {
		v.DS = append(v.DS, key.DS(KeyTTL).String())
	}
	for _, rr := range k.DNSKEYs() {
		v.DNSKEY = append(v.DNSKEY, rr.String())
	}
	return v
}

// CDS and CDNSKEY are the RRsets the zone asks its parent for (RFC 7344):
// those of the keys in DS.
func (k *Keys) CDS() []dns.RR {
	return k.forDS(func(key *Key) dns.RR { return key.CDS(k.TTL) })
}

// CDNSKEY: see CDS.
func (k *Keys) CDNSKEY() []dns.RR {
	return k.forDS(func(key *Key) dns.RR { return key.CDNSKEY(k.TTL) })
}

// forDS returns the records rr makes of the keys in DS, owned by the apex.
func (k *Keys) forDS(rr func(*Key) dns.RR) []dns.RR {
	var out []dns.RR
	for _, key := range k.DS {
		c := rr(key)
		c.Header().Name = k.Zone
		out = append(out, c)
	}
	return out
}

// Denial is what SignAnswer needs to know of a negative answer that the
// message does not say.
type Denial struct {
	// Name is the name denied: the last of the answer's CNAME chain
	// (Denied); "" for the query's.
	Name string
	// Exists: the name exists (NODATA, an empty non-terminal included);
	// Types are the types it has. Not Exists: NXDOMAIN.
	Exists bool
	Types  []uint16
}

// Denied reports whether m, an authoritative answer, is negative (NXDOMAIN
// or NODATA: its authority section has the zone's SOA) and for which name:
// the query's, or the last name of the CNAME (and DNAME) chain its answer
// section follows from it (RFC 6604).
func Denied(m *dns.Msg) (name string, negative bool) {
	if len(m.Question) != 1 {
		return "", false
	}
	soa := false
	for _, rr := range m.Ns {
		soa = soa || rr.Header().Rrtype == dns.TypeSOA
	}
	if !soa || (m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError) {
		return "", false
	}
	name = m.Question[0].Name
	for range len(m.Answer) + 1 {
		next := ""
		for _, rr := range m.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, name) {
				next = c.Target
				break
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	return name, true
}

// Answer is what SignAnswer needs to know of an answer besides the message.
type Answer struct {
	// Negative: the answer denies the query's name or type (NXDOMAIN or
	// NODATA); nil for a positive answer or a referral.
	Negative *Denial
	// Glue reports whether a record's owner is at or below a zone cut of
	// the zone (delegation glue, not signed); nil: none is.
	Glue func(name string) bool
}

// ErrNoKeys is a zone without a signing key.
var ErrNoKeys = errors.New("the zone has no signing key")

// SignAnswer turns m, zone k's unsigned answer to a query with DO set, into
// the signed one (RFC 4035 §3.1): Complete's records, and an RRSIG after
// every RRset of the zone's data it carries (not delegation NS records,
// glue, or CNAMEs a DNAME synthesized). An NXDOMAIN whose denial is RFC
// 9824's compact one becomes NOERROR. Signatures are made for now's
// window.
func (s *Signer) SignAnswer(m *dns.Msg, k *Keys, now time.Time, a Answer) error {
	if len(k.Signing) == 0 {
		return ErrNoKeys
	}
	if err := Complete(m, k.Zone, a); err != nil {
		return err
	}
	return s.SignSections(m, k, now, a.Glue)
}

// SignSections signs m, a completed answer (Complete) of zone k, for now's
// window: an RRSIG after every RRset of the zone's data, none for glue
// (glue, nil: none is) and the rest SignAnswer skips; a compact NXDOMAIN
// becomes NOERROR.
func (s *Signer) SignSections(m *dns.Msg, k *Keys, now time.Time, glue func(string) bool) error {
	if len(k.Signing) == 0 {
		return ErrNoKeys
	}
	period := k.Period
	if period <= 0 {
		period = DefaultPeriod
	}
	w := WindowAt(now, period)
	if m.Rcode == dns.RcodeNameError && compactNX(m.Ns) {
		m.Rcode = dns.RcodeSuccess
	}
	ksk, zsk := k.signers()
	var err error
	if m.Answer, err = s.signSection(m.Answer, k.Zone, ksk, zsk, w, glue, dnameCuts(m.Answer)); err != nil {
		return err
	}
	if m.Ns, err = s.signSection(m.Ns, k.Zone, ksk, zsk, w, glue, nil); err != nil {
		return err
	}
	if m.Extra, err = s.signSection(m.Extra, k.Zone, ksk, zsk, w, glue, nil); err != nil {
		return err
	}
	return nil
}

// compactNX reports whether section ns holds RFC 9824's NSEC of a name
// that does not exist (NXNAME in its bitmap).
func compactNX(ns []dns.RR) bool {
	for _, rr := range ns {
		if n, ok := rr.(*dns.NSEC); ok && slices.Contains(n.TypeBitMap, dns.TypeNXNAME) {
			return true
		}
	}
	return false
}

// Complete adds to m, zone's unsigned answer to a query with DO set, the
// records a signed answer carries besides the signatures, which need no
// key: RFC 9824's compact denial (an NSEC with NXNAME at a name that does
// not exist, the rcode left as it is; for NODATA the NSEC of the name's
// types), or for a referral without DS the NSEC that proves it has none (an
// insecure delegation). A referral's DS RRset is the caller's to add. It
// adds nothing twice: an answer completed already stays as it is.
func Complete(m *dns.Msg, zone string, a Answer) error {
	for _, rr := range m.Ns {
		if rr.Header().Rrtype == dns.TypeNSEC {
			return nil
		}
	}
	if a.Negative != nil && len(m.Question) == 1 {
		return deny(m, a.Negative)
	}
	if referral(m, zone) {
		return insecureCut(m)
	}
	return nil
}

// deny adds the compact denial NSEC of the query's name to m's authority
// section.
func deny(m *dns.Msg, d *Denial) error {
	ttl := uint32(0)
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			ttl = min(soa.Hdr.Ttl, soa.Minttl)
		}
	}
	name := d.Name
	if name == "" {
		name = m.Question[0].Name
	}
	nsec, err := CompactNSEC(name, d.Types, d.Exists, ttl)
	if err != nil {
		return err
	}
	m.Ns = append(m.Ns, nsec)
	return nil
}

// referral reports whether m is, or ends in (after a CNAME chain), a
// referral to a child zone: NS records below the apex in its authority
// section.
func referral(m *dns.Msg, zone string) bool {
	return ReferralCut(m, zone) != ""
}

// ReferralCut returns the zone cut m refers to: the owner of the NS
// records below the apex in its authority section, "" when there are none
// (a positive answer's authority section has the apex's NS).
func ReferralCut(m *dns.Msg, zone string) string {
	for _, rr := range m.Ns {
		if rr.Header().Rrtype == dns.TypeNS && !strings.EqualFold(rr.Header().Name, zone) {
			return rr.Header().Name
		}
	}
	return ""
}

// insecureCut adds, to a referral without DS, the NSEC at the cut whose
// bitmap (NS, no DS) proves the delegation insecure.
func insecureCut(m *dns.Msg) error {
	var cut string
	var ttl uint32
	for _, rr := range m.Ns {
		switch rr.Header().Rrtype {
		case dns.TypeDS:
			return nil // a secure delegation: its DS is signed
		case dns.TypeNS:
			cut, ttl = rr.Header().Name, rr.Header().Ttl
		}
	}
	nsec, err := CompactNSEC(cut, []uint16{dns.TypeNS}, true, ttl)
	if err != nil {
		return err
	}
	m.Ns = append(m.Ns, nsec)
	return nil
}

// dnameCuts returns the owners of the DNAME records of an answer section:
// the CNAMEs below them are synthesized, and not signed (RFC 6672 §5.3).
func dnameCuts(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeDNAME {
			out = append(out, rr.Header().Name)
		}
	}
	return out
}

// signSection returns rrs with an RRSIG after each RRset of the zone's own
// data, RRsets kept in the order of their first record.
func (s *Signer) signSection(rrs []dns.RR, zone string, ksk, zsk []*Key, w Window, glue func(string) bool, dnames []string) ([]dns.RR, error) {
	type set struct {
		rrs  []dns.RR
		sign bool
	}
	var sets []*set
	for _, rr := range rrs {
		h := rr.Header()
		var cur *set
		for _, st := range sets {
			f := st.rrs[0].Header()
			if f.Rrtype == h.Rrtype && f.Class == h.Class && strings.EqualFold(f.Name, h.Name) {
				cur = st
				break
			}
		}
		if cur == nil {
			cur = &set{sign: signs(rr, zone, glue, dnames)}
			sets = append(sets, cur)
		}
		cur.rrs = append(cur.rrs, rr)
	}
	out := make([]dns.RR, 0, len(rrs)+len(sets))
	for _, st := range sets {
		out = append(out, st.rrs...)
		if !st.sign {
			continue
		}
		var err error
		if out, err = s.signSet(out, st.rrs, ksk, zsk, w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// signs reports whether rr's RRset is signed: the zone's data, not an
// RRSIG, OPT or TSIG, not delegation NS records or glue, not a CNAME a
// DNAME synthesized.
func signs(rr dns.RR, zone string, glue func(string) bool, dnames []string) bool {
	h := rr.Header()
	switch h.Rrtype {
	case dns.TypeRRSIG, dns.TypeOPT, dns.TypeTSIG, dns.TypeSIG:
		return false
	}
	if !dns.IsSubDomain(zone, h.Name) {
		return false
	}
	apex := strings.EqualFold(h.Name, zone)
	if h.Rrtype == dns.TypeNS && !apex {
		return false // a delegation: the child signs its NS
	}
	if glue != nil && !apex && h.Rrtype != dns.TypeDS && h.Rrtype != dns.TypeNSEC && glue(h.Name) {
		return false
	}
	if h.Rrtype == dns.TypeCNAME {
		for _, d := range dnames {
			if !strings.EqualFold(d, h.Name) && dns.IsSubDomain(d, h.Name) {
				return false
			}
		}
	}
	return true
}
