package policy

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// The private types (RFC 6895 section 3.1) that hold policies and region
// tables, in RFC 3597's generic form.
const (
	TypePolicy  uint16 = 65380
	TypeRegions uint16 = 65381
)

// Reserved reports the types that hold policies: queries for them answer
// as for an absent RRset, transfers leave them out, RFC 2136 UPDATE and
// record changes refuse them (they are written by the policy API).
func Reserved(t uint16) bool { return t == TypePolicy || t == TypeRegions || t == TypeHealth }

// RefuseReserved is the error for a record change or UPDATE of type t.
func RefuseReserved(t uint16) error {
	return fmt.Errorf("TYPE%d holds request-routing policies: write them through /v1/zones/{zone}/policies and /regions", t)
}

// Record returns the record of p, covering type t, at owner: p is
// checked (Policy.Validate). Its RDATA is the covered type and p's canonical
// JSON.
func Record(owner string, t uint16, p *Policy) (dns.RR, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxEncoded {
		return nil, errorf("the policy is %d octets as JSON: at most %d", len(b), MaxEncoded)
	}
	rdata := binary.BigEndian.AppendUint16(nil, t)
	return generic(owner, TypePolicy, append(rdata, b...)), nil
}

// ParseRegions reads the body of PUT /v1/zones/{zone}/regions and returns
// the table's record at apex: an *Error for a body that is not a valid
// table.
func ParseRegions(apex string, body []byte) (dns.RR, error) {
	r := new(Regions)
	if err := Decode(body, r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return RegionsRecord(apex, r)
}

// RegionsRecord returns the record of region table r at the apex.
func RegionsRecord(apex string, r *Regions) (dns.RR, error) {
	b, err := json.Marshal(r.Regions)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxEncoded {
		return nil, errorf("the region table is %d octets as JSON: at most %d", len(b), MaxEncoded)
	}
	return generic(apex, TypeRegions, b), nil
}

func generic(owner string, t uint16, rdata []byte) dns.RR {
	return &dns.RFC3597{
		Hdr:   dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: 0},
		Rdata: hex.EncodeToString(rdata),
	}
}

// rdataOf returns the RDATA of a generic record, false when rr is not one.
func rdataOf(rr dns.RR) ([]byte, bool) {
	g, ok := rr.(*dns.RFC3597)
	if !ok {
		return nil, false
	}
	b, err := hex.DecodeString(g.Rdata)
	return b, err == nil
}

// Find returns the policy record of rrs (the records at a name) that
// covers t, or nil.
func Find(rrs []dns.RR, t uint16) dns.RR { return findCovering(rrs, TypePolicy, t) }

// findCovering returns the record of type rtype in rrs whose RDATA starts
// with covered type t, or nil: by the RDATA's hex form, on a query's path.
func findCovering(rrs []dns.RR, rtype, t uint16) dns.RR {
	var want [4]byte
	const digits = "0123456789abcdef"
	for i := range want {
		want[i] = digits[t>>(12-4*i)&0xf]
	}
	for _, rr := range rrs {
		if rr.Header().Rrtype != rtype {
			continue
		}
		if g, ok := rr.(*dns.RFC3597); ok && len(g.Rdata) >= 4 && g.Rdata[:4] == string(want[:]) {
			return rr
		}
	}
	return nil
}

// Read returns the policy of record rr (TypePolicy) and the type it covers.
func Read(rr dns.RR) (*Policy, uint16, error) {
	b, ok := rdataOf(rr)
	if !ok || rr.Header().Rrtype != TypePolicy || len(b) < 2 {
		return nil, 0, errorf("not a policy record")
	}
	p := new(Policy)
	if err := json.Unmarshal(b[2:], p); err != nil {
		return nil, 0, errorf("policy record of %s: %v", rr.Header().Name, err)
	}
	return p, binary.BigEndian.Uint16(b), nil
}

// ReadRegions returns the region table of record rr (TypeRegions).
func ReadRegions(rr dns.RR) (*Regions, error) {
	b, ok := rdataOf(rr)
	if !ok || rr.Header().Rrtype != TypeRegions {
		return nil, errorf("not a region table record")
	}
	r := &Regions{}
	if err := json.Unmarshal(b, &r.Regions); err != nil {
		return nil, errorf("region table of %s: %v", rr.Header().Name, err)
	}
	return r, nil
}

// Without returns rrs without the records of reserved types: what a zone
// transfer carries. It returns rrs itself when there are none.
func Without(rrs []dns.RR) []dns.RR {
	i := 0
	for i < len(rrs) && !Reserved(rrs[i].Header().Rrtype) {
		i++
	}
	if i == len(rrs) {
		return rrs
	}
	out := append([]dns.RR(nil), rrs[:i]...)
	for _, rr := range rrs[i+1:] {
		if !Reserved(rr.Header().Rrtype) {
			out = append(out, rr)
		}
	}
	return out
}

// TypeName is the name of t in a policy's path: A or AAAA, any case.
func TypeName(s string) (uint16, bool) {
	t, ok := dns.StringToType[strings.ToUpper(s)]
	return t, ok && Covered(t)
}
