package partition

import (
	"testing"

	"github.com/miekg/dns"
)

func TestMinIndex(t *testing.T) {
	for _, mode := range []func(*dns.Msg){Request, RequestFresh} {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		mode(m)
		if _, ok := MinIndex(m); ok {
			t.Fatal("an index where none was set")
		}
		w := wire(t, WithMinIndex(m, 1<<40+7))
		if idx, ok := MinIndex(w); !ok || idx != 1<<40+7 || Requested(w) != Requested(m) {
			t.Errorf("got %d %v, mode kept %v", idx, ok, Requested(w) == Requested(m))
		}
		if _, ok := MinIndex(m); ok {
			t.Error("WithMinIndex modified its argument")
		}
		// Allowing a stale answer keeps the index.
		s := wire(t, AllowStale(w))
		if idx, ok := MinIndex(s); !ok || idx != 1<<40+7 || !StaleAllowed(s) {
			t.Errorf("after AllowStale: %d %v %v", idx, ok, StaleAllowed(s))
		}
	}
	plain := new(dns.Msg)
	plain.SetQuestion("www.example.org.", dns.TypeA)
	if WithMinIndex(plain, 5) != plain {
		t.Error("a query without the option was changed")
	}
}

func TestAttachIndex(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	m.SetEdns0(1232, false)
	Attach(m, Facts{Kind: Final, Origin: "example.org."})
	AttachIndex(m, 42)
	w := wire(t, m)
	if idx, ok := IndexOf(w); !ok || idx != 42 {
		t.Errorf("got %d %v", idx, ok)
	}
	Strip(w)
	if _, ok := IndexOf(w); ok || len(w.IsEdns0().Option) != 0 {
		t.Errorf("Strip left %v", w.IsEdns0().Option)
	}
}
