package dnssec

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// testZone holds the unsigned answers of a small zone, example.org, by
// question: what a member's lookup gives, with what SignAnswer needs to
// know beside it.
type testAnswer struct {
	rcode  int
	answer []string
	ns     []string
	extra  []string
	neg    *Denial
	ref    bool // a referral (not authoritative)
}

const testSOA = "example.org. 3600 IN SOA ns1.example.org. hostmaster.example.org. 1 7200 3600 1209600 300"

var testAnswers = map[string]testAnswer{
	"example.org./SOA":           {answer: []string{testSOA}},
	"example.org./NS":            {answer: []string{"example.org. 3600 IN NS ns1.example.org."}, extra: []string{"ns1.example.org. 3600 IN A 192.0.2.53"}},
	"www.example.org./A":         {answer: []string{"www.example.org. 300 IN A 192.0.2.1", "www.example.org. 300 IN A 192.0.2.2"}},
	"www.example.org./AAAA":      {ns: []string{testSOA}, neg: &Denial{Exists: true, Types: []uint16{dns.TypeA}}},
	"missing.example.org./A":     {rcode: dns.RcodeNameError, ns: []string{testSOA}, neg: &Denial{}},
	"ent.example.org./TXT":       {ns: []string{testSOA}, neg: &Denial{Exists: true}}, // an empty non-terminal (a.ent exists)
	"x.wild.example.org./TXT":    {answer: []string{`x.wild.example.org. 300 IN TXT "wildcard"`}},
	"x.wild.example.org./A":      {ns: []string{testSOA}, neg: &Denial{Exists: true, Types: []uint16{dns.TypeTXT}}},
	"alias.example.org./A":       {answer: []string{"alias.example.org. 300 IN CNAME www.example.org.", "www.example.org. 300 IN A 192.0.2.1", "www.example.org. 300 IN A 192.0.2.2"}},
	"a.old.example.org./A":       {answer: []string{"old.example.org. 300 IN DNAME new.example.org.", "a.old.example.org. 300 IN CNAME a.new.example.org.", "a.new.example.org. 300 IN A 192.0.2.9"}},
	"dangling.example.org./A":    {rcode: dns.RcodeNameError, answer: []string{"dangling.example.org. 300 IN CNAME gone.example.org."}, ns: []string{testSOA}, neg: &Denial{Name: "gone.example.org."}},
	"gone.example.org./A":        {rcode: dns.RcodeNameError, ns: []string{testSOA}, neg: &Denial{}},
	"sub.example.org./DS":        {ns: []string{testSOA}, neg: &Denial{Exists: true, Types: []uint16{dns.TypeNS}}}, // insecure delegation
	"secure.example.org./DS":     {answer: []string{"secure.example.org. 3600 IN DS 12345 13 2 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"}},
	"host.sub.example.org./A":    {ref: true, ns: []string{"sub.example.org. 3600 IN NS ns.sub.example.org."}, extra: []string{"ns.sub.example.org. 3600 IN A 192.0.2.77"}},
	"host.secure.example.org./A": {ref: true, ns: []string{"secure.example.org. 3600 IN NS ns.secure.example.org.", "secure.example.org. 3600 IN DS 12345 13 2 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"}, extra: []string{"ns.secure.example.org. 3600 IN A 192.0.2.78"}},
}

// testServer answers from testAnswers, signed with keys when the query
// has DO set, as a member would.
func testServer(t *testing.T, keys *Keys) string {
	t.Helper()
	// UDP and TCP on one port: a port whose TCP side is taken is
	// given back and another tried.
	var (
		pc  net.PacketConn
		l   net.Listener
		err error
	)
	for range 50 {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	signer := NewSigner(1000)
	glue := func(name string) bool {
		return dns.IsSubDomain("sub.example.org.", name) || dns.IsSubDomain("secure.example.org.", name)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		key := dns.CanonicalName(q.Name) + "/" + dns.TypeToString[q.Qtype]
		ta, ok := testAnswers[key]
		switch {
		case q.Qtype == dns.TypeDNSKEY && strings.EqualFold(q.Name, keys.Zone):
			m.Answer = keys.DNSKEYs()
		case q.Qtype == dns.TypeCDS && strings.EqualFold(q.Name, keys.Zone):
			m.Answer = keys.CDS()
		case !ok:
			m.Rcode = dns.RcodeRefused
			w.WriteMsg(m)
			return
		}
		m.Authoritative = !ta.ref
		if ok {
			m.Rcode = ta.rcode
			m.Answer, m.Ns, m.Extra = mustRRs(ta.answer), mustRRs(ta.ns), mustRRs(ta.extra)
		}
		if name, neg := Denied(m); (ta.neg != nil) != neg || (neg && ta.neg.Name != "" && name != ta.neg.Name) {
			t.Errorf("%s: Denied says %q %v", key, name, neg)
		}
		if opt := r.IsEdns0(); opt != nil {
			if opt.Do() {
				if err := signer.SignAnswer(m, keys, time.Now(), Answer{Negative: ta.neg, Glue: glue}); err != nil {
					t.Errorf("%s: %v", key, err)
				}
			}
			m.SetEdns0(4096, opt.Do())
		}
		w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}
	return pc.LocalAddr().String()
}

func mustRRs(lines []string) []dns.RR {
	var out []dns.RR
	for _, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil {
			panic(err)
		}
		out = append(out, rr)
	}
	return out
}

// TestDelvValidates: BIND's delv, from a trust anchor made of the zone's
// DS, validates the signed answers SignAnswer makes: positive, NODATA,
// NXDOMAIN (compact denial), an empty non-terminal, a wildcard's, a CNAME
// and a DNAME chain, the DS of a secure delegation and the denial of one
// of an insecure delegation, and the DNSKEY and CDS RRsets; for a KSK and
// ZSK pair (ECDSA P-256) and a combined key (Ed25519). A query without DO
// gets no signature.
func TestDelvValidates(t *testing.T) {
	delv := dnsdiff.RequireTool(t, "delv")
	for _, tc := range []struct {
		name  string
		alg   uint8
		split bool
	}{{"ksk+zsk ecdsa", ECDSAP256SHA256, true}, {"csk ed25519", ED25519, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ksk, err := GenerateKey("example.org.", tc.alg, FlagKSK)
			if err != nil {
				t.Fatal(err)
			}
			keys := &Keys{Zone: "example.org.", Signing: []*Key{ksk}, DS: []*Key{ksk}, TTL: 3600}
			if tc.split {
				zsk, err := GenerateKey("example.org.", tc.alg, FlagZSK)
				if err != nil {
					t.Fatal(err)
				}
				next, err := GenerateKey("example.org.", tc.alg, FlagZSK)
				if err != nil {
					t.Fatal(err)
				}
				keys.Signing = append(keys.Signing, zsk)
				keys.Published = []*Key{next} // pre-published, not signing
			}
			addr := testServer(t, keys)
			host, port, _ := net.SplitHostPort(addr)
			ds := ksk.DS(3600)
			anchors := filepath.Join(t.TempDir(), "anchors.conf")
			os.WriteFile(anchors, []byte(fmt.Sprintf("trust-anchors {\n  example.org. static-ds %d %d %d \"%s\";\n};\n",
				ds.KeyTag, ds.Algorithm, ds.DigestType, ds.Digest)), 0o644)
			for _, q := range []struct {
				name, qtype, want string
			}{
				{"www.example.org", "A", "; fully validated"},
				{"example.org", "SOA", "; fully validated"},
				{"example.org", "NS", "; fully validated"},
				{"example.org", "DNSKEY", "; fully validated"},
				{"example.org", "CDS", "; fully validated"},
				{"www.example.org", "AAAA", "; negative response, fully validated"},
				{"missing.example.org", "A", "; negative response, fully validated"},
				{"ent.example.org", "TXT", "; negative response, fully validated"},
				{"x.wild.example.org", "TXT", "; fully validated"},
				{"x.wild.example.org", "A", "; negative response, fully validated"},
				{"alias.example.org", "A", "; fully validated"},
				{"a.old.example.org", "A", "; fully validated"},
				// delv follows the CNAME itself; the target's compact
				// denial is a negative cache entry (NXNAME, TYPE128).
				{"dangling.example.org", "A", "gone.example.org. NSEC \\000.gone.example.org. RRSIG NSEC TYPE128"},
				{"secure.example.org", "DS", "; fully validated"},
				{"sub.example.org", "DS", "; negative response, fully validated"},
			} {
				out, _ := exec.Command(delv, "@"+host, "-p", port, "-a", anchors, "+root=example.org", "+nocrypto",
					q.name, q.qtype).CombinedOutput()
				if !strings.Contains(string(out), q.want) || strings.Contains(string(out), "bogus") || strings.Contains(string(out), "unsigned") {
					t.Errorf("delv %s %s: expected %q, got:\n%s", q.name, q.qtype, q.want, out)
				}
			}
			// Without DO: the answer as it was.
			m := new(dns.Msg)
			m.SetQuestion("missing.example.org.", dns.TypeA)
			r, err := dns.Exchange(m, addr)
			if err != nil || r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
				t.Errorf("a query without DO: %v %v", r, err)
			}
			// With DO: NOERROR and the NXNAME NSEC, signed.
			m.SetEdns0(1232, true)
			r, err = dns.Exchange(m, addr)
			if err != nil || r.Rcode != dns.RcodeSuccess {
				t.Fatalf("a query with DO: %v %v", r, err)
			}
			var nxname bool
			for _, rr := range r.Ns {
				if n, ok := rr.(*dns.NSEC); ok {
					for _, ty := range n.TypeBitMap {
						nxname = nxname || ty == dns.TypeNXNAME
					}
				}
			}
			if !nxname || len(r.Ns) != 4 {
				t.Errorf("a compact NXDOMAIN: %v", r)
			}
			// A referral: the NS and glue unsigned; the DS signed, or the
			// NSEC that proves there is none.
			for name, want := range map[string]string{"host.sub.example.org.": "NSEC", "host.secure.example.org.": "DS"} {
				m.SetQuestion(name, dns.TypeA)
				r, err = dns.Exchange(m, addr)
				if err != nil {
					t.Fatal(err)
				}
				var covered []string
				for _, rr := range append(r.Ns, r.Extra...) {
					if s, ok := rr.(*dns.RRSIG); ok {
						covered = append(covered, dns.TypeToString[s.TypeCovered])
					}
				}
				if strings.Join(covered, " ") != want {
					t.Errorf("referral %s: signatures over %v, expected %s only:\n%v", name, covered, want, r)
				}
			}
		})
	}
}
