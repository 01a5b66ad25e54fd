package craftstore

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

const policyZone = apiZone + `alias IN CNAME www
child IN NS ns.child
ns.child IN A 192.0.2.99
`

const issuePolicy = `{"pools": {"main": {"values": [{"value": "203.0.113.10", "weight": 3}, {"value": "203.0.113.11", "weight": 1}], "ttl": 60, "fallback": "backup"},
           "eu":   {"values": [{"value": "203.0.113.10", "weight": 9}, {"value": "203.0.113.11", "weight": 1}], "ttl": 30},
           "backup": {"values": [{"value": "198.51.100.99"}]}},
 "rules": [{"regions": ["eu"], "pool": "eu"}, {"subnets": ["10.0.0.0/8"], "pool": "backup"}, {"pool": "main"}],
 "count": 1}`

// ask sends a query for qname/A from src to cs, with an ECS option for
// subnet when it is set.
func ask(t *testing.T, cs *Craftstore, qname, src, subnet string) *dns.Msg {
	t.Helper()
	r := new(dns.Msg)
	r.SetQuestion(qname, dns.TypeA)
	r.SetEdns0(1232, false)
	if subnet != "" {
		_, n, err := net.ParseCIDR(subnet)
		if err != nil {
			t.Fatal(err)
		}
		bits, _ := n.Mask.Size()
		e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(bits), Address: n.IP.To4()}
		r.IsEdns0().Option = append(r.IsEdns0().Option, e)
	}
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: src})
	if _, err := cs.ServeDNS(context.Background(), rec, r); err != nil {
		t.Fatal(err)
	}
	buf, err := rec.Msg.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(buf); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPolicyAPI(t *testing.T) {
	a, rep := newAPI(t, "")
	rrs, err := zoneapi.ParseZone("example.org.", policyZone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rep.PutZone(context.Background(), "example.org.", rrs, false); err != nil {
		t.Fatal(err)
	}
	cs := &Craftstore{Zones: []string{"org."}}
	cs.rep.Store(rep)

	// Refusals, nothing written.
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/zones/example.org/policies/www/A", issuePolicy, `region \"eu\" is not in the zone's region table`},
		{"/v1/zones/example.org/policies/alias/A", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "holds a CNAME"},
		{"/v1/zones/example.org/policies/child/A", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "is a delegation"},
		{"/v1/zones/example.org/policies/x.child/A", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "below the delegation"},
		{"/v1/zones/example.org/policies/www/MX", `{}`, "policies answer A and AAAA"},
		{"/v1/zones/example.org/policies/www/A", `{"pools":{"a":{"values":[{"value":"192.0.2.1","weight":0}]}},"rules":[{"pool":"a"}]}`, "every weight is 0"},
	} {
		code, _, raw := call(t, a, "", "PUT", tc.path, tc.body)
		if code/100 != 4 || !strings.Contains(raw, tc.want) {
			t.Errorf("PUT %s: expected a 4xx with %q, got %d %s", tc.path, tc.want, code, raw)
		}
	}
	if serial, _, _ := rep.Zone("example.org.").Serial(); serial != 1 {
		t.Fatalf("refused writes: expected serial 1, got %d", serial)
	}
	code, _, raw := call(t, a, "", "POST", "/v1/zones/example.org/records", `{"add":["www 60 IN TYPE65380 \\# 2 0001"]}`)
	if code != 400 || !strings.Contains(raw, "policies") {
		t.Errorf("a policy record through /records: expected 400, got %d %s", code, raw)
	}

	code, _, raw = call(t, a, "", "PUT", "/v1/zones/example.org/regions", `{"regions": {"eu": ["192.0.2.0/24"], "us": ["198.51.100.0/24"]}}`)
	if code != 200 {
		t.Fatalf("PUT regions: expected 200, got %d %s", code, raw)
	}
	code, out, raw := call(t, a, "", "PUT", "/v1/zones/example.org/policies/www/A", issuePolicy)
	if code != 200 || out["serial"] != float64(3) {
		t.Fatalf("PUT policy: expected 200 serial 3, got %d %s", code, raw)
	}
	// An IXFR from before the policy: the records that changed, the
	// default pool's, and no policy or region table.
	ch, err := cs.Transfer("example.org.", 1)
	if err != nil {
		t.Fatal(err)
	}
	var ixfr []string
	for _, rr := range drain(ch) {
		if policy.Reserved(rr.Header().Rrtype) {
			t.Errorf("IXFR: a policy record: %v", rr)
		}
		ixfr = append(ixfr, rr.String())
	}
	if got := strings.Join(ixfr, "\n"); !strings.Contains(got, "203.0.113.11") || !strings.Contains(got, "192.0.2.10") || len(ixfr) != 9 {
		t.Errorf("IXFR from serial 1: expected SOA 3; SOA 1, SOA 2 (the region table's change, left out); SOA 2, the deleted www A, SOA 3, the pool's two added; SOA 3 (9 records), got\n%s", got)
	}
	code, _, raw = call(t, a, "", "GET", "/v1/zones/example.org/policies/www.example.org./a", "")
	if code != 200 || !strings.Contains(raw, `"fallback":"backup"`) {
		t.Errorf("GET policy: expected it back, got %d %s", code, raw)
	}

	// Answers: the region's pool with its scope, the subnet's, the default.
	counts := map[string]int{}
	for i := 0; i < 400; i++ {
		m := ask(t, cs, "www.example.org.", "198.51.100.7", "192.0.2.0/24")
		if len(m.Answer) != 1 {
			t.Fatalf("eu: expected one answer, got %v", m)
		}
		if e := policy.ECS(m); e == nil || e.SourceScope != 24 || e.SourceNetmask != 24 {
			t.Fatalf("eu: expected ECS scope 24, got %v", e)
		}
		if m.Answer[0].Header().Ttl != 30 {
			t.Fatalf("eu: expected the pool's TTL 30, got %v", m.Answer[0])
		}
		counts[m.Answer[0].(*dns.A).A.String()]++
	}
	if counts["203.0.113.10"] < 300 { // 360 expected, sd 6
		t.Errorf("eu 9:1: expected about 360 of 400 for .10, got %v", counts)
	}
	m := ask(t, cs, "www.example.org.", "10.1.2.3", "")
	if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "198.51.100.99" || policy.ECS(m) != nil {
		t.Errorf("10/8 by its source, no ECS: expected backup and no ECS option, got %v", m)
	}
	m = ask(t, cs, "alias.example.org.", "10.1.2.3", "10.0.0.0/16")
	if len(m.Answer) != 2 || m.Answer[1].(*dns.A).A.String() != "198.51.100.99" {
		t.Errorf("a CNAME to the policy name: expected the chain to backup, got %v", m)
	} else if e := policy.ECS(m); e == nil || e.SourceScope != 8 {
		t.Errorf("a CNAME to the policy name: expected scope 8, got %v", e)
	}
	m = ask(t, cs, "ns1.example.org.", "10.1.2.3", "10.0.0.0/16")
	if len(m.Answer) != 1 || policy.ECS(m) != nil {
		t.Errorf("a name without a policy: expected its record and no ECS option, got %v", m)
	}

	// The private type is not for clients, nor in transfers.
	r := new(dns.Msg)
	r.SetQuestion("www.example.org.", policy.TypePolicy)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	cs.ServeDNS(context.Background(), rec, r)
	if rec.Msg.Rcode != dns.RcodeSuccess || len(rec.Msg.Answer) != 0 {
		t.Errorf("TYPE65380: expected NODATA, got %v", rec.Msg)
	}
	ch, err = cs.Transfer("example.org.", 0)
	if err != nil {
		t.Fatal(err)
	}
	var www []string
	for _, rr := range drain(ch) {
		if policy.Reserved(rr.Header().Rrtype) {
			t.Errorf("AXFR: a policy record: %v", rr)
		}
		if rr.Header().Name == "www.example.org." {
			www = append(www, rr.String())
		}
	}
	if len(www) != 2 || !strings.Contains(strings.Join(www, " "), "203.0.113.11") {
		t.Errorf("AXFR: expected the default pool's two records at www, got %v", www)
	}

	// A malformed ECS option: FORMERR.
	bad := new(dns.Msg)
	bad.SetQuestion("www.example.org.", dns.TypeA)
	bad.SetEdns0(1232, false)
	bad.IsEdns0().Option = append(bad.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 16, Address: net.ParseIP("10.1.2.3").To4()})
	rec = dnstest.NewRecorder(&test.ResponseWriter{})
	cs.ServeDNS(context.Background(), rec, bad)
	if rec.Msg.Rcode != dns.RcodeFormatError {
		t.Errorf("ECS 10.1.2.3/16: expected FORMERR, got %v", rec.Msg)
	}

	code, _, raw = call(t, a, "", "DELETE", "/v1/zones/example.org/policies/www/A", "")
	if code != 200 {
		t.Fatalf("DELETE policy: expected 200, got %d %s", code, raw)
	}
	m = ask(t, cs, "www.example.org.", "10.1.2.3", "10.0.0.0/16")
	if len(m.Answer) != 2 || policy.ECS(m) != nil {
		t.Errorf("after DELETE: expected the default pool's records and no ECS option, got %v", m)
	}
	code, _, _ = call(t, a, "", "DELETE", "/v1/zones/example.org/policies/www/A", "")
	if code != 404 {
		t.Errorf("DELETE again: expected 404, got %d", code)
	}
}
