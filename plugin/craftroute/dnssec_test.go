package craftroute

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsdiff"
	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

// signedRouter gives router c a key-signing and a zone-signing key for
// origin, as if read from the shards.
func signedRouter(t testing.TB, c *Craftroute, origin string) *dnssec.Keys {
	t.Helper()
	keys := &dnssec.Keys{Zone: origin, TTL: dnssec.KeyTTL}
	for _, f := range []uint16{dnssec.FlagKSK, dnssec.FlagZSK} {
		k, err := dnssec.GenerateKey(origin, dnssec.ECDSAP256SHA256, f)
		if err != nil {
			t.Fatal(err)
		}
		keys.Signing = append(keys.Signing, k)
		if f == dnssec.FlagKSK {
			keys.DS = append(keys.DS, k)
		}
	}
	c.sec = newRouterSigning(dnssec.Config{On: true})
	c.sec.keys.Store(origin, &zoneKeys{hash: "test", keys: keys})
	c.negSigned = newNegCache(0)
	return keys
}

// TestSignedMergeEqualsUnsharded: for a generated zone spread over 2 and
// 3 shards, every answer to a query with DO through the router, signed
// by it from the members' completed answers, equals one signing server's
// (the unsharded zone's answer completed and signed as a craftstore
// member signs it), signatures included: compact denial over shards
// (NXDOMAIN decided by the merge, empty non-terminals held by other
// shards, wildcards), referrals with their DS or insecure NSEC, glue
// unsigned, CNAME and DNAME chains across shards.
func TestSignedMergeEqualsUnsharded(t *testing.T) {
	const origin = "example.org."
	text, queries := dnsdiff.GenerateZone(origin, 1, 1500)
	now := time.Now()
	for _, n := range []int{2, 3} {
		c, whole := testRouter(t, origin, text, n)
		keys := signedRouter(t, c, origin)
		ref := dnssec.NewSigner(10000)
		bad, negative := 0, 0
		for _, q := range queries {
			r := new(dns.Msg)
			r.SetQuestion(q.Name, q.Type)
			r.SetEdns0(1232, true)

			want := new(dns.Msg)
			want.SetReply(r)
			want.SetEdns0(dns.DefaultMsgSize, true)
			whole.Lookup(want, dnsname.Lower(q.Name), q.Type)
			if err := whole.Complete(want, func() []uint16 { return zone.KeyTypes(true) }); err != nil {
				t.Fatal(err)
			}
			if err := ref.SignSections(want, keys, now, whole.Glue); err != nil {
				t.Fatal(err)
			}

			st := new(signState)
			ctx := context.WithValue(context.Background(), signKey{}, st)
			got, _, err := c.resolveName(ctx, r)
			if err != nil {
				t.Fatalf("%v: %v", q, err)
			}
			if err := c.sign(got, keys, st); err != nil {
				t.Fatalf("%v: signing: %v", q, err)
			}
			if hasNSEC(got.Ns) {
				negative++
			}
			if d := diffMsg(want, got); d != "" {
				bad++
				if bad <= 10 {
					t.Errorf("%d shards, %v: %s", n, q, d)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%d shards: %d of %d signed answers differ", n, bad, len(queries))
		}
		t.Logf("%d shards: %d queries, %d with an NSEC", n, len(queries), negative)
	}
}

// TestSignRefusesIncomplete: an answer whose member did not complete it
// for signing (an older member) is not signed, rather than signed without
// its denial.
func TestSignRefusesIncomplete(t *testing.T) {
	const origin = "example.org."
	c, _ := testRouter(t, origin, `$ORIGIN example.org.
@ 300 IN SOA ns1 host 1 7200 3600 1209600 300
@ 300 IN NS ns1
ns1 300 IN A 192.0.2.1
`, 2)
	keys := signedRouter(t, c, origin)
	resp := new(dns.Msg)
	resp.SetQuestion("nx.example.org.", dns.TypeA)
	resp.Response, resp.Authoritative, resp.Rcode = true, true, dns.RcodeNameError
	resp.Ns = []dns.RR{mustRR(t, "example.org. 300 IN SOA ns1.example.org. host.example.org. 1 7200 3600 1209600 300")}
	if err := c.sign(resp, keys, new(signState)); err == nil {
		t.Fatal("a denial without its NSEC was signed")
	}
	st := new(signState)
	st.note(resp) // no SignCode option: incomplete
	ok := new(dns.Msg)
	ok.SetQuestion("ns1.example.org.", dns.TypeA)
	ok.Response, ok.Authoritative = true, true
	ok.Answer = []dns.RR{mustRR(t, "ns1.example.org. 300 IN A 192.0.2.1")}
	if err := c.sign(ok, keys, st); err == nil {
		t.Fatal("an answer from an incomplete member answer was signed")
	}
}

func mustRR(t testing.TB, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

// TestMergeFullSigned: a signed zone's transfer merged from its shards
// holds what SignZone makes of the whole zone: the apex's keys, the NSEC
// chain over every shard's names, RRSIGs (none over the delegation's NS
// and glue), framed by the SOA at the zone serial.
func TestMergeFullSigned(t *testing.T) {
	c := &Craftroute{}
	keys := signedRouter(t, c, "example.org.")
	a := stream(t, "a", 20, true,
		rrs(t, soaA, "example.org. 300 IN NS ns1.example.org.", "a.example.org. 60 IN A 192.0.2.1"),
		rrs(t, "d.example.org. 60 IN DNAME a.example.org.", "sub.example.org. 60 IN NS ns.sub.example.org.", "ns.sub.example.org. 60 IN A 192.0.2.53", "z.example.org. 60 IN A 192.0.2.26", soaA))
	b := stream(t, "b", 20, true,
		rrs(t, soaB, "example.org. 300 IN NS ns1.example.org.", "d.example.org. 60 IN DNAME a.example.org.", "d.example.org. 60 IN TXT \"beside\"", "ns1.example.org. 60 IN A 192.0.2.2", "sub.example.org. 60 IN NS ns.sub.example.org."),
		rrs(t, "ns.sub.example.org. 60 IN A 192.0.2.53", soaB))
	xs := []*shardXfr{a, b}
	if err := startFull(xs); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	signed := func(soa *dns.SOA, emit func(...dns.RR) error) (*dnssec.ZoneStream, error) {
		return c.sec.signer.NewZoneStream(keys, soa, now, emit)
	}
	var got []dns.RR
	err := mergeFullSigned(xs, 0, func(batch []dns.RR) error { got = append(got, batch...); return nil }, signed)
	if err != nil {
		t.Fatal(err)
	}
	whole := rrs(t, "example.org. 300 IN SOA ns1.example.org. h.example.org. 20 3600 600 86400 300",
		"example.org. 300 IN NS ns1.example.org.", "a.example.org. 60 IN A 192.0.2.1",
		"d.example.org. 60 IN DNAME a.example.org.", "d.example.org. 60 IN TXT \"beside\"", "ns1.example.org. 60 IN A 192.0.2.2",
		"sub.example.org. 60 IN NS ns.sub.example.org.", "ns.sub.example.org. 60 IN A 192.0.2.53", "z.example.org. 60 IN A 192.0.2.26")
	want, err := dnssec.NewSigner(100).SignZone(whole, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, whole[0]) // the closing SOA
	strs := func(rrs []dns.RR) []string {
		var out []string
		for _, rr := range rrs {
			out = append(out, strings.ToLower(rr.String()))
		}
		slices.Sort(out)
		return out
	}
	if g, w := strs(got), strs(want); !slices.Equal(g, w) {
		t.Errorf("the signed merge:\n%s\nexpected:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	if _, ok := got[0].(*dns.SOA); !ok {
		t.Errorf("the transfer starts with %s", got[0])
	}
	if _, ok := got[len(got)-1].(*dns.SOA); !ok {
		t.Errorf("the transfer ends with %s", got[len(got)-1])
	}
}
