package fsm

import (
	"fmt"
	"strings"

	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// An RFC 2136 UPDATE is replicated whole, as one entry: its prerequisites are
// evaluated when the entry is applied, against the state every member has at
// that index, atomically with its updates. What does not depend on the state
// (the form of each RR, the zone section, authorization) was checked by the
// member that took the message; see CheckUpdate.

// CheckUpdate checks what RFC 2136 §3.2 and §3.4.1 say about the form of
// the prerequisite and update sections of an UPDATE for zone, and returns
// dns.RcodeSuccess or the rcode to refuse it with, and why.
func CheckUpdate(zone string, prereq, updates []dns.RR) (int, string) {
	for _, rr := range prereq {
		h := rr.Header()
		if !dns.IsSubDomain(zone, strings.ToLower(h.Name)) {
			return dns.RcodeNotZone, fmt.Sprintf("prerequisite name %s is outside zone %s", h.Name, zone)
		}
		if h.Ttl != 0 {
			return dns.RcodeFormatError, "prerequisite with a non-zero TTL"
		}
		switch h.Class {
		case dns.ClassANY, dns.ClassNONE:
			if h.Rdlength != 0 {
				return dns.RcodeFormatError, "prerequisite of class ANY or NONE with data"
			}
		case dns.ClassINET:
			if h.Rrtype == dns.TypeANY || zonerules.MetaType(h.Rrtype) {
				return dns.RcodeFormatError, "value-dependent prerequisite of a meta type"
			}
		default:
			return dns.RcodeFormatError, "prerequisite of another class"
		}
	}
	for _, rr := range updates {
		h := rr.Header()
		if !dns.IsSubDomain(zone, strings.ToLower(h.Name)) {
			return dns.RcodeNotZone, fmt.Sprintf("update name %s is outside zone %s", h.Name, zone)
		}
		switch h.Class {
		case dns.ClassINET:
			if h.Rrtype == dns.TypeANY || zonerules.MetaType(h.Rrtype) {
				return dns.RcodeFormatError, "adding a record of a meta type"
			}
			if h.Rrtype == dns.TypeSOA && !strings.EqualFold(dns.Fqdn(h.Name), zone) {
				return dns.RcodeFormatError, "SOA record not at the zone apex"
			}
		case dns.ClassANY:
			if h.Ttl != 0 || h.Rdlength != 0 || (zonerules.MetaType(h.Rrtype) && h.Rrtype != dns.TypeANY) {
				return dns.RcodeFormatError, "malformed RRset deletion"
			}
		case dns.ClassNONE:
			if h.Ttl != 0 || h.Rrtype == dns.TypeANY || zonerules.MetaType(h.Rrtype) {
				return dns.RcodeFormatError, "malformed RR deletion"
			}
		default:
			return dns.RcodeFormatError, "update of another class"
		}
		if policy.Reserved(h.Rrtype) {
			return dns.RcodeRefused, policy.RefuseReserved(h.Rrtype).Error()
		}
		if zonerules.SignedType(h.Rrtype) {
			return dns.RcodeNotImplemented, fmt.Sprintf("%s records cannot be updated (no online signing)", dns.TypeToString[h.Rrtype])
		}
		if !storable(rr) {
			return dns.RcodeFormatError, fmt.Sprintf("%s %s record with RDATA that cannot be stored", h.Name, dns.TypeToString[h.Rrtype])
		}
	}
	return dns.RcodeSuccess, ""
}

// storable reports whether an update RR that adds or names a record (class
// IN or NONE) packs again as the store writes it (appendRR): miekg/dns
// unpacks some RDATA it cannot pack, such as a NINFO with none, and such a
// record must be refused before it reaches the log, where every member
// would fail to apply it. Deletions of class ANY hold no record.
func storable(rr dns.RR) bool {
	if rr.Header().Class == dns.ClassANY {
		return true
	}
	x := dns.Copy(rr)
	x.Header().Class = dns.ClassINET
	return zonerules.Storable(x)
}

// workset holds the RRs of the names one entry touches, read once from the
// zone's bucket and written back at the end (writeNames). The writes
// replace a name's slice in names, never change a slice or an RR in place:
// stored keeps what was read, the journal's before-image.
type workset struct {
	zb     *bolt.Bucket
	names  map[string][]dns.RR // the names' RRs as the entry leaves them
	stored map[string][]dns.RR // the names' RRs as read
	order  []string            // the names in the order first read
}

func newWorkset(zb *bolt.Bucket) *workset {
	return &workset{zb: zb, names: map[string][]dns.RR{}, stored: map[string][]dns.RR{}}
}

func (w *workset) get(name string) ([]dns.RR, error) {
	name = strings.ToLower(dns.Fqdn(name))
	if rrs, ok := w.names[name]; ok {
		return rrs, nil
	}
	rrs, err := RRsAt(w.zb, name)
	if err != nil {
		return nil, err
	}
	w.names[name] = rrs
	w.stored[name] = rrs
	w.order = append(w.order, name)
	return rrs, nil
}

func (w *workset) set(name string, rrs []dns.RR) { w.names[strings.ToLower(dns.Fqdn(name))] = rrs }

func applyUpdate(g *bolt.Bucket, c *Command, o applyOpts) (Result, *Effect, error) {
	zb := g.Bucket(BucketZones).Bucket([]byte(c.Zone))
	if zb == nil {
		return Result{Rcode: dns.RcodeNotAuth}, nil, nil
	}
	m := new(dns.Msg)
	if err := m.Unpack(c.Update); err != nil {
		return Result{Rcode: dns.RcodeFormatError}, nil, nil
	}
	// CheckUpdate refused these before they were proposed; an entry that
	// holds one anyway is refused here, before anything is written,
	// rather than failing every member's apply.
	for _, rr := range m.Ns {
		if !storable(rr) {
			return Result{Rcode: dns.RcodeFormatError}, nil, nil
		}
	}
	w := newWorkset(zb)
	apex, err := w.get(c.Zone)
	if err != nil {
		return Result{}, nil, err
	}
	oldSerial, _ := soaSerial(apex)

	if !o.skipPrereqs {
		if rcode, err := checkPrereqs(w, m.Answer); err != nil || rcode != dns.RcodeSuccess {
			return Result{Rcode: rcode, Serial: oldSerial}, nil, err
		}
	}

	changed, explicitSOA := false, false
	for _, rr := range m.Ns {
		rrs, err := w.get(rr.Header().Name)
		if err != nil {
			return Result{}, nil, err
		}
		next, soa := updateName(c.Zone, rrs, rr)
		if soa {
			explicitSOA = true
		}
		if !sameRRs(rrs, next) {
			w.set(rr.Header().Name, next)
			changed = true
		}
	}
	if !changed {
		return Result{Rcode: dns.RcodeSuccess, Serial: oldSerial}, nil, nil
	}
	// RFC 2136 ignores a CNAME beside other data (a DNAME is other data);
	// a name below a DNAME owner has no such rule: the update is refused.
	if err := checkDNAMEs(zb, c.Zone, w.names, w.order); err != nil {
		return Result{Rcode: dns.RcodeRefused, Serial: oldSerial}, nil, err
	}
	apex = w.names[c.Zone]
	if err := checkApex(c.Zone, apex); err != nil {
		// updateName keeps the apex SOA and NS; this is a safety net.
		return Result{Rcode: dns.RcodeRefused, Serial: oldSerial}, nil, nil
	}
	serial := oldSerial
	if explicitSOA {
		serial, _ = soaSerial(apex)
	} else {
		apex, serial = bumpSerial(apex, oldSerial, nil)
		w.names[c.Zone] = apex
	}
	if o.dry {
		return Result{Rcode: dns.RcodeSuccess, Serial: serial}, nil, nil
	}
	if err := noteSerial(g, c.Zone, oldSerial, serial, explicitSOA); err != nil {
		return Result{}, nil, err
	}
	e, err := writeNames(g, c.Zone, w)
	if err != nil {
		return Result{}, nil, err
	}
	return Result{Rcode: dns.RcodeSuccess, Serial: serial}, e, nil
}

// checkPrereqs evaluates the prerequisite section (RFC 2136 §3.2.5).
func checkPrereqs(w *workset, prereq []dns.RR) (int, error) {
	type key struct {
		name string
		t    uint16
	}
	valueDependent := map[key][]dns.RR{}
	var keys []key
	for _, rr := range prereq {
		h := rr.Header()
		rrs, err := w.get(h.Name)
		if err != nil {
			return dns.RcodeServerFailure, err
		}
		switch h.Class {
		case dns.ClassANY: // name is in use / RRset exists
			if h.Rrtype == dns.TypeANY {
				if len(rrs) == 0 {
					return dns.RcodeNameError, nil
				}
			} else if !hasType(rrs, h.Rrtype) {
				return dns.RcodeNXRrset, nil
			}
		case dns.ClassNONE: // name is not in use / RRset does not exist
			if h.Rrtype == dns.TypeANY {
				if len(rrs) != 0 {
					return dns.RcodeYXDomain, nil
				}
			} else if hasType(rrs, h.Rrtype) {
				return dns.RcodeYXRrset, nil
			}
		case dns.ClassINET: // RRset exists, value dependent
			k := key{strings.ToLower(dns.Fqdn(h.Name)), h.Rrtype}
			if _, ok := valueDependent[k]; !ok {
				keys = append(keys, k)
			}
			valueDependent[k] = append(valueDependent[k], rr)
		}
	}
	for _, k := range keys {
		rrs, err := w.get(k.name)
		if err != nil {
			return dns.RcodeServerFailure, err
		}
		var have []dns.RR
		for _, rr := range rrs {
			if rr.Header().Rrtype == k.t {
				have = append(have, rr)
			}
		}
		if !sameSet(have, valueDependent[k]) {
			return dns.RcodeNXRrset, nil
		}
	}
	return dns.RcodeSuccess, nil
}

// updateName applies one update RR to the RRs of its name (RFC 2136
// §3.4.2) and reports whether it set an explicit SOA. What the RFC says to
// ignore is ignored: an SOA that is not newer, a CNAME beside other data or
// other data beside a CNAME, deleting the apex SOA or its last NS.
func updateName(zone string, rrs []dns.RR, rr dns.RR) ([]dns.RR, bool) {
	h := rr.Header()
	apex := strings.EqualFold(dns.Fqdn(h.Name), zone)
	switch h.Class {
	case dns.ClassINET:
		switch {
		case h.Rrtype == dns.TypeSOA:
			old, ok := soaSerial(rrs)
			if !ok || !zonerules.SerialAfter(rr.(*dns.SOA).Serial, old) {
				return rrs, false
			}
			return addRR(rrs, rr), true
		case h.Rrtype == dns.TypeCNAME && hasOtherThan(rrs, dns.TypeCNAME):
			return rrs, false
		case h.Rrtype != dns.TypeCNAME && hasType(rrs, dns.TypeCNAME):
			return rrs, false
		}
		return addRR(rrs, rr), false
	case dns.ClassANY:
		if h.Rrtype == dns.TypeANY {
			return removeRRs(rrs, func(x dns.RR) bool {
				t := x.Header().Rrtype
				return !apex || (t != dns.TypeSOA && t != dns.TypeNS)
			}), false
		}
		if apex && (h.Rrtype == dns.TypeSOA || h.Rrtype == dns.TypeNS) {
			return rrs, false
		}
		return removeRRs(rrs, func(x dns.RR) bool { return x.Header().Rrtype == h.Rrtype }), false
	case dns.ClassNONE:
		if h.Rrtype == dns.TypeSOA {
			return rrs, false
		}
		want := dns.Copy(rr)
		want.Header().Class = dns.ClassINET
		next := removeRRs(rrs, func(x dns.RR) bool { return dns.IsDuplicate(x, want) })
		if apex && h.Rrtype == dns.TypeNS && !hasType(next, dns.TypeNS) {
			return rrs, false
		}
		return next, false
	}
	return rrs, false
}

func hasType(rrs []dns.RR, t uint16) bool {
	for _, rr := range rrs {
		if rr.Header().Rrtype == t {
			return true
		}
	}
	return false
}

func hasOtherThan(rrs []dns.RR, t uint16) bool {
	for _, rr := range rrs {
		if rt := rr.Header().Rrtype; rt != t && rt != dns.TypeRRSIG && rt != dns.TypeNSEC && rt != dns.TypeNSEC3 {
			return true
		}
	}
	return false
}

// sameSet compares RRsets as sets of RDATA (RFC 2136 §3.2.3: TTLs ignored).
func sameSet(a, b []dns.RR) bool {
	in := func(x dns.RR, s []dns.RR) bool {
		for _, y := range s {
			yc := y
			if y.Header().Class != x.Header().Class {
				yc = dns.Copy(y)
				yc.Header().Class = x.Header().Class
			}
			if dns.IsDuplicate(x, yc) {
				return true
			}
		}
		return false
	}
	for _, x := range a {
		if !in(x, b) {
			return false
		}
	}
	for _, y := range b {
		if !in(y, a) {
			return false
		}
	}
	return true
}

// sameRRs reports whether two RR lists hold the same RRs, TTLs included.
func sameRRs(a, b []dns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !dns.IsDuplicate(a[i], b[i]) || a[i].Header().Ttl != b[i].Header().Ttl {
			return false
		}
	}
	return true
}
