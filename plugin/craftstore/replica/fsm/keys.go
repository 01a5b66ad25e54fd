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
// one set wins; with a Prev in the set only over that one. As a
// transaction's part (a router sets a zone's keys on every shard of it at
// once, in one commit), o.dry checks without writing.
func applyKeys(g *bolt.Bucket, c *Command, o applyOpts) (Result, *Effect, error) {
	if g.Bucket(BucketZones).Bucket([]byte(c.Zone)) == nil {
		return Result{}, nil, Errorf(ErrNotFound, "zone %q not found", c.Zone)
	}
	ks, err := dnssec.ParseKeySet(c.Keys)
	if err != nil {
		return Result{}, nil, Errorf(ErrInvalid, "%v", err)
	}
	old := ZoneKeys(g, c.Zone)
	if c.Absent && old != nil {
		return Result{}, nil, Errorf(ErrConflict, "zone %q has keys already", c.Zone)
	}
	if ks.Prev != "" && (old == nil || dnssec.SetHash(old) != ks.Prev) {
		return Result{}, nil, Errorf(ErrConflict, "zone %q: its keys changed since this change was made", c.Zone)
	}
	if o.dry {
		return Result{}, nil, nil
	}
	kb, err := g.CreateBucketIfNotExists(BucketKeys)
	if err != nil {
		return Result{}, nil, err
	}
	if err := kb.Put([]byte(c.Zone), append([]byte(nil), c.Keys...)); err != nil {
		return Result{}, nil, err
	}
	return Result{}, &Effect{Zone: c.Zone, Keys: true}, nil
}

// keysLock is the name a prepared key set part holds (with zone ""): two
// routers' steps of one zone's keys run one after the other. No query
// and no record write meets it.
func keysLock(zone string) string { return "keys " + zone }

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
