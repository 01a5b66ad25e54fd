package dnsname

import "testing"

func TestLower(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"example.org.", "example.org."},
		{"WwW.ExAmple.ORG.", "www.example.org."},
		{`a\046B.example.`, `a\046b.example.`},
		{"ünïcode.Example.", "ünïcode.example."}, // only ASCII letters change
	} {
		if got := Lower(tc.in); got != tc.want {
			t.Errorf("Lower(%q): expected %q, got %q", tc.in, tc.want, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Lower("lower.case.example.") }); n != 0 {
		t.Errorf("expected no allocation for a lower-case name, got %v", n)
	}
}
