package dnssec

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

// TestSignZone: a signed zone for a transfer has the SOA first, the keys at
// the apex, an NSEC at every name but glue, the chain in canonical order
// closing at the apex, and a valid RRSIG over every RRset but the
// delegation's NS and the glue.
func TestSignZone(t *testing.T) {
	ksk, _ := GenerateKey("example.org.", ECDSAP256SHA256, FlagKSK)
	zsk, _ := GenerateKey("example.org.", ECDSAP256SHA256, FlagZSK)
	keys := &Keys{Zone: "example.org.", Signing: []*Key{ksk, zsk}, DS: []*Key{ksk}, TTL: 3600}
	zone := mustRRs([]string{
		"example.org. 3600 IN SOA ns1.example.org. hostmaster.example.org. 1 7200 3600 1209600 300",
		"example.org. 3600 IN NS ns1.example.org.",
		"ns1.example.org. 3600 IN A 192.0.2.53",
		"WWW.example.org. 300 IN A 192.0.2.1",
		"www.example.org. 300 IN AAAA 2001:db8::1",
		"*.wild.example.org. 300 IN TXT \"w\"",
		"a.ent.example.org. 300 IN A 192.0.2.2",
		"lab.example.org. 3600 IN NS ns.lab.example.org.",
		"lab.example.org. 3600 IN DS 12345 13 2 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08",
		"ns.lab.example.org. 3600 IN A 192.0.2.200",
		"old.rrsig.example.org. 300 IN RRSIG A 13 4 300 20300101000000 20200101000000 1 example.org. AAAA",
	})
	out, err := NewSigner(100).SignZone(zone, keys, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out[0].(*dns.SOA); !ok {
		t.Fatalf("the first record is %s", out[0])
	}
	sets := map[string][]dns.RR{}
	sigs := map[string]*dns.RRSIG{}
	var chain []*dns.NSEC
	for _, rr := range out {
		h := rr.Header()
		switch x := rr.(type) {
		case *dns.RRSIG:
			if x.KeyTag == 1 {
				t.Errorf("the zone's own RRSIG was kept: %s", x)
			}
			sigs[strings.ToLower(h.Name)+"/"+dns.TypeToString[x.TypeCovered]] = x
		default:
			if n, ok := rr.(*dns.NSEC); ok {
				chain = append(chain, n)
			}
			key := strings.ToLower(h.Name) + "/" + dns.TypeToString[h.Rrtype]
			sets[key] = append(sets[key], rr)
		}
	}
	for key, set := range sets {
		sig, signed := sigs[key]
		want := key != "lab.example.org./NS" && !strings.HasPrefix(key, "ns.lab.")
		if signed != want {
			t.Errorf("%s: signed %v, expected %v", key, signed, want)
			continue
		}
		if signed {
			k := zsk.DNSKEY
			if strings.HasSuffix(key, "/DNSKEY") || strings.HasSuffix(key, "/CDS") || strings.HasSuffix(key, "/CDNSKEY") {
				k = ksk.DNSKEY
			}
			if err := sig.Verify(k, set); err != nil {
				t.Errorf("%s: %v", key, err)
			}
		}
	}
	var owners []string
	for _, n := range chain {
		owners = append(owners, strings.ToLower(n.Hdr.Name)+">"+strings.ToLower(n.NextDomain)+" "+strings.Join(typeNames(n.TypeBitMap), ","))
	}
	want := []string{
		"example.org.>a.ent.example.org. NS,SOA,RRSIG,NSEC,DNSKEY,CDS,CDNSKEY",
		"a.ent.example.org.>lab.example.org. A,RRSIG,NSEC",
		"lab.example.org.>ns1.example.org. NS,DS,RRSIG,NSEC",
		"ns1.example.org.>*.wild.example.org. A,RRSIG,NSEC",
		"*.wild.example.org.>www.example.org. TXT,RRSIG,NSEC",
		"www.example.org.>example.org. A,AAAA,RRSIG,NSEC",
	}
	if strings.Join(owners, "\n") != strings.Join(want, "\n") {
		t.Errorf("the NSEC chain:\n%s\nexpected:\n%s", strings.Join(owners, "\n"), strings.Join(want, "\n"))
	}
}

func typeNames(ts []uint16) []string {
	var out []string
	for _, t := range ts {
		out = append(out, dns.TypeToString[t])
	}
	return out
}

// TestZoneStreamEqualsSignZone: a transfer signed as it streams by, one
// owner name at a time in canonical order, holds SignZone's records.
func TestZoneStreamEqualsSignZone(t *testing.T) {
	ksk, _ := GenerateKey("example.org.", ECDSAP256SHA256, FlagKSK)
	zsk, _ := GenerateKey("example.org.", ECDSAP256SHA256, FlagZSK)
	keys := &Keys{Zone: "example.org.", Signing: []*Key{ksk, zsk}, DS: []*Key{ksk}, TTL: 3600}
	zone := mustRRs([]string{
		"example.org. 3600 IN SOA ns1.example.org. hostmaster.example.org. 1 7200 3600 1209600 300",
		"example.org. 3600 IN NS ns1.example.org.",
		"example.org. 300 IN MX 10 mail.example.org.",
		"ns1.example.org. 3600 IN A 192.0.2.53",
		"www.example.org. 300 IN A 192.0.2.1",
		"www.example.org. 300 IN AAAA 2001:db8::1",
		"*.wild.example.org. 300 IN TXT \"w\"",
		"a.ent.example.org. 300 IN A 192.0.2.2",
		"lab.example.org. 3600 IN NS ns.lab.example.org.",
		"lab.example.org. 3600 IN DS 12345 13 2 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08",
		"ns.lab.example.org. 3600 IN A 192.0.2.200",
		"deep.ns.lab.example.org. 3600 IN A 192.0.2.201",
		"m.example.org. 300 IN A 192.0.2.3",
		"sub.example.org. 3600 IN NS ns.other.net.",
	})
	now := time.Now()
	signer := NewSigner(1000)
	want, err := signer.SignZone(zone, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string][]dns.RR{}
	var soa *dns.SOA
	for _, rr := range zone {
		if s, ok := rr.(*dns.SOA); ok {
			soa = s
			continue
		}
		k := string(dnsname.CanonicalKey(dnsname.Lower(rr.Header().Name)))
		groups[k] = append(groups[k], rr)
	}
	var got []dns.RR
	emit := func(rrs ...dns.RR) error { got = append(got, rrs...); return nil }
	z, err := signer.NewZoneStream(keys, soa, now, emit)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		if err := z.Add(groups[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := got[0].(*dns.SOA); !ok {
		t.Fatalf("the stream starts with %s", got[0])
	}
	strs := func(rrs []dns.RR) []string {
		var out []string
		for _, rr := range rrs {
			out = append(out, strings.ToLower(rr.String()))
		}
		slices.Sort(out)
		return out
	}
	if w, g := strs(want), strs(got); !slices.Equal(w, g) {
		t.Errorf("the streamed zone differs:\n%s\nSignZone's:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}
