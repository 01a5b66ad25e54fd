package fsm

import (
	"github.com/craftdns/craftdns/internal/dnssec"

	bolt "go.etcd.io/bbolt"
)

// BucketKeys holds the zones' DNSSEC key sets:
//
//	data.<n>/keys/<origin> -> dnssec.KeySet, JSON
//
// A key's private part is sealed by the member that made it, with the
// key-encryption key every member of the group holds (internal/dnssec): the
// state machine stores what it is given and reads none of it but its shape.
var BucketKeys = []byte("keys")

// applyKeys sets zone c.Zone's key set (OpKeys); with c.Absent only when it
// has none, so that of two members that make a zone's first keys at once
// one set wins.
func applyKeys(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if g.Bucket(BucketZones).Bucket([]byte(c.Zone)) == nil {
		return Result{}, nil, Errorf(ErrNotFound, "zone %q not found", c.Zone)
	}
	if _, err := dnssec.ParseKeySet(c.Keys); err != nil {
		return Result{}, nil, Errorf(ErrInvalid, "%v", err)
	}
	kb, err := g.CreateBucketIfNotExists(BucketKeys)
	if err != nil {
		return Result{}, nil, err
	}
	old := kb.Get([]byte(c.Zone))
	if c.Absent && old != nil {
		return Result{}, nil, Errorf(ErrConflict, "zone %q has keys already", c.Zone)
	}
	if ks, _ := dnssec.ParseKeySet(c.Keys); ks.Prev != "" && (old == nil || dnssec.SetHash(old) != ks.Prev) {
		return Result{}, nil, Errorf(ErrConflict, "zone %q: its keys changed since this change was made", c.Zone)
	}
	if err := kb.Put([]byte(c.Zone), append([]byte(nil), c.Keys...)); err != nil {
		return Result{}, nil, err
	}
	return Result{}, &Effect{Zone: c.Zone, Keys: true}, nil
}

// ZoneKeys returns zone's key set as stored (nil when it has none). The
// bytes are bbolt's: valid in the transaction only.
func ZoneKeys(g *bolt.Bucket, zone string) []byte {
	kb := g.Bucket(BucketKeys)
	if kb == nil {
		return nil
	}
	return kb.Get([]byte(zone))
}

// deleteKeys drops zone's keys with the zone.
func deleteKeys(g *bolt.Bucket, zone string) error {
	kb := g.Bucket(BucketKeys)
	if kb == nil {
		return nil
	}
	return kb.Delete([]byte(zone))
}
