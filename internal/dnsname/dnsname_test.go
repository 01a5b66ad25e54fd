package dnsname

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

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

// TestCanonicalKey: keys sort in DNS canonical order (RFC 4034 section
// 6.1, its example without the escaped labels, which sort by their
// presentation form), case-insensitively.
func TestCanonicalKey(t *testing.T) {
	names := []string{"example.", "a.example.", "yljkjljk.a.example.", "Z.a.example.", "zABC.a.EXAMPLE.", "z.example.", "*.z.example.", "a.z.example."}
	for i := 1; i < len(names); i++ {
		if a, b := CanonicalKey(names[i-1]), CanonicalKey(names[i]); string(a) >= string(b) {
			t.Errorf("expected %s before %s, got keys %q and %q", names[i-1], names[i], a, b)
		}
	}
	if string(CanonicalKey("WWW.Example.ORG")) != string(CanonicalKey("www.example.org.")) || string(CanonicalKey(".")) != "\x00" {
		t.Error("expected keys of names that differ in case only to be equal, and the root's to be one zero byte")
	}
	// Labels split where dns.Split splits them, escaped dots and
	// backslashes included.
	for _, name := range []string{"org.", "www.example.org.", `a\.example.org.`, `a\\.example.org.`, `a\\\.b.org.`,
		`a\046example.org.`, `\..org.`, `x\\.`, "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.example.org.", "*.example.org."} {
		if got, want := labelStarts(name, nil), dns.Split(name); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: expected labels at %v, got %v", name, want, got)
		}
	}
	for _, name := range []string{".", "org.", "www.example.org.", `a\.example.org.`, `a\\.example.org.`, "*.example.org.", `a\046b.org.`} {
		if got := string(KeyName(CanonicalKey(name))); got != name {
			t.Errorf("KeyName(CanonicalKey(%q)) = %q", name, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { CanonicalKey("www.example.org.") }); n != 1 {
		t.Errorf("expected the key to be the only allocation, got %v", n)
	}
}

func TestIn(t *testing.T) {
	names := []string{".", "org.", "example.org.", "www.example.org.", "wwwexample.org.", "a.b.example.org.",
		`a\.example.org.`, `a\\.example.org.`, `a\\\.example.org.`, `a\046example.org.`, `\.example.org.`,
		"example.net.", "xample.org.", "*.example.org.", "e.org."}
	for _, name := range names {
		for _, zone := range names {
			if got, want := In(name, zone), dns.IsSubDomain(zone, name); got != want {
				t.Errorf("In(%q, %q) = %t, dns.IsSubDomain says %t", name, zone, got, want)
			}
		}
	}
}

func FuzzIn(f *testing.F) {
	f.Add("www.example.org.", "example.org.")
	f.Add(`a\\.example.org.`, "example.org.")
	f.Fuzz(func(t *testing.T, name, zone string) {
		name, zone = Lower(dns.Fqdn(name)), Lower(dns.Fqdn(zone))
		if _, ok := dns.IsDomainName(name); !ok {
			return
		}
		if _, ok := dns.IsDomainName(zone); !ok {
			return
		}
		if got, want := In(name, zone), dns.IsSubDomain(zone, name); got != want {
			t.Errorf("In(%q, %q) = %t, dns.IsSubDomain says %t", name, zone, got, want)
		}
	})
}

// TestAppendCanonicalKey: the key of a canonical name, from a string or
// bytes, is CanonicalKey's (escaped dots and backslashes included), and
// costs no allocation when the buffer has room.
func TestAppendCanonicalKey(t *testing.T) {
	for _, name := range []string{".", "com.", "www.example.org.", `a\.b.example.`, `a\\.b.example.`, `x\046y.example.`, `\\\..example.`, "*.w.example.", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.example."} {
		want := CanonicalKey(name)
		var buf [64]byte
		if got := AppendCanonicalKey(buf[:0], name); string(got) != string(want) {
			t.Errorf("%s: key %q, CanonicalKey's %q", name, got, want)
		}
		if got := AppendCanonicalKey(nil, []byte(name)); string(got) != string(want) {
			t.Errorf("%s (bytes): key %q, CanonicalKey's %q", name, got, want)
		}
	}
	var buf [64]byte
	if n := testing.AllocsPerRun(100, func() { AppendCanonicalKey(buf[:0], "host-1.site-2.example.org.") }); n != 0 {
		t.Errorf("%v allocations with room in the buffer", n)
	}
}
