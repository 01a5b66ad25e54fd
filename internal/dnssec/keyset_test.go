package dnssec

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestRolloverSteps: a ZSK rollover by pre-publication goes new key
// published, then signing with the old one retired, then the old one gone,
// each step after its wait, each over the set before it (Prev); the KSK
// stays; every set opens with the KEK, signing with one ZSK at a time.
func TestRolloverSteps(t *testing.T) {
	cfg, t0, set := rolloverStart(t, Config{Policy: Policy{ZSKLifetime: 100 * time.Second, RolloverWait: 10 * time.Second}})
	states := func(raw []byte) (zsk map[string]int, tags []uint16) {
		ks, err := ParseKeySet(raw)
		if err != nil {
			t.Fatal(err)
		}
		zsk = map[string]int{}
		for _, k := range ks.Keys {
			if k.Flags == FlagZSK {
				zsk[k.State]++
			}
			tags = append(tags, k.Tag)
		}
		keys, err := OpenKeySet("example.org.", raw, cfg.KEK)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys.Signing) != 2 || len(keys.DS) != 1 {
			t.Errorf("signing with %d keys, %d for the DS: %s", len(keys.Signing), len(keys.DS), DescribeKeys(raw))
		}
		return zsk, tags
	}
	step := func(now time.Time, want map[string]int) {
		t.Helper()
		next, err := cfg.RolloverStep("example.org.", set, now)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			if next != nil {
				t.Fatalf("at %v: a step nobody asked for: %s", now.Sub(t0), DescribeKeys(next))
			}
			return
		}
		if next == nil {
			t.Fatalf("at %v: no step, expected ZSKs %v", now.Sub(t0), want)
		}
		ks, _ := ParseKeySet(next)
		if ks.Prev != SetHash(set) {
			t.Errorf("at %v: the step is not over the set before it", now.Sub(t0))
		}
		zsk, _ := states(next)
		for st, n := range want {
			if zsk[st] != n {
				t.Errorf("at %v: ZSKs %v, expected %v (%s)", now.Sub(t0), zsk, want, DescribeKeys(next))
			}
		}
		set = next
	}
	states(set)
	step(t0.Add(99*time.Second), nil)
	step(t0.Add(100*time.Second), map[string]int{KeyActive: 1, KeyPublished: 1})
	step(t0.Add(109*time.Second), nil)
	step(t0.Add(110*time.Second), map[string]int{KeyActive: 1, KeyRetired: 1})
	step(t0.Add(119*time.Second), nil)
	step(t0.Add(120*time.Second), map[string]int{KeyActive: 1})
	step(t0.Add(209*time.Second), nil) // the new ZSK signs from 110 s
	step(t0.Add(210*time.Second), map[string]int{KeyActive: 1, KeyPublished: 1})

	// A combined key does not roll over here; off is off.
	csk := cfg
	csk.CSK = true
	one, _ := csk.NewKeySet("example.org.", t0)
	if next, err := csk.RolloverStep("example.org.", one, t0.Add(1000*time.Second)); next != nil || err != nil {
		t.Errorf("a CSK rolled: %v", err)
	}
	off := cfg
	off.ZSKLifetime = 0
	if next, _ := off.RolloverStep("example.org.", set, t0.Add(10000*time.Second)); next != nil {
		t.Error("a rollover with dnssec_zsk_rollover off")
	}
}

// TestKSKRolloverSteps: at its lifetime a new KSK joins the old in signing
// the DNSKEY RRset and takes the CDS; the old one retires only once the
// parent lists the new key's DS and not the old one's, and goes after the
// wait.
func TestKSKRolloverSteps(t *testing.T) {
	cfg, t0, set := rolloverStart(t, Config{Policy: Policy{KSKLifetime: 100 * time.Second, RolloverWait: 10 * time.Second, Parents: []string{"192.0.2.1:53"}}})
	keysOf := func(raw []byte) *Keys {
		k, err := OpenKeySet("example.org.", raw, cfg.KEK)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	first := keysOf(set).DS[0]
	var parent []*dns.DS
	parentDS := func() ([]*dns.DS, error) { return parent, nil }
	parent = []*dns.DS{first.DS(3600)}
	step := func(now time.Time, due bool) *Keys {
		t.Helper()
		next, err := cfg.KSKStep("example.org.", set, now, parentDS)
		if err != nil {
			t.Fatal(err)
		}
		if (next != nil) != due {
			t.Fatalf("at %v: a step %v, expected %v", now.Sub(t0), next != nil, due)
		}
		if next == nil {
			return nil
		}
		set = next
		return keysOf(set)
	}
	step(t0.Add(99*time.Second), false)
	k := step(t0.Add(100*time.Second), true)
	if len(k.DS) != 1 || k.DS[0].Tag == first.Tag || len(kskSigning(k)) != 2 {
		t.Fatalf("after the first step: DS %d keys, %d KSKs signing", len(k.DS), len(kskSigning(k)))
	}
	second := k.DS[0]
	step(t0.Add(200*time.Second), false) // the parent still lists the old key
	parent = append(parent, second.DS(3600))
	step(t0.Add(201*time.Second), false) // both: not yet
	parent = []*dns.DS{second.DS(3600)}
	k = step(t0.Add(202*time.Second), true)
	if ks := kskSigning(k); len(ks) != 1 || ks[0].Tag != second.Tag || len(k.Published) != 1 || k.Published[0].Tag != first.Tag {
		t.Fatalf("after the parent's change: signing %v, published %v", kskSigning(k), k.Published)
	}
	step(t0.Add(211*time.Second), false)
	k = step(t0.Add(212*time.Second), true)
	if len(k.Published) != 0 || len(k.DNSKEYs()) != 2 {
		t.Fatalf("after the wait: %d published, %d DNSKEYs", len(k.Published), len(k.DNSKEYs()))
	}
}

// kskSigning are the signing key-signing keys of k.
func kskSigning(k *Keys) []*Key {
	var out []*Key
	for _, key := range k.Signing {
		if key.DNSKEY.Flags == FlagKSK {
			out = append(out, key)
		}
	}
	return out
}

// rolloverStart completes cfg (signing on, a new key-encryption key, the
// rollover's settings given) and makes example.org's first keys with it
// at t0.
func rolloverStart(t *testing.T, cfg Config) (Config, time.Time, []byte) {
	t.Helper()
	cfg.On, cfg.zskSet = true, true
	cfg.KEKFile = filepath.Join(t.TempDir(), "kek")
	if err := CreateKEK(cfg.KEKFile); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	set, err := cfg.NewKeySet("example.org.", t0)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, t0, set
}
