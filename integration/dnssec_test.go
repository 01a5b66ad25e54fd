package integration

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// dsReply is GET /v1/zones/{zone}/ds.
type dsReply struct {
	Zone   string
	DS     []string
	DNSKEY []string
}

// writeKEK makes a key-encryption key file as make run-dnssec does.
func writeKEK(t *testing.T, path string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	var key [32]byte
	rand.Read(key[:])
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitDS waits for a signed zone's keys and returns its DS and DNSKEYs.
func waitDS(t *testing.T, api harness.API, zone string) dsReply {
	t.Helper()
	var ds dsReply
	harness.Eventually(t, zone+"'s DS", 30*time.Second, func() bool {
		code, err := api.Do("GET", "/v1/zones/"+zone+"/ds", nil, &ds)
		return err == nil && code == http.StatusOK && len(ds.DS) > 0
	})
	return ds
}

// trustAnchor writes a delv trust anchor file for the DS record ds.
func trustAnchor(t *testing.T, dir, ds string) string {
	t.Helper()
	rr, err := dns.NewRR(ds)
	if err != nil {
		t.Fatal(err)
	}
	d := rr.(*dns.DS)
	path := filepath.Join(dir, "anchors.conf")
	os.WriteFile(path, fmt.Appendf(nil, "trust-anchors {\n  %s static-ds %d %d %d \"%s\";\n};\n",
		d.Hdr.Name, d.KeyTag, d.Algorithm, d.DigestType, d.Digest), 0o644)
	return path
}

// delvValidates runs delv against addr for each query and checks what it
// says: validated, never bogus or unsigned.
func delvValidates(t *testing.T, delv, addr, anchors string, queries [][3]string) {
	t.Helper()
	host, port := strings.Split(addr, ":")[0], strings.Split(addr, ":")[1]
	for _, q := range queries {
		out, _ := exec.Command(delv, "@"+host, "-p", port, "-a", anchors, "+root=example.org", "+nocrypto", q[0], q[1]).CombinedOutput()
		s := string(out)
		if !strings.Contains(s, q[2]) || strings.Contains(s, "bogus") || strings.Contains(s, "unsigned") || strings.Contains(s, "insecure") {
			t.Errorf("delv %s %s at %s: expected %q, got:\n%s", q[0], q[1], addr, q[2], s)
		}
	}
}

// signedQueries are the example zone's answers delv must validate:
// positive, NODATA, NXDOMAIN (RFC 9824's compact denial), an empty
// non-terminal, a wildcard's, a CNAME's and a DNAME's, the denial of the
// DS of an insecure delegation, the zone's keys and CDS.
var signedQueries = [][3]string{
	{"www.example.org", "A", "; fully validated"},
	{"www.example.org", "MX", "; negative response, fully validated"},
	{"nope.example.org", "A", "; negative response, fully validated"},
	{"devices.example.org", "A", "; negative response, fully validated"},
	{"host.dev.example.org", "A", "; fully validated"},
	{"host.dev.example.org", "TXT", "; negative response, fully validated"},
	{"ftp.example.org", "A", "; fully validated"},
	{"a.old.example.org", "A", "; fully validated"},
	{"lab.example.org", "DS", "; negative response, fully validated"},
	{"example.org", "DNSKEY", "; fully validated"},
	{"example.org", "CDS", "; fully validated"},
	{"example.org", "SOA", "; fully validated"},
}

// TestDNSSECExample runs Corefile.examples/dnssec.Corefile (make
// run-dnssec): the member makes the zone's keys, commits them, gives the DS
// through its API, and BIND's delv validates its answers from that DS
// (signedQueries), after a write too and after a restart (the same keys).
// A query without DO gets the unsigned answer (NXDOMAIN stays NXDOMAIN);
// the apex's DNSKEY RRset is served either way. DNSSEC records written
// through the API are refused; a member whose key-encryption key file is
// missing, readable by others or not a key does not start and names it.
func TestDNSSECExample(t *testing.T) {
	delv := harness.RequireTool(t, "delv")
	wd := harness.Workdir(t)
	writeKEK(t, filepath.Join(wd, "data/dnssec/kek"))
	p := harness.Start(t, "dnssec", wd, "Corefile.examples/dnssec.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8393/ready", p)
	api := harness.API{Base: "http://127.0.0.1:8093"}
	ds := waitDS(t, api, "example.org")
	if len(ds.DS) != 1 || len(ds.DNSKEY) != 2 {
		t.Fatalf("a KSK and a ZSK expected: %+v", ds)
	}
	anchors := trustAnchor(t, wd, ds.DS[0])
	if code, err := api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{
		"old.example.org. 300 IN DNAME new.example.org.", "a.new.example.org. 300 IN A 192.0.2.9"}}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("adding a DNAME: %d %v", code, err)
	}
	delvValidates(t, delv, "127.0.0.1:1093", anchors, signedQueries)

	// A secure delegation: a DS at a cut comes with the zone (an import;
	// a change of one DNSSEC record is refused), signed by the parent.
	zoneText, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/zones/example.org.zone"))
	if err != nil {
		t.Fatal(err)
	}
	zoneText = append(zoneText, "secure IN NS ns.secure.example.org.\nns.secure IN A 192.0.2.201\n"+
		"secure IN DS 12345 13 2 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08\n"...)
	if code, err := api.Do("PUT", "/v1/zones/example.org", string(zoneText), nil); err != nil || code != http.StatusOK {
		t.Fatalf("PUT of the zone with a DS: %d %v", code, err)
	}
	delvValidates(t, delv, "127.0.0.1:1093", anchors, [][3]string{
		{"secure.example.org", "DS", "; fully validated"},
		{"lab.example.org", "DS", "; negative response, fully validated"},
	})
	ref := new(dns.Msg)
	ref.SetQuestion("host.secure.example.org.", dns.TypeA)
	ref.SetEdns0(1232, true)
	if r, err := dns.Exchange(ref, "127.0.0.1:1093"); err != nil || !strings.Contains(r.String(), "RRSIG\tDS") || strings.Contains(r.String(), "RRSIG\tNS") || strings.Contains(r.String(), "RRSIG\tA") {
		t.Errorf("a secure referral: the DS signed, the NS and glue not: %v %v", r, err)
	}

	// A name written now: its new RRset is signed.
	if code, err := api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"new1.example.org. 60 IN A 192.0.2.11"}}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("a write: %d %v", code, err)
	}
	delvValidates(t, delv, "127.0.0.1:1093", anchors, [][3]string{{"new1.example.org", "A", "; fully validated"}})

	// Without DO: no signatures, NXDOMAIN; the keys at the apex.
	m := new(dns.Msg)
	m.SetQuestion("nope.example.org.", dns.TypeA)
	r, err := dns.Exchange(m, "127.0.0.1:1093")
	if err != nil || r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Errorf("NXDOMAIN without DO: %v %v", r, err)
	}
	m.SetQuestion("www.example.org.", dns.TypeA)
	m.SetEdns0(1232, false)
	if r, err = dns.Exchange(m, "127.0.0.1:1093"); err != nil || strings.Contains(r.String(), "RRSIG") || len(r.Answer) != 1 {
		t.Errorf("an answer without DO: %v %v", r, err)
	}
	m.SetQuestion("example.org.", dns.TypeDNSKEY)
	if r, err = dns.Exchange(m, "127.0.0.1:1093"); err != nil || len(r.Answer) != 2 || strings.Contains(r.String(), "RRSIG") {
		t.Errorf("DNSKEY without DO: %v %v", r, err)
	}

	// DNSSEC records are the signer's, not the API's.
	for _, rr := range []string{"x.example.org. 300 IN DNSKEY 256 3 13 AAAA", "x.example.org. 300 IN NSEC y.example.org. A"} {
		if code, _ := api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{rr}}, nil); code != http.StatusBadRequest {
			t.Errorf("%s written through the API: %d", rr, code)
		}
	}

	// A restart: the same keys, from the group's state.
	p.Signal(syscall.SIGTERM)
	if code, err := p.Wait(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("after SIGTERM: exit %d, %v", code, err)
	}
	p = harness.Start(t, "dnssec2", wd, "Corefile.examples/dnssec.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8393/ready", p)
	if again := waitDS(t, api, "example.org"); again.DS[0] != ds.DS[0] {
		t.Errorf("the DS changed across a restart: %s, then %s", ds.DS[0], again.DS[0])
	}
	delvValidates(t, delv, "127.0.0.1:1093", anchors, signedQueries[:3])
	p.Kill()

	// Bad key-encryption key files: no start, the file named.
	text, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/dnssec.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(wd, "open.kek")
	os.WriteFile(open, []byte("MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=\n"), 0o644)
	short := filepath.Join(wd, "short.kek")
	os.WriteFile(short, []byte("c2hvcnQ=\n"), 0o600)
	for n, tc := range []struct{ file, want string }{
		{filepath.Join(wd, "missing.kek"), "missing.kek"},
		{open, "chmod 600"},
		{short, "short.kek"},
	} {
		c := strings.Replace(string(text), "dnssec_kek data/dnssec/kek", "dnssec_kek "+tc.file, 1)
		c = strings.Replace(c, "data data/dnssec/member", fmt.Sprintf("data data/bad%d", n), 1)
		c = strings.Replace(c, "example.org:1093", fmt.Sprintf("example.org:%d", harness.ListenPort(t)), 1)
		c = strings.Replace(c, "api 127.0.0.1:8093", fmt.Sprintf("api 127.0.0.1:%d", harness.ListenPort(t)), 1)
		c = strings.Replace(c, "ready 127.0.0.1:8393", fmt.Sprintf("ready 127.0.0.1:%d", harness.ListenPort(t)), 1)
		name := fmt.Sprintf("badkek%d", n)
		os.WriteFile(filepath.Join(wd, name+".Corefile"), []byte(c), 0o644)
		bp := harness.Start(t, name, wd, name+".Corefile")
		code, err := bp.Wait(20 * time.Second)
		if err != nil || code == 0 {
			t.Errorf("%s: expected the start to fail, got exit %d, %v", name, code, err)
		}
		if logs := bp.Logs(); !strings.Contains(logs, "dnssec") || !strings.Contains(logs, tc.want) {
			t.Errorf("%s: expected an error naming dnssec and %q, got:\n%s", name, tc.want, logs)
		}
		if _, err := os.Stat(filepath.Join(wd, "data", fmt.Sprintf("bad%d", n))); !os.IsNotExist(err) {
			t.Errorf("%s: the failed start left its data directory (%v)", name, err)
		}
	}
}

// startSigningCluster starts the cluster example's three members signing
// (dnssec, a key-encryption key of the test's, and the lines extra), and
// waits until they are ready.
func startSigningCluster(t *testing.T, extra string) (wd string, procs []*harness.Proc) {
	t.Helper()
	wd = harness.Workdir(t)
	writeKEK(t, filepath.Join(wd, "data/kek"))
	for i := 1; i <= 3; i++ {
		text, err := os.ReadFile(filepath.Join(harness.Repo, fmt.Sprintf("Corefile.examples/cluster/member%d.Corefile", i)))
		if err != nil {
			t.Fatal(err)
		}
		c := strings.Replace(string(text), "        allow update. * *\n", "        allow update. * *\n        dnssec\n        dnssec_kek data/kek\n"+extra, 1)
		if c == string(text) {
			t.Fatal("the cluster example's member has no allow line to put dnssec after")
		}
		name := fmt.Sprintf("m%d", i)
		os.WriteFile(filepath.Join(wd, name+".Corefile"), []byte(c), 0o644)
		procs = append(procs, harness.Start(t, name, wd, name+".Corefile"))
	}
	for i := 1; i <= 3; i++ {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", 8190+i), procs...)
	}
	return wd, procs
}

// TestDNSSECGroup: the three members of the cluster example, signing:
// every member gives the same bytes for the same signed answer (one key
// set, committed through Raft; deterministic signatures in the same
// window), and delv validates each member's.
func TestDNSSECGroup(t *testing.T) {
	delv := harness.RequireTool(t, "delv")
	wd, _ := startSigningCluster(t, "")
	ds := waitDS(t, harness.API{Base: "http://127.0.0.1:8061"}, "example.org")
	for i := 2; i <= 3; i++ {
		if other := waitDS(t, harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", 8060+i)}, "example.org"); other.DS[0] != ds.DS[0] {
			t.Fatalf("member %d's DS %s, member 1's %s", i, other.DS[0], ds.DS[0])
		}
	}
	anchors := trustAnchor(t, wd, ds.DS[0])
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"www.example.org.", dns.TypeA}, {"nope.example.org.", dns.TypeA}, {"www.example.org.", dns.TypeTXT},
		{"example.org.", dns.TypeDNSKEY}, {"x.dev.example.org.", dns.TypeA}, {"ftp.example.org.", dns.TypeA},
	} {
		var first []byte
		for i := 1; i <= 3; i++ {
			m := new(dns.Msg)
			m.SetQuestion(q.name, q.qtype)
			m.SetEdns0(4096, true)
			m.Id = 7
			r, err := dns.Exchange(m, fmt.Sprintf("127.0.0.1:%d", 1060+i))
			if err != nil {
				t.Fatalf("%s from member %d: %v", q.name, i, err)
			}
			b, _ := r.Pack()
			if i == 1 {
				first = b
				if !strings.Contains(r.String(), "RRSIG") {
					t.Errorf("%s %s: no signature: %v", q.name, dns.TypeToString[q.qtype], r)
				}
			} else if string(b) != string(first) {
				t.Errorf("%s %s: member %d's signed answer differs from member 1's:\n%v", q.name, dns.TypeToString[q.qtype], i, r)
			}
		}
	}
	for i := 1; i <= 3; i++ {
		delvValidates(t, delv, fmt.Sprintf("127.0.0.1:%d", 1060+i), anchors, signedQueries[:6])
	}
}

// TestDNSSECRollover: the cluster example's three members, signing with a
// ZSK that rolls over every 12 s (3 s waits): under writes, delv validates
// every answer from the zone's DS throughout (new names and old), while
// the DNSKEY RRset goes from two keys to three and back and the ZSK that
// signs changes; the leader, stopped across a rollover step, catches up
// and answers the same bytes as the others again.
func TestDNSSECRollover(t *testing.T) {
	delv := harness.RequireTool(t, "delv")
	wd, procs := startSigningCluster(t, "        dnssec_zsk_rollover 12s 3s\n")
	api := harness.API{Base: "http://127.0.0.1:8061"}
	ds := waitDS(t, api, "example.org")
	anchors := trustAnchor(t, wd, ds.DS[0])

	zskOf := func(addr string) (keys int, signer uint16) {
		m := new(dns.Msg)
		m.SetQuestion("example.org.", dns.TypeDNSKEY)
		m.SetEdns0(4096, true)
		if r, err := dns.Exchange(m, addr); err == nil {
			for _, rr := range r.Answer {
				if _, ok := rr.(*dns.DNSKEY); ok {
					keys++
				}
			}
		}
		m.SetQuestion("www.example.org.", dns.TypeA)
		if r, err := dns.Exchange(m, addr); err == nil {
			for _, rr := range r.Answer {
				if s, ok := rr.(*dns.RRSIG); ok {
					signer = s.KeyTag
				}
			}
		}
		return keys, signer
	}
	seenKeys := map[int]bool{}
	signers := map[uint16]bool{}
	end := time.Now().Add(32 * time.Second)
	// The group's leader is stopped across a rollover step (writes 6 to
	// 16): the next leader takes the steps, and the stopped member
	// catches up afterwards. Writes and queries go to the others.
	stopped := 0
	running := []int{1, 2, 3}
	for i := 0; time.Now().Before(end); i++ {
		name := fmt.Sprintf("roll%d.example.org.", i)
		via := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", 8060+running[0])}
		// Writes wait for an election (503 meanwhile; adding the record
		// again is the same change).
		harness.Eventually(t, "write "+name, 20*time.Second, func() bool {
			code, err := via.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.44"}}, nil)
			return err == nil && code == http.StatusOK
		})
		member := running[i%len(running)]
		addr := fmt.Sprintf("127.0.0.1:%d", 1060+member)
		harness.Eventually(t, name+" on member "+fmt.Sprint(member), 10*time.Second, func() bool { return harness.HasA(addr, name, "192.0.2.44") })
		delvValidates(t, delv, addr, anchors, [][3]string{
			{strings.TrimSuffix(name, "."), "A", "; fully validated"},
			{"www.example.org", "A", "; fully validated"},
			{"nope.example.org", "A", "; negative response, fully validated"},
		})
		n, s := zskOf(addr)
		seenKeys[n], signers[s] = true, true
		switch {
		case i == 6 && stopped == 0:
			var st struct{ Leader uint64 }
			if code, err := api.Do("GET", "/v1/cluster", nil, &st); err != nil || code != http.StatusOK || st.Leader < 1 || st.Leader > 3 {
				t.Fatalf("the group's leader: %d %v %+v", code, err, st)
			}
			stopped = int(st.Leader)
			procs[stopped-1].Signal(syscall.SIGSTOP)
			running = slices.DeleteFunc(running, func(m int) bool { return m == stopped })
			t.Logf("member %d, the leader, stopped", stopped)
		case i == 16 && stopped != 0:
			procs[stopped-1].Signal(syscall.SIGCONT)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if stopped != 0 {
		procs[stopped-1].Signal(syscall.SIGCONT)
	}
	if !seenKeys[2] || !seenKeys[3] || len(signers) < 2 {
		t.Errorf("no rollover seen: DNSKEY RRsets of %v keys, signing ZSKs %v", seenKeys, signers)
	}
	// The stopped member caught up: the same bytes as another.
	other := running[0]
	harness.Eventually(t, fmt.Sprintf("member %d answering as member %d", stopped, other), 20*time.Second, func() bool {
		for _, q := range []string{"www.example.org.", "example.org.", "roll1.example.org."} {
			m := new(dns.Msg)
			m.SetQuestion(q, dns.TypeA)
			m.SetEdns0(4096, true)
			m.Id = 9
			a, err1 := dns.Exchange(m, fmt.Sprintf("127.0.0.1:%d", 1060+other))
			b, err2 := dns.Exchange(m, fmt.Sprintf("127.0.0.1:%d", 1060+stopped))
			if err1 != nil || err2 != nil {
				return false
			}
			pa, _ := a.Pack()
			pb, _ := b.Pack()
			if string(pa) != string(pb) {
				return false
			}
		}
		return true
	})
	delvValidates(t, delv, fmt.Sprintf("127.0.0.1:%d", 1060+stopped), anchors, signedQueries[:3])
}

// TestDNSSECTransfer: a signed zone goes out signed (signatures made at
// transfer time, the keys and an NSEC chain added): NSD and Knot
// secondaries serve it as they hold it, and delv validates their answers
// (positive, NODATA, NXDOMAIN by the chain, a wildcard's) from the DS the
// member gives; an IXFR from an old serial gets the whole signed zone.
func TestDNSSECTransfer(t *testing.T) {
	delv := harness.RequireTool(t, "delv")
	wd := harness.Workdir(t)
	writeKEK(t, filepath.Join(wd, "data/dnssec/kek"))
	text, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/dnssec.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	c := strings.Replace(string(text), "    bind 127.0.0.1\n", "    bind 127.0.0.1\n    transfer {\n        to *\n    }\n", 1)
	os.WriteFile(filepath.Join(wd, "xfr.Corefile"), []byte(c), 0o644)
	p := harness.Start(t, "dnssec", wd, "xfr.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8393/ready", p)
	api := harness.API{Base: "http://127.0.0.1:8093"}
	ds := waitDS(t, api, "example.org")
	anchors := trustAnchor(t, wd, ds.DS[0])
	var res struct{ Serial uint32 }
	if code, err := api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"late.example.org. 300 IN A 192.0.2.77"}}, &res); err != nil || code != http.StatusOK {
		t.Fatalf("a write: %d %v", code, err)
	}

	queries := [][3]string{
		{"www.example.org", "A", "; fully validated"},
		{"late.example.org", "A", "; fully validated"},
		{"www.example.org", "MX", "; negative response, fully validated"},
		{"nope.example.org", "A", "; negative response, fully validated"},
		{"host.dev.example.org", "A", "; fully validated"},
		{"example.org", "DNSKEY", "; fully validated"},
	}
	nsd := dnsdiff.StartNSDSecondary(t, "example.org.", "127.0.0.1:1093", harness.ListenPort(t))
	delvValidates(t, delv, nsd.Addr, anchors, queries)
	knot := dnsdiff.StartKnotSecondary(t, "example.org.", "127.0.0.1:1093", harness.ListenPort(t))
	delvValidates(t, delv, knot.Addr, anchors, queries)

	// dig: the AXFR has RRSIGs and NSECs, the IXFR from the first serial
	// is the whole zone.
	axfr := digXFR(t, 1093, "example.org.", "AXFR")
	kinds := map[uint16]int{}
	for _, rr := range axfr {
		kinds[rr.Header().Rrtype]++
	}
	if kinds[dns.TypeRRSIG] == 0 || kinds[dns.TypeNSEC] == 0 || kinds[dns.TypeDNSKEY] != 2 {
		t.Errorf("the AXFR is not signed: %v", axfr)
	}
	ixfr := digXFR(t, 1093, "example.org.", fmt.Sprintf("IXFR=%d", res.Serial-1))
	if len(ixfr) != len(axfr) {
		t.Errorf("an IXFR of a signed zone: %d records, the AXFR %d", len(ixfr), len(axfr))
	}
}

// TestDNSSECDifferentialKnot: the generator's zone (CNAME and DNAME chains,
// wildcards, empty non-terminals, delegations, case) signed by a member and
// by Knot DNS's mod-onlinesign, asked the generator's queries with DO set:
// where the two are comparable they agree: the rcode (both deny a missing
// name with NOERROR and an NSEC at it: RFC 9824 for the member, Knot's
// "black lies"), the answer section's records, an RRSIG over each of its
// RRsets (but a DNAME's synthesized CNAME), and an NSEC in every negative
// answer. Signatures, keys and the NSEC bitmaps differ by design. A sample
// of the member's answers is validated by delv.
func TestDNSSECDifferentialKnot(t *testing.T) {
	delv := harness.RequireTool(t, "delv")
	const origin = "diff.example."
	text, queries := dnsdiff.GenerateZone(origin, 56, 150)
	var lines []string
	for l := range strings.Lines(text) {
		if !strings.Contains(l, "DNSKEY") { // the signers' own
			lines = append(lines, l)
		}
	}
	text = strings.Join(lines, "")
	knot := dnsdiff.StartKnotOnlineSign(t, origin, text, harness.ListenPort(t))

	wd := harness.Workdir(t)
	writeKEK(t, filepath.Join(wd, "kek"))
	dnsPort, apiPort, readyPort := harness.ListenPort(t), harness.ListenPort(t), harness.ListenPort(t)
	corefile := fmt.Sprintf(`.:%d {
    bind 127.0.0.1
    craftstore {
        data data/m
        api 127.0.0.1:%d
        dnssec
        dnssec_kek kek
    }
    ready 127.0.0.1:%d
}
`, dnsPort, apiPort, readyPort)
	os.WriteFile(filepath.Join(wd, "m.Corefile"), []byte(corefile), 0o644)
	p := harness.Start(t, "member", wd, "m.Corefile")
	harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), p)
	api := harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}
	if code, err := api.Do("PUT", "/v1/zones/"+origin, text, nil); err != nil || code != http.StatusOK {
		t.Fatalf("PUT of the zone: %d %v", code, err)
	}
	var ds dsReply
	harness.Eventually(t, "the zone's DS", 30*time.Second, func() bool {
		code, err := api.Do("GET", "/v1/zones/"+origin+"/ds", nil, &ds)
		return err == nil && code == http.StatusOK
	})
	member := fmt.Sprintf("127.0.0.1:%d", dnsPort)

	askDO := func(addr string, q dnsdiff.Query, do bool) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(q.Name, q.Type)
		m.SetEdns0(4096, do)
		c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatalf("%s from %s: %v", q, addr, err)
		}
		return r
	}
	ask := func(addr string, q dnsdiff.Query) *dns.Msg { return askDO(addr, q, true) }
	split := func(rrs []dns.RR) (data []dns.RR, covered map[string]bool) {
		covered = map[string]bool{}
		for _, rr := range rrs {
			if s, ok := rr.(*dns.RRSIG); ok {
				covered[strings.ToLower(s.Hdr.Name)+"/"+dns.TypeToString[s.TypeCovered]] = true
			} else {
				data = append(data, rr)
			}
		}
		return data, covered
	}
	hasNSEC := func(m *dns.Msg) bool {
		for _, rr := range m.Ns {
			if rr.Header().Rrtype == dns.TypeNSEC {
				return true
			}
		}
		return false
	}
	compared, negatives := 0, 0
	for _, q := range queries {
		if q.Type == dns.TypeDNSKEY || q.Type == dns.TypeCDS || q.Type == dns.TypeCDNSKEY {
			continue // each signer's own keys
		}
		// Where the two answer otherwise without DNSSEC (Knot's own TTL
		// and DNAME loop rules; the member answers as NSD), there is
		// nothing to compare.
		if ua, ub := askDO(member, q, false), askDO(knot, q, false); ua.Rcode != ub.Rcode || !dnsdiff.SameSet(ua.Answer, ub.Answer) {
			continue
		}
		a, b := ask(member, q), ask(knot, q)
		if !a.Authoritative || !b.Authoritative {
			if a.Authoritative != b.Authoritative || a.Rcode != b.Rcode {
				t.Errorf("%s: AA %v rcode %s, Knot AA %v rcode %s", q, a.Authoritative, dns.RcodeToString[a.Rcode], b.Authoritative, dns.RcodeToString[b.Rcode])
			}
			continue // a referral: its signatures are checked by delv elsewhere
		}
		if a.Rcode != b.Rcode {
			t.Errorf("%s: rcode %s, Knot %s", q, dns.RcodeToString[a.Rcode], dns.RcodeToString[b.Rcode])
			continue
		}
		da, ca := split(a.Answer)
		db, _ := split(b.Answer)
		if !dnsdiff.SameSet(da, db) {
			t.Errorf("%s: answers differ:\n%v\nKnot:\n%v", q, da, db)
			continue
		}
		var dnames []string
		for _, rr := range da {
			if rr.Header().Rrtype == dns.TypeDNAME {
				dnames = append(dnames, rr.Header().Name)
			}
		}
		for _, rr := range da {
			h := rr.Header()
			synthesized := false
			for _, d := range dnames {
				synthesized = synthesized || (h.Rrtype == dns.TypeCNAME && dns.IsSubDomain(d, h.Name) && !strings.EqualFold(d, h.Name))
			}
			if !synthesized && !ca[strings.ToLower(h.Name)+"/"+dns.TypeToString[h.Rrtype]] {
				t.Errorf("%s: no RRSIG over %s %s", q, h.Name, dns.TypeToString[h.Rrtype])
			}
		}
		if neg := len(da) == 0 || a.Rcode != dns.RcodeSuccess; neg || hasNSEC(b) {
			if hasNSEC(b) && !hasNSEC(a) && !hasType(a.Ns, dns.TypeDS) {
				// (A referral at the end of a CNAME chain may carry the
				// cut's DS instead: a secure delegation.)
				t.Errorf("%s: Knot denies with an NSEC, the member not:\n%v", q, a)
			}
			negatives++
		}
		compared++
	}
	if compared < len(queries)/2 || negatives == 0 {
		t.Errorf("compared %d of %d queries (%d negative)", compared, len(queries), negatives)
	}
	t.Logf("compared %d of %d queries with Knot's online signing, %d negative", compared, len(queries), negatives)

	// A sample of the member's answers validates.
	anchors := trustAnchor(t, wd, ds.DS[0])
	var sample [][3]string
	for i, q := range queries {
		if i%(len(queries)/12+1) == 0 {
			r := ask(member, q)
			if r.Rcode != dns.RcodeSuccess || !r.Authoritative {
				continue
			}
			want := "; fully validated"
			if d, _ := split(r.Answer); len(d) == 0 {
				want = "; negative response, fully validated"
			}
			sample = append(sample, [3]string{strings.TrimSuffix(q.Name, "."), dns.TypeToString[q.Type], want})
		}
	}
	delvAnchored(t, delv, member, anchors, origin, sample)
}

// delvAnchored is delvValidates for a trust anchor at origin.
func delvAnchored(t *testing.T, delv, addr, anchors, origin string, queries [][3]string) {
	t.Helper()
	host, port := strings.Split(addr, ":")[0], strings.Split(addr, ":")[1]
	for _, q := range queries {
		out, _ := exec.Command(delv, "@"+host, "-p", port, "-a", anchors, "+root="+strings.TrimSuffix(origin, "."), "+nocrypto", q[0], q[1]).CombinedOutput()
		s := string(out)
		if !strings.Contains(s, q[2]) || strings.Contains(s, "bogus") || strings.Contains(s, "insecure") {
			t.Errorf("delv %s %s at %s: expected %q, got:\n%s", q[0], q[1], addr, q[2], s)
		}
	}
}

func hasType(rrs []dns.RR, t uint16) bool {
	for _, rr := range rrs {
		if rr.Header().Rrtype == t {
			return true
		}
	}
	return false
}

// TestDNSSECKSKRollover: the example member with a KSK lifetime of 8 s and a
// parent (a DNS server of the test's) whose DS RRset the test changes as a
// registry would on seeing the CDS: a new KSK joins the old in signing the
// DNSKEY RRset and takes the CDS; answers validate from either DS
// meanwhile; once the parent lists only the new DS the old key retires,
// then goes, and answers validate from the new DS.
func TestDNSSECKSKRollover(t *testing.T) {
	delv := harness.RequireTool(t, "delv")
	var (
		mu     sync.Mutex
		parent []dns.RR
	)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		if r.Question[0].Qtype == dns.TypeDS && strings.EqualFold(r.Question[0].Name, "example.org.") {
			mu.Lock()
			m.Answer = append(m.Answer, parent...)
			mu.Unlock()
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	setParent := func(ds ...string) {
		mu.Lock()
		defer mu.Unlock()
		parent = nil
		for _, s := range ds {
			rr, err := dns.NewRR(s)
			if err != nil {
				t.Fatal(err)
			}
			parent = append(parent, rr)
		}
	}

	wd := harness.Workdir(t)
	writeKEK(t, filepath.Join(wd, "data/dnssec/kek"))
	text, err := os.ReadFile(filepath.Join(harness.Repo, "Corefile.examples/dnssec.Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	c := strings.Replace(string(text), "        dnssec_kek data/dnssec/kek\n",
		"        dnssec_kek data/dnssec/kek\n        dnssec_zsk_rollover 600s 3s\n        dnssec_ksk_rollover 8s "+pc.LocalAddr().String()+"\n", 1)
	os.WriteFile(filepath.Join(wd, "ksk.Corefile"), []byte(c), 0o644)
	p := harness.Start(t, "dnssec", wd, "ksk.Corefile")
	harness.WaitReady(t, "http://127.0.0.1:8393/ready", p)
	api := harness.API{Base: "http://127.0.0.1:8093"}
	first := waitDS(t, api, "example.org")
	setParent(first.DS[0])
	oldAnchors := trustAnchor(t, t.TempDir(), first.DS[0])

	// The new KSK: in the CDS, and signing the DNSKEY RRset beside the old.
	var second dsReply
	harness.Eventually(t, "a second KSK in the CDS", 30*time.Second, func() bool {
		code, err := api.Do("GET", "/v1/zones/example.org/ds", nil, &second)
		return err == nil && code == http.StatusOK && len(second.DS) == 1 && second.DS[0] != first.DS[0]
	})
	newAnchors := trustAnchor(t, t.TempDir(), second.DS[0])
	dnskeySigners := func() int {
		m := new(dns.Msg)
		m.SetQuestion("example.org.", dns.TypeDNSKEY)
		m.SetEdns0(4096, true)
		r, err := dns.Exchange(m, "127.0.0.1:1093")
		if err != nil {
			return -1
		}
		n := 0
		for _, rr := range r.Answer {
			if _, ok := rr.(*dns.RRSIG); ok {
				n++
			}
		}
		return n
	}
	if n := dnskeySigners(); n != 2 {
		t.Errorf("the DNSKEY RRset has %d signatures during the rollover, expected 2", n)
	}
	for _, a := range []string{oldAnchors, newAnchors} {
		delvValidates(t, delv, "127.0.0.1:1093", a, signedQueries[:3])
	}
	time.Sleep(3 * time.Second)
	if n := dnskeySigners(); n != 2 {
		t.Errorf("the old KSK stopped signing before the parent changed its DS (%d signatures)", n)
	}

	// The registry acts on the CDS: the old key retires, then goes.
	setParent(second.DS[0])
	harness.Eventually(t, "the old KSK gone", 30*time.Second, func() bool {
		var now dsReply
		code, err := api.Do("GET", "/v1/zones/example.org/ds", nil, &now)
		return err == nil && code == http.StatusOK && len(now.DNSKEY) == 2 && dnskeySigners() == 1
	})
	var queries [][3]string
	for _, q := range signedQueries {
		if q[0] != "a.old.example.org" { // TestDNSSECExample's DNAME
			queries = append(queries, q)
		}
	}
	delvValidates(t, delv, "127.0.0.1:1093", newAnchors, queries)
	if logs := p.Logs(); !strings.Contains(logs, "KSK rollover") {
		t.Errorf("no KSK rollover logged:\n%s", logs)
	}
}
