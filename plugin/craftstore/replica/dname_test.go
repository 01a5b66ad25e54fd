package replica

import (
	"errors"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestDNAMERefusals: no write leaves a name below a DNAME owner (RFC 6672
// section 2.3) or a CNAME beside a DNAME (section 2.4): API changes are
// refused with ErrConflict naming the names, an UPDATE that would put data
// below a DNAME is refused (a conflict: REFUSED), one adding a CNAME beside it is
// ignored as RFC 2136 ignores a CNAME beside other data; nothing refused
// is written.
func TestDNAMERefusals(t *testing.T) {
	c := newTestCluster(t, 1, 0)
	r := c.leader()
	if _, err := r.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	const zone = "example.org."
	rrs := func(name string, qtype uint16) []dns.RR { return r.Zone(zone).RRs(name, qtype) }
	change := func(add []string, del ...Deletion) error {
		var rs []dns.RR
		for _, s := range add {
			rs = append(rs, mustRR(t, s))
		}
		_, err := r.Change(ctx(t), zone, rs, del)
		return err
	}
	if err := change([]string{"old.example.org. 300 IN DNAME new.example.org.", "old.example.org. 300 IN TXT \"beside\""}); err != nil {
		t.Fatalf("a DNAME beside other data: %v", err)
	}
	serial := func() uint32 { s, _, _ := r.Zone(zone).Serial(); return s }
	before := serial()
	for _, tc := range []struct {
		add  []string
		want string
	}{
		{[]string{"host.old.example.org. 300 IN A 192.0.2.7"}, `"host.old.example.org." is below the DNAME at "old.example.org."`},
		{[]string{"a.b.old.example.org. 300 IN TXT \"x\""}, `"a.b.old.example.org." is below the DNAME at "old.example.org."`},
		{[]string{"example.org. 300 IN DNAME example.net."}, `a DNAME at "example.org.", which has names below it`},
		{[]string{"old.example.org. 300 IN CNAME new.example.org."}, `CNAME and other data at "old.example.org."`},
		{[]string{"cut.example.org. 300 IN NS ns1.example.org.", "cut.example.org. 300 IN DNAME new.example.org."}, `DNAME beside NS at "cut.example.org."`},
	} {
		err := change(tc.add)
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: expected a conflict saying %s, got %v", tc.add, tc.want, err)
		}
	}
	if serial() != before || rrs("host.old.example.org.", dns.TypeA) != nil || rrs("example.org.", dns.TypeDNAME) != nil {
		t.Errorf("a refused change was written (serial %d, was %d)", serial(), before)
	}

	// A DNAME above existing data is refused, unless the same change
	// deletes that data.
	if err := change([]string{"a.sub2.example.org. 300 IN A 192.0.2.8"}); err != nil {
		t.Fatal(err)
	}
	if err := change([]string{"sub2.example.org. 300 IN DNAME new.example.org."}); !errors.Is(err, ErrConflict) {
		t.Errorf("a DNAME above a.sub2: expected a conflict, got %v", err)
	}
	if err := change([]string{"sub2.example.org. 300 IN DNAME new.example.org."}, Deletion{Name: "a.sub2.example.org."}); err != nil {
		t.Errorf("a DNAME replacing the names below it: %v", err)
	}

	// UPDATE: data below the DNAME is refused, a CNAME beside it ignored.
	before = serial()
	m := new(dns.Msg)
	m.SetUpdate(zone)
	m.Insert([]dns.RR{mustRR(t, "x.old.example.org. 300 IN A 192.0.2.9")})
	// The UPDATE path answers a conflict REFUSED with an Extended DNS Error.
	if _, _, err := r.Update(ctx(t), zone, m.Answer, m.Ns); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "below the DNAME") {
		t.Errorf("UPDATE below a DNAME: expected a conflict, got %v", err)
	}
	m = new(dns.Msg)
	m.SetUpdate(zone)
	m.Insert([]dns.RR{mustRR(t, "old.example.org. 300 IN CNAME www.example.org.")})
	if rcode, _, err := r.Update(ctx(t), zone, m.Answer, m.Ns); rcode != dns.RcodeSuccess || err != nil {
		t.Errorf("UPDATE of a CNAME beside a DNAME: expected it ignored (NOERROR), got %s %v", dns.RcodeToString[rcode], err)
	}
	if serial() != before || rrs("x.old.example.org.", dns.TypeA) != nil || rrs("old.example.org.", dns.TypeCNAME) != nil {
		t.Errorf("a refused or ignored UPDATE was written (serial %d, was %d)", serial(), before)
	}
}
