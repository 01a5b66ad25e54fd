package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/ede"

	"github.com/miekg/dns"
)

// Changes whose names span shards are transactions (issue 28): through
// either router, an RFC 2136 UPDATE or an API record change is applied on
// every shard it touches, or on none.

// namesOn returns n names of zone origin that shard holds, by the router's
// ring, each made of prefix and a number.
func namesOn(t *testing.T, s *sharded, origin, shard, prefix string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 1000; i++ {
		name := fmt.Sprintf("%s%d.%s", prefix, i, origin)
		var o struct{ Owner string }
		if code, err := s.routers[0].client().Do("GET", "/v1/shards?name="+name, nil, &o); err != nil || code != http.StatusOK {
			t.Fatalf("GET /v1/shards?name=%s: %d %v", name, code, err)
		}
		if o.Owner == shard {
			out = append(out, name)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d names on shard %s", len(out), shard)
	}
	return out
}

// aEverywhere reports what every router and every member of shard (which
// holds name) answer for name A: "present", "absent" or the differing
// answers.
func (s *sharded) aEverywhere(t *testing.T, shard, name string) string {
	t.Helper()
	seen := map[string][]string{}
	var addrs []string
	var who []string
	for _, r := range s.routers {
		addrs, who = append(addrs, r.addr()), append(who, r.name)
	}
	for _, m := range s.members[shard] {
		addrs, who = append(addrs, m.addr()), append(who, m.name)
	}
	for i, addr := range addrs {
		m, err := harness.Query(addr, name, dns.TypeA)
		v := "error"
		switch {
		case err != nil:
		case m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0:
			v = "present"
		case m.Rcode == dns.RcodeNameError || m.Rcode == dns.RcodeSuccess:
			v = "absent"
		default:
			v = dns.RcodeToString[m.Rcode]
		}
		seen[v] = append(seen[v], who[i])
	}
	if len(seen) == 1 {
		for v := range seen {
			return v
		}
	}
	return fmt.Sprint(seen)
}

func TestRoutersCrossShardChanges(t *testing.T) {
	s, _, _ := twoRouters(t, "name")
	const origin = "tx.test."
	putZone(t, s.routers[0].client(), origin, smallZone(origin, 4))
	onA := namesOn(t, s, origin, "a", "x", 6)
	onB := namesOn(t, s, origin, "b", "x", 6)
	update := func(r *router, build func(u *dns.Msg)) *dns.Msg {
		t.Helper()
		u := new(dns.Msg)
		u.SetUpdate(origin)
		build(u)
		u.SetEdns0(1232, false)
		resp, err := exchangeUpdate(u, "tcp", r.addr())
		if err != nil {
			t.Fatalf("UPDATE through %s: %v", r.name, err)
		}
		return resp
	}
	a := func(name, ip string) dns.RR { return mustRR(t, name+" 60 IN A "+ip) }
	shardOf := map[string]string{}
	for _, n := range onA {
		shardOf[n] = "a"
	}
	for _, n := range onB {
		shardOf[n] = "b"
	}
	expect := func(what string, want string, names ...string) {
		t.Helper()
		for _, n := range names {
			if got := s.aEverywhere(t, shardOf[n], n); got != want {
				t.Errorf("%s: %s: expected %s everywhere, got %s", what, n, want, got)
			}
		}
	}

	// An UPDATE over both shards, through each router.
	for i, r := range s.routers {
		resp := update(r, func(u *dns.Msg) { u.Insert([]dns.RR{a(onA[i], "192.0.2.1"), a(onB[i], "192.0.2.2")}) })
		if resp.Rcode != dns.RcodeSuccess {
			t.Fatalf("UPDATE over two shards through %s: %s %v", r.name, dns.RcodeToString[resp.Rcode], ede.Of(resp))
		}
		expect("after an UPDATE over two shards", "present", onA[i], onB[i])
	}
	// A prerequisite that fails on one shard: nothing written on the other.
	resp := update(s.routers[0], func(u *dns.Msg) {
		u.NameUsed([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: onB[5], Rrtype: dns.TypeANY, Class: dns.ClassANY}}})
		u.Insert([]dns.RR{a(onA[2], "192.0.2.3"), a(onB[2], "192.0.2.4")})
	})
	if e := ede.Of(resp); resp.Rcode != dns.RcodeNameError || e == nil || !strings.Contains(e.ExtraText, "nothing was written") {
		t.Errorf("a prerequisite failing on shard b: expected NXDOMAIN with an Extended DNS Error, got %s %v", dns.RcodeToString[resp.Rcode], e)
	}
	expect("after a failed prerequisite", "absent", onA[2], onB[2])
	// Prerequisites that hold on both shards, with a deletion.
	resp = update(s.routers[1], func(u *dns.Msg) {
		u.NameUsed([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: onA[0], Rrtype: dns.TypeANY, Class: dns.ClassANY}}})
		u.NameNotUsed([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: onB[3], Rrtype: dns.TypeANY, Class: dns.ClassNONE}}})
		u.RemoveName([]dns.RR{a(onA[0], "0.0.0.0")})
		u.Insert([]dns.RR{a(onB[3], "192.0.2.5")})
	})
	if resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("a move from shard a to shard b: %s %v", dns.RcodeToString[resp.Rcode], ede.Of(resp))
	}
	expect("after a move", "absent", onA[0])
	expect("after a move", "present", onB[3])
	// The apex is on every shard: an UPDATE of it with a name on one shard.
	resp = update(s.routers[0], func(u *dns.Msg) {
		u.Insert([]dns.RR{mustRR(t, origin+" 60 IN TXT \"v=1\""), a(onA[4], "192.0.2.6")})
	})
	if resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("an UPDATE of the apex: %s %v", dns.RcodeToString[resp.Rcode], ede.Of(resp))
	}
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			if r, err := harness.Query(m.addr(), origin, dns.TypeTXT); err != nil || len(r.Answer) != 1 {
				t.Errorf("the apex TXT on %s: %v %v", m.name, r, err)
			}
		}
	}
	// Names outside the zone, and an unsigned UPDATE: refused, nothing written.
	out := new(dns.Msg)
	out.SetUpdate(origin)
	out.Insert([]dns.RR{a(onA[5], "192.0.2.7"), a("www.example.net.", "192.0.2.8")})
	out.SetEdns0(1232, false)
	if resp, err := exchangeUpdate(out, "tcp", s.routers[0].addr()); err != nil || resp.Rcode != dns.RcodeNotZone || ede.Of(resp) == nil {
		t.Errorf("a name outside the zone: expected NOTZONE with an Extended DNS Error, got %v %v", resp, err)
	}
	unsigned := new(dns.Msg)
	unsigned.SetUpdate(origin)
	unsigned.Insert([]dns.RR{a(onA[5], "192.0.2.7"), a(onB[5], "192.0.2.8")})
	unsigned.SetEdns0(1232, false)
	if resp, _, err := (&dns.Client{Net: "tcp"}).Exchange(unsigned, s.routers[0].addr()); err != nil || resp.Rcode != dns.RcodeRefused || ede.Of(resp) == nil {
		t.Errorf("an unsigned UPDATE: expected REFUSED with an Extended DNS Error, got %v %v", resp, err)
	}
	// Wrongly signed: the tsig plugin answers NOTAUTH with the TSIG error
	// BADSIG (RFC 8945 §5.2).
	bad := new(dns.Msg)
	bad.SetUpdate(origin)
	bad.Insert([]dns.RR{a(onA[5], "192.0.2.7"), a(onB[5], "192.0.2.8")})
	bad.SetTsig(updateKey, dns.HmacSHA256, 300, time.Now().Unix())
	wrong := &dns.Client{Net: "tcp", TsigSecret: map[string]string{updateKey: "d3Jvbmcgc2VjcmV0IGZvciB0aGUgdGVzdA=="}}
	if resp, _, _ := wrong.Exchange(bad, s.routers[1].addr()); resp == nil || resp.Rcode != dns.RcodeNotAuth {
		t.Errorf("a wrongly signed UPDATE: expected NOTAUTH, got %v", resp)
	}
	expect("after refused UPDATEs", "absent", onA[5], onB[5])

	// The API: a change over both shards, and one that a shard refuses.
	post := func(r *router, body map[string]any) (int, string) {
		var out struct{ Error string }
		code, err := r.client().Do("POST", "/v1/zones/"+origin+"/records", body, &out)
		if err != nil {
			t.Fatal(err)
		}
		return code, out.Error
	}
	if code, msg := post(s.routers[1], map[string]any{"add": []string{onA[2] + " 60 IN A 192.0.2.9", onB[2] + " 60 IN A 192.0.2.9"}}); code != http.StatusOK {
		t.Fatalf("an API change over two shards: %d %s", code, msg)
	}
	expect("after an API change over two shards", "present", onA[2], onB[2])
	// A CNAME beside data on shard b: 409, and nothing written on shard a.
	code, msg := post(s.routers[0], map[string]any{"add": []string{onA[5] + " 60 IN A 192.0.2.10", onB[2] + " 60 IN CNAME " + onA[5]}})
	if code != http.StatusConflict || !strings.Contains(msg, "nothing was written") {
		t.Errorf("a CNAME beside data through the API: expected 409 saying nothing was written, got %d %s", code, msg)
	}
	expect("after a refused API change", "absent", onA[5])
	// Deleting the apex NS RRset with a name on another shard: 400, nothing
	// written. Through UPDATE, RFC 2136 has the deletion of the apex SOA
	// and NS ignored and the rest applied, as on one server.
	code, msg = post(s.routers[0], map[string]any{"add": []string{onA[5] + " 60 IN A 192.0.2.10"},
		"delete": []any{map[string]string{"name": origin, "type": "NS"}}})
	if code != http.StatusBadRequest || !strings.Contains(msg, "nothing was written") {
		t.Errorf("deleting the apex NS through the API: expected 400 saying nothing was written, got %d %s", code, msg)
	}
	expect("after a refused apex deletion", "absent", onA[5])
	resp = update(s.routers[1], func(u *dns.Msg) {
		u.RemoveRRset([]dns.RR{&dns.NS{Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeNS, Class: dns.ClassINET}}})
		u.RemoveRRset([]dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET}}})
		u.Insert([]dns.RR{a(onB[4], "192.0.2.11")})
	})
	if resp.Rcode != dns.RcodeSuccess {
		t.Errorf("an UPDATE deleting the apex SOA and NS: expected NOERROR (ignored), got %s %v", dns.RcodeToString[resp.Rcode], ede.Of(resp))
	}
	expect("after an UPDATE deleting the apex SOA and NS", "present", onB[4])
	for _, r := range s.routers {
		for _, qt := range []uint16{dns.TypeSOA, dns.TypeNS} {
			if m, err := harness.Query(r.addr(), origin, qt); err != nil || len(m.Answer) == 0 {
				t.Errorf("the apex %s through %s after an UPDATE deleting it: %v %v", dns.TypeToString[qt], r.name, m, err)
			}
		}
	}

	// The SOA through UPDATE: an older serial is ignored, a newer one taken
	// by every shard.
	serial := func() uint32 {
		t.Helper()
		var got []uint32
		for _, r := range s.routers {
			m, err := harness.Query(r.addr(), origin, dns.TypeSOA)
			if err != nil || len(m.Answer) != 1 {
				t.Fatalf("SOA through %s: %v %v", r.name, m, err)
			}
			got = append(got, m.Answer[0].(*dns.SOA).Serial)
		}
		if got[0] != got[1] {
			t.Fatalf("the routers present serials %v", got)
		}
		return got[0]
	}
	soa := func(n uint32) dns.RR {
		return mustRR(t, fmt.Sprintf("%s 300 IN SOA ns1.%s hostmaster.%s %d 7200 3600 1209600 60", origin, origin, origin, n))
	}
	before := serial()
	if resp := update(s.routers[0], func(u *dns.Msg) { u.Insert([]dns.RR{soa(1)}) }); resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("an older SOA: %s", dns.RcodeToString[resp.Rcode])
	}
	if got := serial(); got != before {
		t.Errorf("an older SOA through UPDATE: expected serial %d kept, got %d", before, got)
	}
	if resp := update(s.routers[1], func(u *dns.Msg) { u.Insert([]dns.RR{soa(5000)}) }); resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("a newer SOA: %s", dns.RcodeToString[resp.Rcode])
	}
	if got := serial(); got != 5000 {
		t.Errorf("a newer SOA through UPDATE: expected serial 5000, got %d", got)
	}
}
