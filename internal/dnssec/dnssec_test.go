package dnssec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func rrs(t *testing.T, lines ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rr)
	}
	return out
}

func TestKeys(t *testing.T) {
	for _, alg := range []uint8{ECDSAP256SHA256, ED25519} {
		for _, flags := range []uint16{FlagZSK, FlagKSK} {
			k, err := GenerateKey("Example.ORG", alg, flags)
			if err != nil {
				t.Fatal(err)
			}
			if k.DNSKEY.Hdr.Name != "example.org." || k.DNSKEY.Flags != flags || k.DNSKEY.Algorithm != alg || k.Tag != k.DNSKEY.KeyTag() {
				t.Errorf("alg %d flags %d: %s (tag %d)", alg, flags, k.DNSKEY, k.Tag)
			}
			der, err := k.MarshalPrivate()
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseKey("example.org.", alg, flags, der)
			if err != nil {
				t.Fatal(err)
			}
			if back.DNSKEY.String() != k.DNSKEY.String() || back.id != k.id {
				t.Errorf("alg %d: parsed back as %s, made as %s", alg, back.DNSKEY, k.DNSKEY)
			}
			if _, err := ParseKey("example.org.", alg^ECDSAP256SHA256^ED25519, flags, der); err == nil {
				t.Errorf("alg %d: a key parsed for the other algorithm", alg)
			}
			ds := k.DS(3600)
			if ds.KeyTag != k.Tag || ds.DigestType != dns.SHA256 || ds.Algorithm != alg || ds.Hdr.Ttl != 3600 {
				t.Errorf("DS %s", ds)
			}
			if c := k.CDS(0); c.Hdr.Rrtype != dns.TypeCDS || c.Digest != ds.Digest {
				t.Errorf("CDS %s", c)
			}
			if c := k.CDNSKEY(0); c.Hdr.Rrtype != dns.TypeCDNSKEY || c.PublicKey != k.DNSKEY.PublicKey || k.DNSKEY.Hdr.Rrtype != dns.TypeDNSKEY {
				t.Errorf("CDNSKEY %s (DNSKEY %s)", c, k.DNSKEY)
			}
		}
	}
	if _, err := GenerateKey("example.org.", dns.RSASHA256, FlagZSK); err == nil {
		t.Error("an RSA key: its signatures are not the same on every member")
	}
	if _, err := GenerateKey("example.org.", ED25519, 1); err == nil {
		t.Error("a key with flags 1")
	}
	for name, want := range map[string]uint8{"ECDSAP256SHA256": 13, "ecdsa": 13, "ED25519": 15, "15": 15} {
		if got, err := AlgorithmByName(name); err != nil || got != want {
			t.Errorf("%s: %d %v", name, got, err)
		}
	}
	if _, err := AlgorithmByName("RSASHA256"); err == nil {
		t.Error("RSASHA256 taken")
	}
}

func TestKEK(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kek")
	if _, err := LoadKEK(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a missing file: %v", err)
	}
	if err := CreateKEK(path); err != nil {
		t.Fatal(err)
	}
	if err := CreateKEK(path); err == nil {
		t.Error("CreateKEK replaced a key")
	}
	kek, err := LoadKEK(path)
	if err != nil {
		t.Fatal(err)
	}
	ad := []byte("example.org. 257 12345")
	sealed := kek.Seal([]byte("private"), ad)
	if string(sealed) == string(kek.Seal([]byte("private"), ad)) {
		t.Error("two seals alike: the nonce is not new")
	}
	if p, err := kek.Open(sealed, ad); err != nil || string(p) != "private" {
		t.Errorf("open: %q %v", p, err)
	}
	if _, err := kek.Open(sealed, []byte("example.com. 257 12345")); err == nil {
		t.Error("opened as another zone's")
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := kek.Open(sealed, ad); err == nil {
		t.Error("opened a corrupt seal")
	}
	other := filepath.Join(dir, "other")
	if err := CreateKEK(other); err != nil {
		t.Fatal(err)
	}
	okek, err := LoadKEK(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := okek.Open(kek.Seal([]byte("x"), ad), ad); !errors.Is(err, ErrOtherKEK) {
		t.Errorf("another KEK: %v", err)
	}
	os.Chmod(path, 0o644)
	if _, err := LoadKEK(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key readable by others: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("c2hvcnQ=\n"), 0o600)
	if _, err := LoadKEK(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a short key: %v", err)
	}
}

func TestWindowAt(t *testing.T) {
	p := DefaultPeriod
	thu := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC) // a Thursday
	w := WindowAt(thu, p)
	for _, d := range []time.Duration{time.Second, time.Hour, 6*24*time.Hour + 23*time.Hour} {
		if got := WindowAt(thu.Add(d), p); got != w {
			t.Errorf("%v later: window %v, expected %v", d, got, w)
		}
	}
	if WindowAt(thu.Add(-time.Second), p) == w || WindowAt(thu.Add(p), p) == w {
		t.Error("the window does not change at the period's ends")
	}
	if w.Inception != uint32(thu.Add(-p).Unix()) || w.Expiration != uint32(thu.Add(2*p).Unix()) {
		t.Errorf("window %v", w)
	}
}

func TestSign(t *testing.T) {
	for _, alg := range []uint8{ECDSAP256SHA256, ED25519} {
		k, err := GenerateKey("example.org.", alg, FlagZSK)
		if err != nil {
			t.Fatal(err)
		}
		w := WindowAt(time.Now(), DefaultPeriod)
		set := rrs(t, "www.example.org. 300 IN A 192.0.2.2", "www.example.org. 300 IN A 192.0.2.1")
		s1, s2 := NewSigner(100), NewSigner(100)
		a, err := s1.Sign(k, set, w)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Verify(k.DNSKEY, set); err != nil || !a.ValidityPeriod(time.Now()) {
			t.Errorf("alg %d: %s does not verify: %v", alg, a, err)
		}
		// Another member's signer, another order of the records: the
		// same bytes.
		b, err := s2.Sign(k, []dns.RR{set[1], set[0]}, w)
		if err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Errorf("alg %d: two signers differ:\n%s\n%s", alg, a, b)
		}
		// The owner's case is not signed.
		upper := rrs(t, "WWW.Example.org. 300 IN A 192.0.2.2", "WWW.Example.org. 300 IN A 192.0.2.1")
		if u, err := NewSigner(10).Sign(k, upper, w); err != nil || u.Signature != a.Signature || u.Hdr.Name != "WWW.Example.org." {
			t.Errorf("alg %d: the owner's case changed the signature: %v %v", alg, u, err)
		}
		if hits, misses := s1.Stats(); hits != 0 || misses != 1 {
			t.Errorf("alg %d: %d hits %d misses", alg, hits, misses)
		}
		if c, _ := s1.Sign(k, set, w); c.String() != a.String() {
			t.Errorf("alg %d: a cache hit differs", alg)
		}
		if hits, _ := s1.Stats(); hits != 1 {
			t.Errorf("alg %d: the second signature was not a cache hit", alg)
		}
		// A change of the data, the TTL, the window or the key is another
		// signature.
		other, _ := GenerateKey("example.org.", alg, FlagZSK)
		for name, f := range map[string]func() (*dns.RRSIG, []dns.RR, *Key){
			"data": func() (*dns.RRSIG, []dns.RR, *Key) {
				s := rrs(t, "www.example.org. 300 IN A 192.0.2.3")
				r, _ := s1.Sign(k, s, w)
				return r, s, k
			},
			"ttl": func() (*dns.RRSIG, []dns.RR, *Key) {
				s := rrs(t, "www.example.org. 60 IN A 192.0.2.1", "www.example.org. 60 IN A 192.0.2.2")
				r, _ := s1.Sign(k, s, w)
				return r, s, k
			},
			"window": func() (*dns.RRSIG, []dns.RR, *Key) {
				r, _ := s1.Sign(k, set, WindowAt(time.Now().Add(DefaultPeriod), DefaultPeriod))
				return r, set, k
			},
			"key": func() (*dns.RRSIG, []dns.RR, *Key) { r, _ := s1.Sign(other, set, w); return r, set, other },
		} {
			_, m0 := s1.Stats()
			r, s, key := f()
			if _, m1 := s1.Stats(); m1 != m0+1 {
				t.Errorf("alg %d: a change of %s was a cache hit", alg, name)
			}
			if err := r.Verify(key.DNSKEY, s); err != nil {
				t.Errorf("alg %d, %s changed: %v", alg, name, err)
			}
		}
		// A wildcard's signature verifies for the names it answers.
		wild := rrs(t, "*.w.example.org. 300 IN TXT \"x\"")
		ws, err := s1.Sign(k, wild, w)
		if err != nil {
			t.Fatal(err)
		}
		expanded := rrs(t, "a.b.w.example.org. 300 IN TXT \"x\"")
		ws.Hdr.Name = "a.b.w.example.org."
		if err := ws.Verify(k.DNSKEY, expanded); err != nil || ws.Labels != 3 {
			t.Errorf("alg %d: the wildcard's signature (labels %d) for an expanded name: %v", alg, ws.Labels, err)
		}
	}
}

func TestCompactNSEC(t *testing.T) {
	k, _ := GenerateKey("example.org.", ECDSAP256SHA256, FlagZSK)
	s := NewSigner(10)
	w := WindowAt(time.Now(), DefaultPeriod)
	for _, tc := range []struct {
		name   string
		types  []uint16
		exists bool
		want   string
	}{
		{"Missing.example.org.", nil, false, "missing.example.org.\t300\tIN\tNSEC\t\\000.missing.example.org. RRSIG NSEC NXNAME"},
		{"www.example.org.", []uint16{dns.TypeAAAA, dns.TypeA, dns.TypeRRSIG}, true, "www.example.org.\t300\tIN\tNSEC\t\\000.www.example.org. A AAAA RRSIG NSEC"},
		{"ent.example.org.", nil, true, "ent.example.org.\t300\tIN\tNSEC\t\\000.ent.example.org. RRSIG NSEC"},
	} {
		nsec, err := CompactNSEC(tc.name, tc.types, tc.exists, 300)
		if err != nil {
			t.Fatal(err)
		}
		if nsec.String() != tc.want {
			t.Errorf("%s: %s, expected %s", tc.name, nsec, tc.want)
		}
		// It signs and packs as any RRset.
		sig, err := s.Sign(k, []dns.RR{nsec}, w)
		if err != nil {
			t.Fatal(err)
		}
		if err := sig.Verify(k.DNSKEY, []dns.RR{nsec}); err != nil {
			t.Errorf("%s: %v", nsec, err)
		}
		m := new(dns.Msg)
		m.Ns = []dns.RR{nsec, sig}
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if err := new(dns.Msg).Unpack(b); err != nil {
			t.Errorf("%s: %v", nsec, err)
		}
	}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57) + ".org."
	if _, err := CompactNSEC(long, nil, false, 300); err == nil {
		t.Error("a successor over 255 octets")
	}
}
