package craftstore

import (
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
