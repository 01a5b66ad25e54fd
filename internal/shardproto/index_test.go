package shardproto

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
		requested := Requested(m)
		SetMinIndex(m, 1)
		SetMinIndex(m, 1<<40+7) // again: replaced, not added
		w := wire(t, m)
		if idx, ok := MinIndex(w); !ok || idx != 1<<40+7 || Requested(w) != requested {
			t.Errorf("got %d %v, mode kept %v", idx, ok, Requested(w) == requested)
		}
		if n := testing.AllocsPerRun(100, func() { SetMinIndex(m, 9) }); n != 0 {
			t.Errorf("expected SetMinIndex on a query built by Request to allocate nothing, got %v", n)
		}
		// Allowing a stale answer keeps the index.
		s := wire(t, AllowStale(w))
		if idx, ok := MinIndex(s); !ok || idx != 1<<40+7 || !StaleAllowed(s) {
			t.Errorf("after AllowStale: %d %v %v", idx, ok, StaleAllowed(s))
		}
	}
	plain := new(dns.Msg)
	plain.SetQuestion("www.example.org.", dns.TypeA)
	plain.SetEdns0(1232, false)
	SetMinIndex(plain, 5)
	if _, ok := MinIndex(plain); ok || len(plain.IsEdns0().Option) != 0 {
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
