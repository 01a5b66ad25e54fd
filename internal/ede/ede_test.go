package ede

import (
	"testing"

	"github.com/miekg/dns"
)

func TestReply(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion("example.org.", dns.TypeA)
	q.Id = 42

	// Without EDNS0: the rcode alone; an extended one becomes SERVFAIL.
	if m := Reply(q, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "no"); m.Rcode != dns.RcodeRefused || m.IsEdns0() != nil || m.Id != 42 || !m.Response {
		t.Errorf("expected a REFUSED reply without OPT to id 42, got\n%v", m)
	}
	if m := Reply(q, dns.RcodeBadCookie, 0, "cookie"); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("expected SERVFAIL for an extended rcode without EDNS0, got %s", dns.RcodeToString[m.Rcode])
	}

	// With EDNS0 and the DO bit: OPT with DO, and the EDE when why is set.
	q.SetEdns0(1232, true)
	m := Reply(q, dns.RcodeNotAuth, dns.ExtendedErrorCodeNotAuthoritative, "no such zone here")
	opt := m.IsEdns0()
	if m.Rcode != dns.RcodeNotAuth || opt == nil || !opt.Do() || len(opt.Option) != 1 {
		t.Fatalf("expected NOTAUTH with an OPT (DO) holding one option, got\n%v", m)
	}
	if e, ok := opt.Option[0].(*dns.EDNS0_EDE); !ok || e.InfoCode != dns.ExtendedErrorCodeNotAuthoritative || e.ExtraText != "no such zone here" {
		t.Errorf("expected EDE 20 \"no such zone here\", got %v", opt.Option[0])
	}
	if m := Reply(q, dns.RcodeSuccess, 0, ""); m.Rcode != dns.RcodeSuccess || m.IsEdns0() == nil || len(m.IsEdns0().Option) != 0 {
		t.Errorf("expected NOERROR with an empty OPT, got\n%v", m)
	}
}
