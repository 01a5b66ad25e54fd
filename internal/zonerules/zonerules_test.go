package zonerules

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// parse reads zone file text (no checks).
func parse(t *testing.T, text string) []dns.RR {
	t.Helper()
	zp := dns.NewZoneParser(strings.NewReader(text), "example.org.", "")
	var rrs []dns.RR
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		rrs = append(rrs, rr)
	}
	if err := zp.Err(); err != nil {
		t.Fatal(err)
	}
	return rrs
}

func TestSerialAfter(t *testing.T) {
	for _, tc := range []struct {
		a, b uint32
		want bool
	}{{2, 1, true}, {1, 2, false}, {1, 1, false}, {0, 0xffffffff, true}, {0xffffffff, 0, false}, {0x80000000, 1, true}} {
		if got := SerialAfter(tc.a, tc.b); got != tc.want {
			t.Errorf("SerialAfter(%d, %d): expected %v", tc.a, tc.b, tc.want)
		}
	}
}

// TestStorable: a record that packs and reads back as the same wire is
// storable; one miekg/dns cannot pack is not (the URI spelled otherwise
// after a second read is in xfrstream's FuzzReader corpus).
func TestStorable(t *testing.T) {
	ok, _ := dns.NewRR(`x.example.org. 60 IN URI 10 1 "https://example.org/"`)
	if !Storable(ok) {
		t.Errorf("expected %v storable", ok)
	}
	ninfo, _, err := dns.UnpackRR([]byte{1, 'x', 0, 0, 56, 0, 1, 0, 0, 0, 60, 0, 0}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if Storable(ninfo) {
		t.Errorf("expected %v, which does not pack, refused", ninfo)
	}
}

// TestCheckZoneDNAME: a zone with a DNAME beside other data passes; one
// with two DNAMEs at a name, a CNAME beside a DNAME, or a name below a
// DNAME owner is refused, naming the names.
func TestCheckZoneDNAME(t *testing.T) {
	head := "$ORIGIN example.org.\n@ 300 IN SOA ns1 host 1 2 3 4 5\n@ 300 IN NS ns1\nns1 300 IN A 192.0.2.1\n"
	for _, tc := range []struct{ body, want string }{
		{"old 300 IN DNAME new.example.org.\nold 300 IN TXT \"beside\"\nnew 300 IN A 192.0.2.2\n", ""},
		{"old 300 IN DNAME new.example.org.\nold 300 IN DNAME other.example.org.\n", `two DNAME records at "old.example.org."`},
		{"old 300 IN DNAME new.example.org.\nold 300 IN CNAME new.example.org.\n", `CNAME and other data at "old.example.org."`},
		{"old 300 IN DNAME new.example.org.\nhost.old 300 IN A 192.0.2.3\n", `"host.old.example.org." is below the DNAME at "old.example.org."`},
		{"old 300 IN DNAME new.example.org.\na.b.old 300 IN A 192.0.2.3\n", `"a.b.old.example.org." is below the DNAME at "old.example.org."`},
		{"@ 300 IN DNAME example.net.\n", `"ns1.example.org." is below the DNAME at "example.org."`},
		{"del 300 IN NS ns1.example.org.\ndel 300 IN DNAME new.example.org.\n", `DNAME beside NS at "del.example.org."`},
	} {
		err := CheckZone("example.org.", parse(t, head+tc.body))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: expected an error with %s, got %v", tc.body, tc.want, err)
		}
	}
}

// TestChangeRules: the rules a change is held to, name by name (the state
// machine applies them to the names a change touched).
func TestChangeRules(t *testing.T) {
	rrs := parse(t, "$ORIGIN example.org.\n@ 300 IN SOA ns1 host 1 2 3 4 5\n@ 300 IN NS ns1\n")
	if err := CheckApex("example.org.", rrs); err != nil {
		t.Errorf("a good apex: %v", err)
	}
	for want, apex := range map[string][]dns.RR{
		"no SOA record":          rrs[1:],
		"no NS records":          rrs[:1],
		"2 SOA records":          append(rrs[:2:2], rrs[0]),
		"CNAME at the zone apex": append(rrs[:2:2], parse(t, "example.org. 300 IN CNAME x.example.net.\n")...),
	} {
		if err := CheckApex("example.org.", apex); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("expected an error with %q, got %v", want, err)
		}
	}
	alias := parse(t, "www.example.org. 300 IN CNAME x.example.net.\nwww.example.org. 300 IN RRSIG CNAME 8 3 300 20300101000000 20200101000000 1 example.org. AAAA\n")
	if err := CheckName("www.example.org.", alias); err != nil {
		t.Errorf("a CNAME beside its signature: %v", err)
	}
	both := append(alias[:1:1], parse(t, "www.example.org. 300 IN TXT x\n")...)
	if err := CheckName("www.example.org.", both); err == nil || !strings.Contains(err.Error(), "CNAME and other data") {
		t.Errorf("a CNAME beside a TXT: expected a refusal, got %v", err)
	}
	for _, typ := range []uint16{dns.TypeSOA, dns.TypeCNAME, dns.TypeDNAME} {
		if !Singleton(typ) {
			t.Errorf("%s holds one record a name", dns.TypeToString[typ])
		}
	}
	if Singleton(dns.TypeA) || Singleton(dns.TypeNS) {
		t.Error("A and NS are sets")
	}
	dnames := map[string]bool{"old.example.org.": true}
	if got := DNAMEAbove("a.b.old.example.org.", "example.org.", func(n string) bool { return dnames[n] }); got != "old.example.org." {
		t.Errorf("DNAMEAbove: got %q", got)
	}
	if got := DNAMEAbove("old.example.org.", "example.org.", func(n string) bool { return dnames[n] }); got != "" {
		t.Errorf("DNAMEAbove of the owner itself: got %q", got)
	}
}
