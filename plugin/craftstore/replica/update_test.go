package replica

import (
	"testing"

	"github.com/miekg/dns"
)

func TestUpdateSemantics(t *testing.T) {
	c := newTestCluster(t, 1, 0)
	r := c.leader()
	if _, err := r.PutZone(ctx(t), "example.org.", parseTestZone(t), false); err != nil {
		t.Fatal(err)
	}
	rr := func(s string) dns.RR { return mustRR(t, s) }
	tests := []struct {
		name    string
		prereq  func(m *dns.Msg)
		update  func(m *dns.Msg)
		rcode   int
		serial  uint32 // expected serial after
		present []string
		absent  []string
	}{
		{"add", nil, func(m *dns.Msg) { m.Insert([]dns.RR{rr("a.example.org. 60 IN A 192.0.2.1")}) },
			dns.RcodeSuccess, 2, []string{"a.example.org. A"}, nil},
		{"name in use, missing", func(m *dns.Msg) { m.NameUsed([]dns.RR{rr("nope.example.org. 0 IN A 0.0.0.0")}) },
			func(m *dns.Msg) { m.Insert([]dns.RR{rr("b.example.org. 60 IN A 192.0.2.2")}) },
			dns.RcodeNameError, 2, nil, []string{"b.example.org. A"}},
		{"name not in use, present", func(m *dns.Msg) { m.NameNotUsed([]dns.RR{rr("a.example.org. 0 IN A 0.0.0.0")}) },
			func(m *dns.Msg) { m.Insert([]dns.RR{rr("b.example.org. 60 IN A 192.0.2.2")}) },
			dns.RcodeYXDomain, 2, nil, []string{"b.example.org. A"}},
		{"rrset exists, missing", func(m *dns.Msg) { m.RRsetUsed([]dns.RR{rr("a.example.org. 0 IN TXT \"\"")}) },
			func(m *dns.Msg) { m.Insert([]dns.RR{rr("b.example.org. 60 IN A 192.0.2.2")}) },
			dns.RcodeNXRrset, 2, nil, []string{"b.example.org. A"}},
		{"rrset does not exist, present", func(m *dns.Msg) { m.RRsetNotUsed([]dns.RR{rr("a.example.org. 0 IN A 0.0.0.0")}) },
			func(m *dns.Msg) { m.Insert([]dns.RR{rr("b.example.org. 60 IN A 192.0.2.2")}) },
			dns.RcodeYXRrset, 2, nil, []string{"b.example.org. A"}},
		{"value-dependent mismatch", func(m *dns.Msg) { m.Used([]dns.RR{rr("a.example.org. 0 IN A 192.0.2.99")}) },
			func(m *dns.Msg) { m.Insert([]dns.RR{rr("b.example.org. 60 IN A 192.0.2.2")}) },
			dns.RcodeNXRrset, 2, nil, []string{"b.example.org. A"}},
		{"value-dependent match", func(m *dns.Msg) { m.Used([]dns.RR{rr("a.example.org. 0 IN A 192.0.2.1")}) },
			func(m *dns.Msg) { m.Insert([]dns.RR{rr("b.example.org. 60 IN A 192.0.2.2")}) },
			dns.RcodeSuccess, 3, []string{"b.example.org. A"}, nil},
		{"CNAME beside data is ignored", nil, func(m *dns.Msg) { m.Insert([]dns.RR{rr("a.example.org. 60 IN CNAME www.example.org.")}) },
			dns.RcodeSuccess, 3, []string{"a.example.org. A"}, []string{"a.example.org. CNAME"}},
		{"delete RRset", nil, func(m *dns.Msg) { m.RemoveRRset([]dns.RR{rr("b.example.org. 0 IN A 0.0.0.0")}) },
			dns.RcodeSuccess, 4, nil, []string{"b.example.org. A"}},
		{"delete one RR", nil, func(m *dns.Msg) {
			m.Insert([]dns.RR{rr("a.example.org. 60 IN A 192.0.2.3")})
			m.Remove([]dns.RR{rr("a.example.org. 60 IN A 192.0.2.1")})
		}, dns.RcodeSuccess, 5, []string{"a.example.org. A"}, nil},
		{"delete the apex leaves SOA and NS", nil, func(m *dns.Msg) { m.RemoveName([]dns.RR{rr("example.org. 0 IN A 0.0.0.0")}) },
			dns.RcodeSuccess, 5, []string{"example.org. SOA", "example.org. NS"}, nil},
		{"the last apex NS stays", nil, func(m *dns.Msg) { m.Remove([]dns.RR{rr("example.org. 60 IN NS ns1.example.org.")}) },
			dns.RcodeSuccess, 5, []string{"example.org. NS"}, nil},
		{"explicit newer SOA", nil, func(m *dns.Msg) {
			m.Insert([]dns.RR{rr("example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 100 7200 3600 1209600 300")})
		}, dns.RcodeSuccess, 100, nil, nil},
		{"older SOA ignored", nil, func(m *dns.Msg) {
			m.Insert([]dns.RR{rr("example.org. 300 IN SOA ns1.example.org. hostmaster.example.org. 50 7200 3600 1209600 300")})
		}, dns.RcodeSuccess, 100, nil, nil},
		{"delete name", nil, func(m *dns.Msg) { m.RemoveName([]dns.RR{rr("a.example.org. 0 IN A 0.0.0.0")}) },
			dns.RcodeSuccess, 101, nil, []string{"a.example.org. A"}},
	}
	for _, tc := range tests {
		m := new(dns.Msg)
		m.SetUpdate("example.org.")
		if tc.prereq != nil {
			tc.prereq(m)
		}
		tc.update(m)
		// What a client sends is what arrives: pack and unpack it.
		wire, err := m.Pack()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		in := new(dns.Msg)
		if err := in.Unpack(wire); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rcode, why := CheckUpdate("example.org.", in.Answer, in.Ns); rcode != dns.RcodeSuccess {
			t.Fatalf("%s: expected a well-formed update, got %s: %s", tc.name, dns.RcodeToString[rcode], why)
		}
		rcode, serial, err := r.Update(ctx(t), "example.org.", in.Answer, in.Ns)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rcode != tc.rcode || serial != tc.serial {
			t.Errorf("%s: expected %s serial %d, got %s serial %d", tc.name, dns.RcodeToString[tc.rcode], tc.serial, dns.RcodeToString[rcode], serial)
		}
		if soa := r.Zone("example.org.").SOA(); soa.Serial != tc.serial {
			t.Errorf("%s: expected the served serial %d, got %d", tc.name, tc.serial, soa.Serial)
		}
		for _, want := range tc.present {
			var name, typ string
			splitPair(want, &name, &typ)
			if len(r.Zone("example.org.").RRs(name, dns.StringToType[typ])) == 0 {
				t.Errorf("%s: expected %s present", tc.name, want)
			}
		}
		for _, want := range tc.absent {
			var name, typ string
			splitPair(want, &name, &typ)
			if len(r.Zone("example.org.").RRs(name, dns.StringToType[typ])) != 0 {
				t.Errorf("%s: expected %s absent", tc.name, want)
			}
		}
	}
}

func splitPair(s string, a, b *string) {
	for i := range s {
		if s[i] == ' ' {
			*a, *b = s[:i], s[i+1:]
			return
		}
	}
}

func TestCheckUpdate(t *testing.T) {
	hdr := func(name string, class, t uint16, ttl uint32) dns.RR {
		return &dns.ANY{Hdr: dns.RR_Header{Name: name, Rrtype: t, Class: class, Ttl: ttl}}
	}
	bad := []struct {
		rr     dns.RR
		update bool
		rcode  int
	}{
		{hdr("www.example.net.", dns.ClassANY, dns.TypeA, 0), true, dns.RcodeNotZone},
		{hdr("www.example.net.", dns.ClassANY, dns.TypeANY, 0), false, dns.RcodeNotZone},
		{hdr("www.example.org.", dns.ClassANY, dns.TypeA, 60), false, dns.RcodeFormatError},
		{hdr("www.example.org.", dns.ClassANY, dns.TypeA, 60), true, dns.RcodeFormatError},
		{hdr("www.example.org.", dns.ClassCHAOS, dns.TypeA, 0), true, dns.RcodeFormatError},
		{hdr("www.example.org.", dns.ClassNONE, dns.TypeANY, 0), true, dns.RcodeFormatError},
		{mustRR(t, "www.example.org. 60 IN SOA ns1 h 1 2 3 4 5"), true, dns.RcodeFormatError},
		{mustRR(t, "example.org. 60 IN DNSKEY 257 3 8 AwEAAa=="), true, dns.RcodeNotImplemented},
	}
	for i, tc := range bad {
		var rcode int
		if tc.update {
			rcode, _ = CheckUpdate("example.org.", nil, []dns.RR{tc.rr})
		} else {
			rcode, _ = CheckUpdate("example.org.", []dns.RR{tc.rr}, nil)
		}
		if rcode != tc.rcode {
			t.Errorf("case %d (%v): expected %s, got %s", i, tc.rr, dns.RcodeToString[tc.rcode], dns.RcodeToString[rcode])
		}
	}
}
