package zone

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

const policyZone = `@ 300 IN SOA ns hostmaster 1 7200 3600 1209600 300
@ 300 IN NS ns
ns 300 IN A 192.0.2.53
cn 300 IN CNAME www
`

// policyTestZone is policyZone with a policy at www for A: 10/8 gets
// 198.51.100.8, everyone else 203.0.113.1 (one value a pool: no draw).
func policyTestZone(t *testing.T) *Zone {
	t.Helper()
	p := new(policy.Policy)
	if err := policy.Decode([]byte(`{"pools": {"a": {"values": [{"value": "203.0.113.1"}], "ttl": 30}, "b": {"values": [{"value": "198.51.100.8"}]}},
		"rules": [{"subnets": ["10.0.0.0/8"], "pool": "b"}, {"pool": "a"}]}`), p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(dns.TypeA, nil); err != nil {
		t.Fatal(err)
	}
	rr, err := policy.Record("www.example.org.", dns.TypeA, p)
	if err != nil {
		t.Fatal(err)
	}
	z := New("example.org.")
	rrs := dnsdiff.ParseZone(t, "example.org.", policyZone)
	rrs = append(rrs, rr)
	z.Load(append(rrs, p.Defaults("www.example.org.", dns.TypeA)...))
	return z
}

// TestAppendReplyPolicy: a policy's packed answer is the bytes the server
// packs from LookupFor's, for clients by ECS and by source.
func TestAppendReplyPolicy(t *testing.T) {
	z := policyTestZone(t)
	src := &net.UDPAddr{IP: net.ParseIP("10.9.9.9"), Port: 5353}
	ecs := func(cidr string) func(r *dns.Msg) {
		return func(r *dns.Msg) {
			r.SetEdns0(1232, false)
			p := netip.MustParsePrefix(cidr)
			fam, ip := uint16(1), net.IP(p.Addr().AsSlice())
			if p.Addr().Is6() {
				fam = 2
			}
			r.IsEdns0().Option = append(r.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: fam, SourceNetmask: uint8(p.Bits()), Address: ip})
		}
	}
	for _, tc := range []struct {
		name, qname string
		qtype       uint16
		form        func(r *dns.Msg)
		want        string // the address answered last
		scope       int    // -1: no ECS option
	}{
		{"ECS in 10/8", "www.example.org.", dns.TypeA, ecs("10.1.0.0/16"), "198.51.100.8", 8},
		{"ECS elsewhere", "www.example.org.", dns.TypeA, ecs("192.0.2.0/24"), "203.0.113.1", 0},
		{"ECS v6", "www.example.org.", dns.TypeA, ecs("2001:db8::/56"), "203.0.113.1", 0},
		{"source in 10/8, EDNS", "www.example.org.", dns.TypeA, func(r *dns.Msg) { r.SetEdns0(1232, true) }, "198.51.100.8", -1},
		{"source in 10/8, no EDNS", "www.example.org.", dns.TypeA, func(r *dns.Msg) {}, "198.51.100.8", -1},
		{"a CNAME to it", "cn.example.org.", dns.TypeA, ecs("10.0.0.0/8"), "198.51.100.8", 8},
		{"no policy for AAAA", "www.example.org.", dns.TypeAAAA, ecs("10.0.0.0/8"), "", -1},
		{"no policy at ns", "ns.example.org.", dns.TypeA, ecs("10.0.0.0/8"), "192.0.2.53", -1},
	} {
		r := new(dns.Msg)
		r.SetQuestion(tc.qname, tc.qtype)
		tc.form(r)
		cl, e, err := policy.ClientOf(r, src)
		if err != nil {
			t.Fatal(err)
		}
		// As the server answers from LookupFor.
		m := new(dns.Msg)
		m.SetReply(r)
		if opt := r.IsEdns0(); opt != nil {
			m.SetEdns0(dns.DefaultMsgSize, opt.Do())
		}
		slow := cl
		z.LookupFor(m, strings.ToLower(tc.qname), tc.qtype, &slow)
		if slow.Used && e != nil {
			policy.Echo(m, e, slow.Scope)
		}
		state := request.Request{Req: r, W: &test.ResponseWriter{}}
		state.SizeAndDo(m)
		want, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		got, _, ok := z.AppendReplyFor(nil, r, 1220, &cl, e)
		if !ok {
			t.Errorf("%s: expected a packed reply", tc.name)
			continue
		}
		if !bytes.Equal(got, want) {
			var gm dns.Msg
			gm.Unpack(got)
			t.Errorf("%s: AppendReplyFor differs from LookupFor\ngot:\n%s\nwant:\n%s", tc.name, &gm, m)
			continue
		}
		var gm dns.Msg
		if err := gm.Unpack(got); err != nil {
			t.Fatal(err)
		}
		last := ""
		if n := len(gm.Answer); n > 0 {
			if a, ok := gm.Answer[n-1].(*dns.A); ok {
				last = a.A.String()
			}
		}
		scope := -1
		if o := policy.ECS(&gm); o != nil {
			scope = int(o.SourceScope)
		}
		if last != tc.want || scope != tc.scope {
			t.Errorf("%s: expected %q scope %d, got %q scope %d\n%s", tc.name, tc.want, tc.scope, last, scope, &gm)
		}
	}
	// Without a client, the records: Lookup's answer.
	r := new(dns.Msg)
	r.SetQuestion("www.example.org.", dns.TypeA)
	if _, _, ok := z.AppendReply(nil, r, 1220); ok {
		t.Errorf("AppendReply without a client answered a policy's name")
	}
	m := new(dns.Msg)
	z.Lookup(m, "www.example.org.", dns.TypeA)
	if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "203.0.113.1" {
		t.Errorf("Lookup: expected the default pool's record, got %v", m.Answer)
	}
	m = new(dns.Msg)
	z.Lookup(m, "www.example.org.", policy.TypePolicy)
	if len(m.Answer) != 0 || m.Rcode != dns.RcodeSuccess {
		t.Errorf("TYPE65380: expected NODATA, got %v", m)
	}
}
