package shardproto

import (
	"errors"
	"testing"

	"github.com/miekg/dns"
)

// wire returns m after a round trip through the wire format.
func wire(t *testing.T, m *dns.Msg) *dns.Msg {
	t.Helper()
	buf, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	out := new(dns.Msg)
	if err := out.Unpack(buf); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRequest(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	if Requested(m) {
		t.Errorf("expected no request without an OPT record")
	}
	m.SetEdns0(1232, true)
	if Requested(m) {
		t.Errorf("expected no request without the option")
	}
	Request(m)
	Request(m)
	r := wire(t, m)
	if !Requested(r) {
		t.Fatalf("expected a request, got\n%s", r)
	}
	opt := r.IsEdns0()
	if len(opt.Option) != 1 || opt.UDPSize() != 1232 || !opt.Do() {
		t.Errorf("expected one option in the client's OPT record, got %s", opt)
	}

	// Request adds an OPT record when there is none.
	m = new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	Request(m)
	if !Requested(wire(t, m)) {
		t.Errorf("expected a request, got\n%s", m)
	}
}

func TestAttachParse(t *testing.T) {
	for _, f := range []Facts{
		{Kind: Final, Origin: "example.org."},
		{Kind: Final},
		{Kind: Absent, Labels: 3, Origin: "example.org."},
		{Kind: Absent, Labels: 1, Wildcard: true, Origin: "Example.ORG"},
		{Kind: Absent, Origin: "."},
		{Kind: Absent, Labels: 127, Wildcard: true, Origin: `a\.b.example.`},
	} {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		m.SetEdns0(4096, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
		Attach(m, f)
		got, err := Parse(wire(t, m))
		if err != nil {
			t.Errorf("%+v: %v", f, err)
			continue
		}
		want := f
		if want.Origin != "" {
			want.Origin = dns.Fqdn(want.Origin)
		}
		if got != want {
			t.Errorf("expected %+v, got %+v", want, got)
		}
	}
}

func TestParseErrors(t *testing.T) {
	m := new(dns.Msg)
	if _, err := Parse(m); !errors.Is(err, ErrMissing) {
		t.Errorf("expected ErrMissing without an OPT record, got %v", err)
	}
	m.SetEdns0(4096, false)
	if _, err := Parse(m); !errors.Is(err, ErrMissing) {
		t.Errorf("expected ErrMissing without the option, got %v", err)
	}
	for _, data := range [][]byte{
		{},
		{version, byte(Final), 0},
		{version + 1, byte(Final), 0, 0},
		{version, 0, 0, 0},
		{version, 3, 0, 0},
		{version, byte(Absent), 2, 0, 7, 'e', 'x'}, // truncated origin
	} {
		m := new(dns.Msg)
		m.SetEdns0(4096, false)
		m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: Code, Data: data}}
		if _, err := Parse(wire(t, m)); err == nil || errors.Is(err, ErrMissing) {
			t.Errorf("%v: expected a malformed option error, got %v", data, err)
		}
	}
}

func TestStrip(t *testing.T) {
	m := new(dns.Msg)
	Strip(m) // no OPT: nothing to do
	m.SetEdns0(4096, false)
	m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
	Attach(m, Facts{Kind: Final, Origin: "example.org."})
	Strip(m)
	if _, err := Parse(m); !errors.Is(err, ErrMissing) {
		t.Errorf("expected ErrMissing after Strip, got %v", err)
	}
	if opt := m.IsEdns0(); len(opt.Option) != 1 || opt.Option[0].Option() != dns.EDNS0NSID {
		t.Errorf("expected the NSID option to stay, got %s", opt)
	}
	Request(m)
	Strip(m)
	if Requested(m) {
		t.Errorf("expected no request after Strip")
	}
}

func TestAllowStale(t *testing.T) {
	for _, mode := range []func(*dns.Msg){Request, RequestFresh} {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		mode(m)
		if StaleAllowed(m) {
			t.Fatal("expected no stale answer allowed by default")
		}
		s := wire(t, AllowStale(m))
		if !StaleAllowed(s) || !Routed(s) || Requested(s) != Requested(m) {
			t.Errorf("expected the same mode with stale allowed, got %s", s)
		}
		if StaleAllowed(m) {
			t.Error("AllowStale modified its argument")
		}
	}
}
