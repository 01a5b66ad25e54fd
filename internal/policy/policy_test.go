package policy

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/metadata"

	"github.com/miekg/dns"
)

const example = `{"pools": {"main": {"values": [{"value": "203.0.113.10", "weight": 3}, {"value": "203.0.113.11", "weight": 1}], "ttl": 60, "fallback": "backup"},
           "eu":   {"values": [{"value": "203.0.113.10", "weight": 9}, {"value": "203.0.113.11", "weight": 1}], "ttl": 30},
           "backup": {"values": [{"value": "198.51.100.99"}]}},
 "rules": [{"regions": ["eu"], "pool": "eu"}, {"subnets": ["10.0.0.0/8"], "pool": "backup"}, {"pool": "main"}],
 "count": 1}`

func testRegions(t *testing.T) (*Regions, dns.RR) {
	t.Helper()
	r := new(Regions)
	if err := Decode([]byte(`{"regions": {"eu": ["192.0.2.0/24"], "us": ["198.51.100.0/24"]}}`), r); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	rr, err := RegionsRecord("example.org.", r)
	if err != nil {
		t.Fatal(err)
	}
	return r, rr
}

// testPolicy returns the record of policy text for www.example.org/A.
func testPolicy(t *testing.T, text string, regions *Regions) dns.RR {
	t.Helper()
	p := new(Policy)
	if err := Decode([]byte(text), p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(dns.TypeA, regions); err != nil {
		t.Fatal(err)
	}
	rr, err := Record("www.example.org.", dns.TypeA, p)
	if err != nil {
		t.Fatal(err)
	}
	// As the store keeps it: packed and read back.
	buf := make([]byte, dns.Len(rr)+16)
	n, err := dns.PackRR(rr, buf, 0, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := dns.UnpackRR(buf[:n], 0)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func TestValidate(t *testing.T) {
	regions, _ := testRegions(t)
	tests := []struct {
		name, body, want string
		t                uint16
	}{
		{"negative weight", `{"pools":{"a":{"values":[{"value":"192.0.2.1","weight":-1}]}},"rules":[{"pool":"a"}]}`, "weight -1", dns.TypeA},
		{"all zero without fallback", `{"pools":{"a":{"values":[{"value":"192.0.2.1","weight":0}]}},"rules":[{"pool":"a"}]}`, "every weight is 0", dns.TypeA},
		{"overlap", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]},"b":{"values":[{"value":"192.0.2.2"}]}},
			"rules":[{"subnets":["10.0.0.0/8"],"pool":"a"},{"subnets":["10.1.0.0/16"],"pool":"b"},{"pool":"a"}]}`, "must not overlap", dns.TypeA},
		{"overlap with a region", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]},"b":{"values":[{"value":"192.0.2.2"}]}},
			"rules":[{"regions":["eu"],"pool":"a"},{"subnets":["192.0.2.128/25"],"pool":"b"},{"pool":"a"}]}`, "must not overlap", dns.TypeA},
		{"unknown region", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"regions":["mars"],"pool":"a"},{"pool":"a"}]}`, `region "mars"`, dns.TypeA},
		{"unknown pool", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"b"}]}`, `pool "b" is not`, dns.TypeA},
		{"no default rule", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"subnets":["10.0.0.0/8"],"pool":"a"}]}`, "last rule is the default", dns.TypeA},
		{"default not last", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"},{"pool":"a"}]}`, "only the last rule", dns.TypeA},
		{"fallback loop", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}],"fallback":"b"},"b":{"values":[{"value":"192.0.2.2"}],"fallback":"a"}},"rules":[{"pool":"a"}]}`, "come back", dns.TypeA},
		{"v6 in A", `{"pools":{"a":{"values":[{"value":"2001:db8::1"}]}},"rules":[{"pool":"a"}]}`, "not an IPv4", dns.TypeA},
		{"v4 in AAAA", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "not an IPv6", dns.TypeAAAA},
		{"host bits", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"subnets":["10.0.0.1/8"],"pool":"a"},{"pool":"a"}]}`, "bits set past", dns.TypeA},
		{"MX", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "not MX", dns.TypeMX},
		{"bad status", `{"pools":{"a":{"values":[{"value":"192.0.2.1","status":"maybe"}]}},"rules":[{"pool":"a"}]}`, "status", dns.TypeA},
		{"count", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}],"count":17}`, "count", dns.TypeA},
		{"twice", `{"pools":{"a":{"values":[{"value":"192.0.2.1"},{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "twice", dns.TypeA},
	}
	for _, tc := range tests {
		p := new(Policy)
		err := Decode([]byte(tc.body), p)
		if err == nil {
			err = p.Validate(tc.t, regions)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: expected an error with %q, got %v", tc.name, tc.want, err)
		}
	}
	if err := Decode([]byte(`{"pools":{},"rules":[],"extra":1}`), new(Policy)); err == nil {
		t.Errorf("unknown field: expected an error")
	}
	p := new(Policy)
	if err := Decode([]byte(example), p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(dns.TypeA, regions); err != nil {
		t.Errorf("the issue's example: expected no error, got %v", err)
	}
	if err := p.Validate(dns.TypeA, nil); err == nil {
		t.Errorf("the issue's example without regions: expected an error")
	}
	if d := p.Defaults("www.example.org.", dns.TypeA); len(d) != 2 || d[0].Header().Ttl != 60 {
		t.Errorf("defaults: expected main's two values with TTL 60, got %v", d)
	}
}

// draws counts the answers of n picks for client addr (zero: none).
func draws(t *testing.T, rr, regions dns.RR, addr string, n int) (map[string]int, uint8) {
	t.Helper()
	counts := map[string]int{}
	var scope uint8
	for i := 0; i < n; i++ {
		cl := Client{}
		if addr != "" {
			cl.Addr = netip.MustParseAddr(addr)
		}
		rrs, ok := Pick([]dns.RR{rr}, regions, dns.TypeA, &cl)
		if !ok || !cl.Used || len(rrs) != 1 {
			t.Fatalf("pick %d: expected one answer, got %v (%v)", i, rrs, ok)
		}
		counts[rrs[0].(*dns.A).A.String()]++
		scope = cl.Scope
	}
	return counts, scope
}

// TestPickSplit checks the weighted splits over 4,000 draws. The bounds
// are over 7 standard deviations away: a false failure comes about once
// in 10^12 runs.
func TestPickSplit(t *testing.T) {
	regions, regionsRR := testRegions(t)
	rr := testPolicy(t, example, regions)
	const n = 4000
	c, scope := draws(t, rr, regionsRR, "", n)
	if got := c["203.0.113.10"]; got < 2800 || got > 3200 || c["203.0.113.10"]+c["203.0.113.11"] != n || scope != 0 {
		t.Errorf("default 3:1: expected about 3000 of %d for .10 and scope 0, got %v scope %d", n, c, scope)
	}
	c, scope = draws(t, rr, regionsRR, "192.0.2.77", n)
	if got := c["203.0.113.10"]; got < 3450 || got > 3750 || c["203.0.113.10"]+c["203.0.113.11"] != n || scope != 24 {
		t.Errorf("eu 9:1: expected about 3600 of %d for .10 and scope 24, got %v scope %d", n, c, scope)
	}
	c, scope = draws(t, rr, regionsRR, "10.9.8.7", 100)
	if c["198.51.100.99"] != 100 || scope != 8 {
		t.Errorf("10/8: expected backup always and scope 8, got %v scope %d", c, scope)
	}
	c, scope = draws(t, rr, regionsRR, "2001:db8::1", 100)
	if c["203.0.113.10"]+c["203.0.113.11"] != 100 || scope != 0 {
		t.Errorf("an IPv6 client: expected the default pool and scope 0, got %v scope %d", c, scope)
	}
}

func TestPickFallback(t *testing.T) {
	down := `{"pools": {"main": {"values": [{"value": "203.0.113.10", "status": "down"}, {"value": "203.0.113.11", "status": "down"}], "fallback": "backup"},
		"backup": {"values": [{"value": "198.51.100.99"}]}}, "rules": [{"pool": "main"}]}`
	c, _ := draws(t, testPolicy(t, down, nil), nil, "", 50)
	if c["198.51.100.99"] != 50 {
		t.Errorf("main down: expected the fallback pool, got %v", c)
	}
	allDown := `{"pools": {"main": {"values": [{"value": "203.0.113.10", "status": "down"}], "fallback": "backup"},
		"backup": {"values": [{"value": "198.51.100.99", "status": "down"}]}}, "rules": [{"pool": "main"}]}`
	cl := Client{}
	rrs, ok := Pick([]dns.RR{testPolicy(t, allDown, nil)}, nil, dns.TypeA, &cl)
	if !ok || len(rrs) != 1 || rrs[0].(*dns.A).A.String() != "203.0.113.10" {
		t.Errorf("every pool down: expected the rule's pool whole (fail open), got %v", rrs)
	}
	two := `{"pools": {"main": {"values": [{"value": "203.0.113.10"}, {"value": "203.0.113.11"}, {"value": "203.0.113.12", "weight": 0}]}},
		"rules": [{"pool": "main", "ttl": 5}], "count": 2}`
	for i := 0; i < 50; i++ {
		cl := Client{}
		rrs, _ := Pick([]dns.RR{testPolicy(t, two, nil)}, nil, dns.TypeA, &cl)
		if len(rrs) != 2 || rrs[0].(*dns.A).A.Equal(rrs[1].(*dns.A).A) || rrs[0].Header().Ttl != 5 {
			t.Fatalf("count 2: expected two different values of TTL 5 (never the weight 0 one), got %v", rrs)
		}
		for _, rr := range rrs {
			if rr.(*dns.A).A.String() == "203.0.113.12" {
				t.Fatalf("count 2: a value of weight 0 was drawn while two others were up")
			}
		}
	}
	// Two rules on one pool with TTLs of their own: each answers with its.
	ttls := `{"pools": {"main": {"values": [{"value": "203.0.113.10"}]}},
		"rules": [{"subnets": ["10.0.0.0/8"], "pool": "main", "ttl": 5}, {"subnets": ["192.0.2.0/24"], "pool": "main", "ttl": 7}, {"pool": "main"}]}`
	for addr, want := range map[string]uint32{"10.1.1.1": 5, "192.0.2.1": 7, "198.51.100.1": DefaultTTL} {
		cl := Client{Addr: netip.MustParseAddr(addr)}
		if rrs, _ := Pick([]dns.RR{testPolicy(t, ttls, nil)}, nil, dns.TypeA, &cl); len(rrs) != 1 || rrs[0].Header().Ttl != want {
			t.Errorf("per-rule TTL for %s: expected %d, got %v", addr, want, rrs)
		}
	}
	cl = Client{}
	if _, ok := Pick([]dns.RR{testPolicy(t, two, nil)}, nil, dns.TypeAAAA, &cl); ok || cl.Used {
		t.Errorf("AAAA of an A policy: expected no pick")
	}
}

func TestClientOf(t *testing.T) {
	src := &net.UDPAddr{IP: net.ParseIP("198.51.100.7"), Port: 53}
	q := func(e *dns.EDNS0_SUBNET) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		m.SetEdns0(1232, false)
		if e != nil {
			e.Code = dns.EDNS0SUBNET
			m.IsEdns0().Option = append(m.IsEdns0().Option, e)
		}
		return m
	}
	cl, _, err := ClientOf(q(nil), src)
	if err != nil || cl.Addr.String() != "198.51.100.7" {
		t.Errorf("no ECS: expected the source, got %v %v", cl.Addr, err)
	}
	cl, ecs, err := ClientOf(q(&dns.EDNS0_SUBNET{Family: 1, SourceNetmask: 24, Address: net.ParseIP("192.0.2.0").To4()}), src)
	if err != nil || cl.Addr.String() != "192.0.2.0" || ecs == nil {
		t.Errorf("ECS 192.0.2.0/24: expected its address, got %v %v", cl.Addr, err)
	}
	bad := []*dns.EDNS0_SUBNET{
		{Family: 1, SourceNetmask: 24, Address: net.ParseIP("192.0.2.1").To4()},                 // bits past the prefix
		{Family: 1, SourceNetmask: 24, SourceScope: 8, Address: net.ParseIP("192.0.2.0").To4()}, // a scope in a query
		{Family: 2, SourceNetmask: 129, Address: net.ParseIP("2001:db8::")},
	}
	for i, e := range bad {
		if _, _, err := ClientOf(q(e), src); err != ErrECS {
			t.Errorf("malformed option %d: expected ErrECS, got %v", i, err)
		}
	}
	cl, _, err = ClientOf(q(&dns.EDNS0_SUBNET{Family: 0, SourceNetmask: 0}), src)
	if err != nil || cl.Addr.IsValid() {
		t.Errorf("ECS 0/0: expected no address, got %v %v", cl.Addr, err)
	}
	m := new(dns.Msg)
	m.SetEdns0(1232, false)
	Echo(m, ecs, 16)
	if got := ECS(m); got == nil || got.SourceScope != 16 || got.SourceNetmask != 24 {
		t.Errorf("echo: expected source 24 and scope 16, got %v", got)
	}
}

func TestPickGeo(t *testing.T) {
	geo := `{"pools": {"uk": {"values": [{"value": "192.0.2.44"}]}, "na": {"values": [{"value": "192.0.2.1"}]}, "main": {"values": [{"value": "192.0.2.99"}]}},
		"rules": [{"geos": ["EU-GB-ENG"], "pool": "uk"}, {"geos": ["NA"], "pool": "na"}, {"pool": "main"}]}`
	rr := testPolicy(t, geo, nil)
	at := func(continent, country, subdivisions string) (string, uint8) {
		ctx := metadata.ContextWithMetadata(context.Background())
		for label, v := range map[string]string{geoContinent: continent, geoCountry: country, geoSubdivision: subdivisions} {
			metadata.SetValueFunc(ctx, label, func() string { return v })
		}
		cl := Client{Addr: netip.MustParseAddr("81.2.69.0"), Source: 24, Meta: ctx}
		rrs, ok := Pick([]dns.RR{rr}, nil, dns.TypeA, &cl)
		if !ok || len(rrs) != 1 {
			t.Fatalf("%s-%s: expected one answer, got %v", continent, country, rrs)
		}
		return rrs[0].(*dns.A).A.String(), cl.Scope
	}
	for _, tc := range []struct {
		continent, country, sub, want string
		scope                         uint8
	}{
		{"EU", "GB", "ENG,LND", "192.0.2.44", 24},
		{"EU", "GB", "SCT", "192.0.2.99", 0},
		{"EU", "FR", "", "192.0.2.99", 0},
		{"NA", "US", "CA", "192.0.2.1", 24},
		{"", "", "", "192.0.2.99", 0},
	} {
		if got, scope := at(tc.continent, tc.country, tc.sub); got != tc.want || scope != tc.scope {
			t.Errorf("%s-%s-%s: expected %s scope %d, got %s scope %d", tc.continent, tc.country, tc.sub, tc.want, tc.scope, got, scope)
		}
	}
	p := new(Policy)
	Decode([]byte(`{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"geos":["XX"],"pool":"a"},{"pool":"a"}]}`), p)
	if err := p.Validate(dns.TypeA, nil); err == nil || !strings.Contains(err.Error(), "continent") {
		t.Errorf("geo XX: expected an error, got %v", err)
	}
}
