package craftstore

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestAllowRules(t *testing.T) {
	rule := func(args ...string) allowRule {
		r, err := parseAllow(args)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		rule  allowRule
		key   string
		name  string
		qtype uint16
		want  bool
	}{
		{rule("update.", "*", "*"), "update.", "x.example.org.", dns.TypeA, true},
		{rule("update.", "*", "*"), "other.", "x.example.org.", dns.TypeA, false},
		{rule("update.", "@", "MX"), "update.", "example.org.", dns.TypeMX, true},
		{rule("update.", "@", "MX"), "update.", "example.org.", dns.TypeA, false},
		{rule("update.", "@", "MX"), "update.", "www.example.org.", dns.TypeMX, false},
		{rule("acme.", "*._acme-challenge", "TXT"), "acme.", "a._acme-challenge.example.org.", dns.TypeTXT, true},
		{rule("acme.", "*.example.org", "TXT"), "acme.", "_acme-challenge.www.example.org.", dns.TypeTXT, true},
		{rule("acme.", "*.example.org", "TXT"), "acme.", "example.org.", dns.TypeTXT, false},
		{rule("acme.", "_acme-challenge.www", "TXT", "ANY"), "acme.", "_acme-challenge.www.example.org.", dns.TypeANY, true},
		{rule("acme.", "_acme-challenge.www.example.org.", "TXT"), "acme.", "_Acme-Challenge.WWW.example.org.", dns.TypeTXT, true},
	}
	for i, tc := range tests {
		if got := tc.rule.permits("example.org.", tc.key, tc.name, tc.qtype); got != tc.want {
			t.Errorf("case %d: expected %v, got %v", i, tc.want, got)
		}
	}
	for _, args := range [][]string{{"k."}, {"k.", "@"}, {"k.", "@", "BOGUS"}, {"k.", "@", "*", "A"}, {"k.", "bad..name", "A"}} {
		if _, err := parseAllow(args); err == nil {
			t.Errorf("expected an error for allow %v", args)
		}
	}
}

// TestCheckUpdateLimits: an UPDATE over max_update_records, or whose
// additions take the zone over max_zone_records, is refused before it is
// proposed; deletions (class NONE and ANY) do not count as additions.
func TestCheckUpdateLimits(t *testing.T) {
	rep, _ := newZoneMember(t)
	cs := &Craftstore{Zones: []string{"org."}}
	cs.rep.Store(rep)
	rule, err := parseAllow([]string{"update.", "*", "*"})
	if err != nil {
		t.Fatal(err)
	}
	n := rep.Zone("example.org.").Records()
	cs.cfg.allow, cs.cfg.maxUpdate, cs.cfg.maxZone = []allowRule{rule}, 4, n+2
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	add := func(name string) dns.RR { return rr(name + ".example.org. 60 IN A 192.0.2.1") }
	del := rr("www.example.org. 0 NONE A 192.0.2.1")
	for _, tc := range []struct {
		updates []dns.RR
		rcode   int
		why     string
	}{
		{[]dns.RR{add("a"), add("b")}, dns.RcodeSuccess, ""},
		{[]dns.RR{add("a"), add("b"), add("c")}, dns.RcodeRefused, "max_zone_records"},
		{[]dns.RR{add("a"), add("b"), del, del}, dns.RcodeSuccess, ""},
		{[]dns.RR{add("a"), del, del, del, del}, dns.RcodeRefused, "at most 4"},
	} {
		rcode, _, why := cs.checkUpdate("example.org.", "update.", nil, tc.updates)
		if rcode != tc.rcode || !strings.Contains(why, tc.why) {
			t.Errorf("%d updates: expected %s %q, got %s %q", len(tc.updates), dns.RcodeToString[tc.rcode], tc.why, dns.RcodeToString[rcode], why)
		}
	}
}
