package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// zoneKeysReply is a member's GET /v1/zones/{zone}/keys.
type zoneKeysReply struct {
	Zone string
	Set  []byte
	Hash string
}

// TestDNSSECThroughRouter: example.org split by name over two shards of
// three members, behind two routers that sign it. The routers make one
// key set, on both shards in one transaction (each shard's members hold
// the same set), and both give its DS; delv validates, through each
// router, positive, NODATA, NXDOMAIN (compact denial decided over the
// shards), empty non-terminal, wildcard, CNAME, DNAME, insecure and
// secure delegation and key answers from that DS; both routers give the same
// bytes for the same signed answer; a query without DO is unsigned. Then
// a ZSK rollover (24 s lifetime, 6 s waits, steps taken by whichever
// router is first) runs under writes through the routers, delv
// validating new and old names through both routers throughout, until
// the new ZSK signs alone. A transfer through a router is signed too (an
// NSD secondary's answers validate).
func TestDNSSECThroughRouter(t *testing.T) {
	delv := harness.RequireTool(t, "delv")
	wd := harness.Workdir(t)
	writeKEK(t, filepath.Join(wd, "data/kek"))
	spec := routerSpec{zones: []string{"example.org"}, key: "name", transfer: true,
		extra: "        dnssec example.org\n        dnssec_kek data/kek\n        dnssec_zsk_rollover 24s 6s\n"}
	s := startSharded(t, wd, 2, 3, []string{"example.org"}, spec, spec)
	r1, r2 := s.routers[0], s.routers[1]
	text, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/zones/example.org.zone"))
	if err != nil {
		t.Fatal(err)
	}
	// With a DNAME, and a secure delegation: a DS at a cut, imported with
	// the zone.
	text = append(text, "old IN DNAME new.example.org.\na.new IN A 192.0.2.9\n"+
		"secure IN NS ns.secure.example.org.\nns.secure IN A 192.0.2.201\n"+
		"secure IN DS 12345 13 2 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08\n"...)
	if code, err := r1.client().Do("PUT", "/v1/zones/example.org", string(text), nil); err != nil || code/100 != 2 {
		t.Fatalf("importing example.org through router 1: %d %v", code, err)
	}
	ds := waitDS(t, r1.client(), "example.org")
	if other := waitDS(t, r2.client(), "example.org"); strings.Join(other.DS, " ") != strings.Join(ds.DS, " ") {
		t.Fatalf("the routers give different DS: %v and %v", ds.DS, other.DS)
	}
	hash := ""
	for _, sh := range s.shards {
		for _, m := range s.members[sh] {
			var zk zoneKeysReply
			harness.Eventually(t, m.name+"'s key set", 10*time.Second, func() bool {
				code, err := m.client().Do("GET", "/v1/zones/example.org/keys", nil, &zk)
				return err == nil && code == http.StatusOK && zk.Hash != ""
			})
			if hash == "" {
				hash = zk.Hash
			} else if zk.Hash != hash {
				t.Errorf("member %s holds key set %s, another %s", m.name, zk.Hash, hash)
			}
		}
	}
	anchors := trustAnchor(t, wd, ds.DS[0])
	for _, r := range s.routers {
		delvValidates(t, delv, r.addr(), anchors, append(signedQueries[:len(signedQueries):len(signedQueries)],
			[3]string{"secure.example.org", "DS", "; fully validated"}))
		ref := new(dns.Msg)
		ref.SetQuestion("host.secure.example.org.", dns.TypeA)
		ref.SetEdns0(1232, true)
		if resp, err := dns.Exchange(ref, r.addr()); err != nil || !strings.Contains(resp.String(), "RRSIG\tDS") || strings.Contains(resp.String(), "RRSIG\tNS") || strings.Contains(resp.String(), "RRSIG\tA") {
			t.Errorf("a secure referral through %s: the DS signed, the NS and glue not: %v %v", r.name, resp, err)
		}
	}

	// One signed answer, the same bytes from both routers; none without DO.
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"www.example.org.", dns.TypeA}, {"nope.example.org.", dns.TypeA}, {"www.example.org.", dns.TypeTXT},
		{"example.org.", dns.TypeDNSKEY}, {"x.dev.example.org.", dns.TypeA}, {"ftp.example.org.", dns.TypeA},
		{"devices.example.org.", dns.TypeA}, {"host.lab.example.org.", dns.TypeA},
	} {
		var first []byte
		for i, r := range s.routers {
			m := new(dns.Msg)
			m.SetQuestion(q.name, q.qtype)
			m.SetEdns0(4096, true)
			m.Id = 7
			resp, err := dns.Exchange(m, r.addr())
			if err != nil {
				t.Fatalf("%s from %s: %v", q.name, r.name, err)
			}
			b, _ := resp.Pack()
			if i == 0 {
				first = b
				if resp.Rcode != dns.RcodeSuccess || (resp.Authoritative && !strings.Contains(resp.String(), "RRSIG")) {
					t.Errorf("%s %s: %s, unsigned or not NOERROR: %v", q.name, dns.TypeToString[q.qtype], r.name, resp)
				}
			} else if string(b) != string(first) {
				t.Errorf("%s %s: %s's signed answer differs from router1's:\n%v", q.name, dns.TypeToString[q.qtype], r.name, resp)
			}
		}
	}
	plain := new(dns.Msg)
	plain.SetQuestion("nope.example.org.", dns.TypeA)
	plain.SetEdns0(4096, false)
	if resp, err := dns.Exchange(plain, r1.addr()); err != nil || resp.Rcode != dns.RcodeNameError || strings.Contains(resp.String(), "RRSIG") || strings.Contains(resp.String(), "NSEC") {
		t.Errorf("a query without DO: %v %v", err, resp)
	}

	// The zone transferred through a router goes out signed, merged from
	// the shards: an NSD secondary serves it validated.
	axfr := digXFR(t, r1.dns, "example.org.", "AXFR")
	kinds := map[uint16]int{}
	for _, rr := range axfr {
		kinds[rr.Header().Rrtype]++
	}
	if kinds[dns.TypeRRSIG] == 0 || kinds[dns.TypeNSEC] == 0 || kinds[dns.TypeDNSKEY] != 2 {
		t.Errorf("the AXFR through the router is not signed: %v", kinds)
	}
	nsd := dnsdiff.StartNSDSecondary(t, "example.org.", r1.addr(), harness.ListenPort(t))
	delvValidates(t, delv, nsd.Addr, anchors, [][3]string{
		{"www.example.org", "A", "; fully validated"},
		{"www.example.org", "MX", "; negative response, fully validated"},
		{"nope.example.org", "A", "; negative response, fully validated"},
		{"host.dev.example.org", "A", "; fully validated"},
		{"example.org", "DNSKEY", "; fully validated"},
	})

	// A ZSK rollover under writes, validated throughout.
	zsks := func(addr string) (signing uint16, dnskeys int) {
		m := new(dns.Msg)
		m.SetQuestion("example.org.", dns.TypeDNSKEY)
		m.SetEdns0(4096, true)
		resp, err := dns.Exchange(m, addr)
		if err != nil {
			t.Fatalf("DNSKEY from %s: %v", addr, err)
		}
		for _, rr := range resp.Answer {
			if _, ok := rr.(*dns.DNSKEY); ok {
				dnskeys++
			}
		}
		a := new(dns.Msg)
		a.SetQuestion("www.example.org.", dns.TypeA)
		a.SetEdns0(4096, true)
		if resp, err = dns.Exchange(a, addr); err != nil {
			t.Fatalf("www from %s: %v", addr, err)
		}
		for _, rr := range resp.Answer {
			if sig, ok := rr.(*dns.RRSIG); ok {
				signing = sig.KeyTag
			}
		}
		return signing, dnskeys
	}
	firstZSK, _ := zsks(r1.addr())
	sawThree := false
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no ZSK rollover in 90 s (first ZSK %d, three keys seen %v)", firstZSK, sawThree)
		}
		name := fmt.Sprintf("roll%d.example.org", i)
		r := s.routers[i%2]
		if code, err := r.client().Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + ". 60 IN A 192.0.2.80"}}, nil); err != nil || code != http.StatusOK {
			t.Fatalf("adding %s through %s: %d %v", name, r.name, code, err)
		}
		for _, r := range s.routers {
			delvValidates(t, delv, r.addr(), anchors, [][3]string{
				{name, "A", "; fully validated"},
				{"roll" + fmt.Sprint(i) + "x.example.org", "A", "; negative response, fully validated"},
				{"www.example.org", "MX", "; negative response, fully validated"},
				{"example.org", "DNSKEY", "; fully validated"},
			})
		}
		if t.Failed() {
			t.FailNow()
		}
		signing, n := zsks(r1.addr())
		sawThree = sawThree || n == 3
		if signing != firstZSK && n == 2 && sawThree {
			t.Logf("ZSK %d replaced by %d after %d writes", firstZSK, signing, i+1)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
}
