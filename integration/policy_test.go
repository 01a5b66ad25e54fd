package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// Request-routing policies (issue 53) through two routers in both key
// modes, against one member holding the same zone and policies.

const policyTestZone = `$ORIGIN pol.test.
$TTL 300
@ SOA ns1 hostmaster 1 7200 3600 1209600 60
@ NS ns1
ns1 A 192.0.2.53
www A 192.0.2.10
alias CNAME www
plain A 192.0.2.11
plain AAAA 2001:db8::11
mail MX 10 plain
*.wild A 192.0.2.20
sub NS ns.sub
ns.sub A 192.0.2.54
`

const policyRegions = `{"regions": {"eu": ["192.0.2.0/24"], "us": ["198.51.100.0/24"]}}`

// The issue's policy: 3:1 by default, 9:1 in region eu, backup for 10/8.
const policyIssue = `{"pools": {"main": {"values": [{"value": "203.0.113.10", "weight": 3}, {"value": "203.0.113.11", "weight": 1}], "ttl": 60, "fallback": "backup"},
           "eu":   {"values": [{"value": "203.0.113.10", "weight": 9}, {"value": "203.0.113.11", "weight": 1}], "ttl": 30},
           "backup": {"values": [{"value": "198.51.100.99"}]}},
 "rules": [{"regions": ["eu"], "pool": "eu"}, {"subnets": ["10.0.0.0/8"], "pool": "backup"}, {"pool": "main"}],
 "count": 1}`

// policyQuery asks name/A at addr over one UDP socket conn (nil: a new
// one), with an ECS option for subnet when set.
func policyQuery(conn *dns.Conn, addr, name, subnet string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	if subnet != "" {
		_, n, err := net.ParseCIDR(subnet)
		if err != nil {
			return nil, err
		}
		bits, _ := n.Mask.Size()
		fam, ip := uint16(1), n.IP.To4()
		if ip == nil {
			fam, ip = 2, n.IP
		}
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: fam, SourceNetmask: uint8(bits), Address: ip})
	}
	if conn == nil {
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		r, _, err := c.Exchange(m, addr)
		return r, err
	}
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	r, _, err := c.ExchangeWithConn(m, conn)
	return r, err
}

// split asks name n times at addr and counts the addresses answered; it
// checks every answer's ECS scope against scope (-1: no option).
func split(t *testing.T, addr, name, subnet string, n, scope int) map[string]int {
	t.Helper()
	conn, err := dns.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		r, err := policyQuery(conn, addr, name, subnet)
		if err != nil {
			r, err = policyQuery(nil, addr, name, subnet) // a lost datagram
		}
		if err != nil {
			t.Fatalf("%s at %s: %v", name, addr, err)
		}
		var got []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		if r.Rcode != dns.RcodeSuccess || len(got) != 1 {
			t.Fatalf("%s at %s (ECS %q): expected one address, got\n%v", name, addr, subnet, r)
		}
		e := policy.ECS(r)
		switch {
		case scope < 0 && e != nil:
			t.Fatalf("%s at %s: expected no ECS option, got %v", name, addr, e)
		case scope >= 0 && (e == nil || int(e.SourceScope) != scope):
			t.Fatalf("%s at %s (ECS %q): expected scope %d, got %v", name, addr, subnet, scope, e)
		}
		counts[got[0]]++
	}
	return counts
}

// within reports whether k of n is in [lo, hi] and says so when not.
func within(t *testing.T, what string, counts map[string]int, key string, n, lo, hi int) {
	t.Helper()
	if k := counts[key]; k < lo || k > hi {
		t.Errorf("%s: expected %s %d to %d times of %d, got %v", what, key, lo, hi, n, counts)
	}
}

func TestPolicies(t *testing.T) {
	for _, key := range []string{"name", "zone"} {
		t.Run(key, func(t *testing.T) { testPolicies(t, key) })
	}
}

func testPolicies(t *testing.T, key string) {
	s, ref, refAPI := twoRouters(t, key)
	r0, r1 := s.routers[0].client(), s.routers[1].client()
	putZone(t, refAPI, "pol.test.", policyTestZone)
	putZone(t, r0, "pol.test.", policyTestZone)

	// Refused, nothing written.
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/zones/pol.test./policies/www/A", policyIssue, "region"},
		{"/v1/zones/pol.test./policies/alias/A", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "CNAME"},
		{"/v1/zones/pol.test./policies/sub/A", `{"pools":{"a":{"values":[{"value":"192.0.2.1"}]}},"rules":[{"pool":"a"}]}`, "delegation"},
		{"/v1/zones/pol.test./policies/www/A", `{"pools":{"a":{"values":[{"value":"192.0.2.1","weight":-2}]}},"rules":[{"pool":"a"}]}`, "weight"},
	} {
		var out string
		code, err := r1.Do("PUT", tc.path, json.RawMessage(tc.body), &out)
		if err != nil || code/100 != 4 || !strings.Contains(out, tc.want) {
			t.Errorf("PUT %s through a router: expected a 4xx saying %q, got %d %v %s", tc.path, tc.want, code, err, out)
		}
	}
	var out string
	if code, _ := r0.Do("POST", "/v1/zones/pol.test./records", json.RawMessage(`{"add":["www 60 IN TYPE65380 \\# 2 0001"]}`), &out); code != http.StatusBadRequest {
		t.Errorf("a policy record through /records: expected 400, got %d %s", code, out)
	}

	for _, a := range []harness.API{refAPI, r1} {
		if code, err := a.Do("PUT", "/v1/zones/pol.test./regions", json.RawMessage(policyRegions), &out); err != nil || code != http.StatusOK {
			t.Fatalf("PUT regions at %s: %d %v %s", a.Base, code, err, out)
		}
	}
	for _, a := range []harness.API{refAPI, r0} {
		if code, err := a.Do("PUT", "/v1/zones/pol.test./policies/www/A", json.RawMessage(policyIssue), &out); err != nil || code != http.StatusOK {
			t.Fatalf("PUT policy at %s: %d %v %s", a.Base, code, err, out)
		}
	}

	// The write went to the shard that holds the name, alone.
	var owner []*shardMember
	for _, sh := range s.shards {
		code, _ := s.members[sh][0].client().Do("GET", "/v1/zones/pol.test./policies/www/A", nil, nil)
		if code == http.StatusOK {
			owner = s.members[sh]
		}
	}
	if owner == nil {
		t.Fatalf("no shard holds the policy")
	}

	// The splits, through both routers and from the reference: 4,000
	// draws each, bounds over 7 standard deviations away.
	const n = 4000
	for _, addr := range []string{s.routers[0].addr(), s.routers[1].addr(), ref} {
		c := split(t, addr, "www.pol.test.", "", n, -1)
		within(t, "default 3:1 at "+addr, c, "203.0.113.10", n, 2800, 3200)
		c = split(t, addr, "www.pol.test.", "192.0.2.0/24", n, 24)
		within(t, "eu 9:1 at "+addr, c, "203.0.113.10", n, 3450, 3750)
		c = split(t, addr, "www.pol.test.", "10.20.0.0/16", 50, 8)
		within(t, "10/8 at "+addr, c, "198.51.100.99", 50, 50, 50)
		c = split(t, addr, "alias.pol.test.", "192.0.2.0/25", 400, 24)
		within(t, "a CNAME to it at "+addr, c, "203.0.113.10", 400, 300, 400)
	}

	// Changes reach every member of the shard: a weight change, then
	// every value of the default pool down (its fallback answers).
	change := func(what, body, want string) {
		start := time.Now()
		if code, err := r1.Do("PUT", "/v1/zones/pol.test./policies/www/A", json.RawMessage(body), &out); err != nil || code != http.StatusOK {
			t.Fatalf("%s: PUT %d %v %s", what, code, err, out)
		}
		acked := time.Since(start)
		for _, m := range owner {
			harness.Eventually(t, what+" on "+m.name, 10*time.Second, func() bool {
				c := split(t, m.addr(), "www.pol.test.", "", 20, -1)
				return c[want] == 20
			})
		}
		t.Logf("%s: acknowledged in %v, served by every member of the shard %v after the write began", what, acked.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		for _, addr := range []string{s.routers[0].addr(), s.routers[1].addr()} {
			if c := split(t, addr, "www.pol.test.", "", 20, -1); c[want] != 20 {
				t.Errorf("%s through %s: expected %s always, got %v", what, addr, want, c)
			}
		}
	}
	change("weight change", strings.Replace(policyIssue, `"weight": 3`, `"weight": 0`, 1), "203.0.113.11")
	down := strings.NewReplacer(`"value": "203.0.113.10", "weight": 3`, `"value": "203.0.113.10", "weight": 3, "status": "down"`,
		`"value": "203.0.113.11", "weight": 1}], "ttl": 60`, `"value": "203.0.113.11", "weight": 1, "status": "down"}], "ttl": 60`).Replace(policyIssue)
	change("every value of main down", down, "198.51.100.99")

	// Restarts keep policies.
	for _, m := range owner {
		m.p.Kill()
		m.p.Restart()
	}
	for _, m := range owner {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready), s.procs...)
	}
	for _, m := range owner {
		if c := split(t, m.addr(), "www.pol.test.", "", 20, -1); c["198.51.100.99"] != 20 {
			t.Errorf("after a restart, %s: expected the fallback always, got %v", m.name, c)
		}
	}

	// A policy at the apex, which every shard holds in key mode name:
	// written on every shard at once.
	const apex = `{"pools": {"main": {"values": [{"value": "203.0.113.50"}]}, "ten": {"values": [{"value": "198.51.100.50"}]}},
		"rules": [{"subnets": ["10.0.0.0/8"], "pool": "ten"}, {"pool": "main"}]}`
	for _, a := range []harness.API{refAPI, r1} {
		if code, err := a.Do("PUT", "/v1/zones/pol.test./policies/@/A", json.RawMessage(apex), &out); err != nil || code != http.StatusOK {
			t.Fatalf("PUT apex policy at %s: %d %v %s", a.Base, code, err, out)
		}
	}
	addrs := []string{s.routers[0].addr(), s.routers[1].addr()}
	for _, sh := range s.shards {
		if key == "name" {
			addrs = append(addrs, s.members[sh][0].addr())
		}
	}
	for _, addr := range addrs {
		if c := split(t, addr, "pol.test.", "10.1.0.0/16", 5, 8); c["198.51.100.50"] != 5 {
			t.Errorf("apex policy at %s: expected the 10/8 pool, got %v", addr, c)
		}
	}
	withCheck := strings.Replace(apex, `"rules"`, `"check": {"protocol": "tcp", "port": 443}, "rules"`, 1)
	code, _ := r0.Do("PUT", "/v1/zones/pol.test./policies/@/A", json.RawMessage(withCheck), &out)
	if key == "name" && (code != http.StatusBadRequest || !strings.Contains(out, "health check")) {
		t.Errorf("a checked policy at the apex in key mode name: expected 400, got %d %s", code, out)
	}
	if key == "zone" && code != http.StatusOK {
		t.Errorf("a checked policy at the apex in key mode zone: expected 200, got %d %s", code, out)
	}
	if key == "zone" { // back to the reference's
		if code, err := r0.Do("PUT", "/v1/zones/pol.test./policies/@/A", json.RawMessage(apex), &out); err != nil || code != http.StatusOK {
			t.Fatalf("PUT apex policy: %d %v %s", code, err, out)
		}
	}

	// The same policy at the reference, and every other answer, and the
	// transfers, equal its.
	if code, err := refAPI.Do("PUT", "/v1/zones/pol.test./policies/www/A", json.RawMessage(down), &out); err != nil || code != http.StatusOK {
		t.Fatalf("PUT policy at the reference: %d %v %s", code, err, out)
	}
	var qs []dnsdiff.Query
	for _, name := range []string{"", "www.", "alias.", "plain.", "mail.", "x.wild.", "x.sub.", "nx.", "ns1."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeSOA, dns.TypeNS, policy.TypePolicy} {
			qs = append(qs, dnsdiff.Query{Name: name + "pol.test.", Type: qt})
		}
	}
	diffs := compareWithRef(ref, []string{s.routers[0].addr(), s.routers[1].addr()}, qs, true)
	for addr, d := range diffs {
		if d.differ > 0 {
			t.Errorf("%s: %d of %d answers differ from the single member's:\n%s", addr, d.differ, len(qs), d)
		}
	}
	want := exportText(t, refAPI, "pol.test.")
	for _, r := range s.routers {
		if got := axfrText(t, r.addr(), "pol.test."); got != want {
			t.Errorf("AXFR through %s: expected the reference's\n%s\ngot\n%s", r.name, want, got)
		}
	}
	if strings.Contains(want, "TYPE65380") || !strings.Contains(want, "203.0.113.11") {
		t.Errorf("AXFR: expected the default pool's records and no policy, got\n%s", want)
	}

	// Deleting the apex policy leaves the apex its default pool's record,
	// on every shard.
	if code, err := r0.Do("DELETE", "/v1/zones/pol.test./policies/@/A", nil, &out); err != nil || code != http.StatusOK {
		t.Fatalf("DELETE apex policy: %d %v %s", code, err, out)
	}
	for _, addr := range addrs {
		if c := split(t, addr, "pol.test.", "10.1.0.0/16", 5, -1); c["203.0.113.50"] != 5 {
			t.Errorf("apex policy deleted, at %s: expected the default pool's record and no ECS scope, got %v", addr, c)
		}
	}
	if code, _ := r0.Do("GET", "/v1/zones/pol.test./policies/@/A", nil, &out); code != http.StatusNotFound {
		t.Errorf("GET a deleted apex policy: expected 404, got %d %s", code, out)
	}

	// A malformed ECS option (10.1/8: bits set past the prefix): FORMERR,
	// from the routers and the members.
	for _, addr := range []string{s.routers[0].addr(), owner[0].addr()} {
		m := new(dns.Msg)
		m.SetQuestion("www.pol.test.", dns.TypeA)
		m.SetEdns0(1232, false)
		// Raw: miekg/dns masks the address of an EDNS0_SUBNET it packs.
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: dns.EDNS0SUBNET, Data: []byte{0, 1, 8, 0, 10, 1}})
		r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, addr)
		if err != nil || r.Rcode != dns.RcodeFormatError {
			t.Errorf("ECS 10.1/8 at %s: expected FORMERR, got %v %v", addr, r, err)
		}
	}
}

// axfrText returns the AXFR of origin from addr as rrLines does.
func axfrText(t *testing.T, addr, origin string) string {
	t.Helper()
	rrs, err := axfrIn(addr, origin)
	if err != nil {
		t.Fatalf("AXFR of %s from %s: %v", origin, addr, err)
	}
	return rrLines(rrs)
}

// exportText returns what an AXFR of origin carries from the zone a
// member's API exports: its records without the policies, as rrLines.
func exportText(t *testing.T, a harness.API, origin string) string {
	t.Helper()
	return rrLines(policy.Without(exportOf(t, a, origin)))
}

// rrLines returns rrs without SOA serials, one a line, sorted, each once.
func rrLines(rrs []dns.RR) string {
	var lines []string
	for _, rr := range zeroSerials(rrs) {
		lines = append(lines, rr.String())
	}
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "\n")
}
