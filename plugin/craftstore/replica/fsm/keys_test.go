package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/dnssec"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// TestApplyKeys: a zone's key set is stored when its shape is right and the
// zone exists; Absent sets the first one only; a deleted zone loses its
// keys; the command survives its encoding.
func TestApplyKeys(t *testing.T) {
	db := openGeneration(t)
	set := []byte(`{"keys":[{"tag":1,"algorithm":13,"flags":257,"state":"active","ds":true,"sealed":"AQID","created":5}]}`)
	other := []byte(`{"keys":[{"tag":2,"algorithm":13,"flags":257,"state":"active","sealed":"AQID","created":6}]}`)
	apply := func(c *Command) (*Effect, error) {
		t.Helper()
		b, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if c, err = Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		var eff *Effect
		err = db.Update(func(tx *bolt.Tx) error {
			var err error
			_, eff, err = Apply(Generation(tx), c, 100)
			var fe *Error
			if errors.As(err, &fe) {
				return fe // a refusal: nothing of it must be written
			}
			return err
		})
		return eff, err
	}
	keys := func() string {
		var out string
		db.View(func(tx *bolt.Tx) error { out = string(ZoneKeys(Generation(tx), "example.org.")); return nil })
		return out
	}
	if _, err := apply(&Command{Op: OpKeys, Zone: "example.org.", Keys: set}); !errors.Is(err, ErrNotFound) {
		t.Errorf("keys of a zone that does not exist: %v", err)
	}
	if _, err := apply(&Command{Op: OpImportBegin, Zone: "example.org.", Import: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(&Command{Op: OpImportChunk, Zone: "example.org.", Import: 1, Add: []dns.RR{soaRR(t, 1), mustRR(t, "example.org. 300 IN NS ns1.example.org.")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(&Command{Op: OpImportCommit, Zone: "example.org.", Import: 1}); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"no keys":       `{"keys":[]}`,
		"a bad state":   `{"keys":[{"tag":1,"algorithm":13,"flags":257,"state":"new","sealed":"AQID"}]}`,
		"bad flags":     `{"keys":[{"tag":1,"algorithm":13,"flags":1,"state":"active","sealed":"AQID"}]}`,
		"no private":    `{"keys":[{"tag":1,"algorithm":13,"flags":257,"state":"active"}]}`,
		"none active":   `{"keys":[{"tag":1,"algorithm":13,"flags":257,"state":"published","sealed":"AQID"}]}`,
		"unknown field": `{"keys":[{"tag":1,"algorithm":13,"flags":257,"state":"active","sealed":"AQID","x":1}]}`,
		"not JSON":      `keys`,
	} {
		if _, err := apply(&Command{Op: OpKeys, Zone: "example.org.", Keys: []byte(bad)}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if keys() != "" {
		t.Fatal("a refused key set was stored")
	}
	eff, err := apply(&Command{Op: OpKeys, Zone: "example.org.", Keys: set, Absent: true})
	if err != nil || eff == nil || !eff.Keys || eff.Zone != "example.org." || keys() != string(set) {
		t.Fatalf("the first key set: %+v %v %q", eff, err, keys())
	}
	if _, err := apply(&Command{Op: OpKeys, Zone: "example.org.", Keys: other, Absent: true}); !errors.Is(err, ErrConflict) || keys() != string(set) {
		t.Errorf("a second first key set: %v, stored %q", err, keys())
	}
	if _, err := apply(&Command{Op: OpKeys, Zone: "example.org.", Keys: other}); err != nil || keys() != string(other) {
		t.Errorf("a new key set: %v, stored %q", err, keys())
	}
	// A rollover's step replaces the set it was made from, not another.
	step := []byte(`{"keys":[{"tag":3,"algorithm":13,"flags":257,"state":"active","sealed":"AQID"},{"tag":4,"algorithm":13,"flags":256,"state":"retired","sealed":"AQID","since":9}],"prev":"` + dnssec.SetHash(set) + `"}`)
	if _, err := apply(&Command{Op: OpKeys, Zone: "example.org.", Keys: step}); !errors.Is(err, ErrConflict) || keys() != string(other) {
		t.Errorf("a step over another set: %v, stored %q", err, keys())
	}
	step = []byte(strings.Replace(string(step), dnssec.SetHash(set), dnssec.SetHash(other), 1))
	if _, err := apply(&Command{Op: OpKeys, Zone: "example.org.", Keys: step}); err != nil || keys() != string(step) {
		t.Errorf("a step over its set: %v, stored %q", err, keys())
	}
	// As a transaction's part (a router's, over every shard of the
	// zone): checked at prepare, written at commit, one at a time.
	part := func(keys []byte, absent bool) []byte {
		b, err := (&Command{Op: OpKeys, Zone: "example.org.", Keys: keys, Absent: absent}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	prepare := func(id byte, p []byte) error {
		_, err := apply(&Command{Op: OpTxPrepare, Zone: "example.org.", Tx: [16]byte{id}, Time: 100, Part: p, Meta: []byte(`{}`)})
		return err
	}
	if err := prepare(1, part(set, true)); !errors.Is(err, ErrConflict) {
		t.Errorf("a prepared first key set where one is: %v", err)
	}
	next := []byte(strings.Replace(string(step), dnssec.SetHash(other), dnssec.SetHash(step), 1))
	if err := prepare(2, part(next, false)); err != nil || keys() != string(step) {
		t.Fatalf("a prepared step: %v, stored %q", err, keys())
	}
	if err := prepare(3, part(next, false)); !errors.Is(err, ErrBusy) {
		t.Errorf("a second step while one is prepared: %v", err)
	}
	eff, err = apply(&Command{Op: OpTxCommit, Zone: "example.org.", Tx: [16]byte{2}})
	if err != nil || eff == nil || !eff.Keys || eff.Tx == nil || keys() != string(next) {
		t.Fatalf("the step committed: %+v %v, stored %q", eff, err, keys())
	}
	if err := prepare(4, part(next, false)); !errors.Is(err, ErrConflict) {
		t.Errorf("the same step again: %v", err)
	}
	if _, err := apply(&Command{Op: OpDeleteZone, Zone: "example.org."}); err != nil || keys() != "" {
		t.Errorf("the zone deleted: %v, keys %q", err, keys())
	}
}
