package craftstore

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
)

// TestRolloverSteps: a ZSK rollover by pre-publication goes new key
// published, then signing with the old one retired, then the old one gone,
// each step after its wait, each over the set before it (Prev); the KSK
// stays; every set opens with the KEK, signing with one ZSK at a time.
func TestRolloverSteps(t *testing.T) {
	kekFile := filepath.Join(t.TempDir(), "kek")
	if err := dnssec.CreateKEK(kekFile); err != nil {
		t.Fatal(err)
	}
	cfg := dnssecConfig{on: true, kekFile: kekFile, zskSet: true, zskLifetime: 100 * time.Second, rolloverWait: 10 * time.Second}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	set, err := newKeySet("example.org.", cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	states := func(raw []byte) (zsk map[string]int, tags []uint16) {
		ks, err := fsm.ParseKeySet(raw)
		if err != nil {
			t.Fatal(err)
		}
		zsk = map[string]int{}
		for _, k := range ks.Keys {
			if k.Flags == dnssec.FlagZSK {
				zsk[k.State]++
			}
			tags = append(tags, k.Tag)
		}
		keys, err := openKeySet("example.org.", raw, cfg.kek)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys.Signing) != 2 || len(keys.DS) != 1 {
			t.Errorf("signing with %d keys, %d for the DS: %s", len(keys.Signing), len(keys.DS), describeKeys(raw))
		}
		return zsk, tags
	}
	step := func(now time.Time, want map[string]int) {
		t.Helper()
		next, err := rolloverStep("example.org.", set, cfg, now)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			if next != nil {
				t.Fatalf("at %v: a step nobody asked for: %s", now.Sub(t0), describeKeys(next))
			}
			return
		}
		if next == nil {
			t.Fatalf("at %v: no step, expected ZSKs %v", now.Sub(t0), want)
		}
		ks, _ := fsm.ParseKeySet(next)
		if ks.Prev != fsm.SetHash(set) {
			t.Errorf("at %v: the step is not over the set before it", now.Sub(t0))
		}
		zsk, _ := states(next)
		for st, n := range want {
			if zsk[st] != n {
				t.Errorf("at %v: ZSKs %v, expected %v (%s)", now.Sub(t0), zsk, want, describeKeys(next))
			}
		}
		set = next
	}
	states(set)
	step(t0.Add(99*time.Second), nil)
	step(t0.Add(100*time.Second), map[string]int{fsm.KeyActive: 1, fsm.KeyPublished: 1})
	step(t0.Add(109*time.Second), nil)
	step(t0.Add(110*time.Second), map[string]int{fsm.KeyActive: 1, fsm.KeyRetired: 1})
	step(t0.Add(119*time.Second), nil)
	step(t0.Add(120*time.Second), map[string]int{fsm.KeyActive: 1})
	step(t0.Add(209*time.Second), nil) // the new ZSK signs from 110 s
	step(t0.Add(210*time.Second), map[string]int{fsm.KeyActive: 1, fsm.KeyPublished: 1})

	// A combined key does not roll over here; off is off.
	csk := cfg
	csk.csk = true
	one, _ := newKeySet("example.org.", csk, t0)
	if next, err := rolloverStep("example.org.", one, csk, t0.Add(1000*time.Second)); next != nil || err != nil {
		t.Errorf("a CSK rolled: %v", err)
	}
	off := cfg
	off.zskLifetime = 0
	if next, _ := rolloverStep("example.org.", set, off, t0.Add(10000*time.Second)); next != nil {
		t.Error("a rollover with dnssec_zsk_rollover off")
	}
}
