package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// BucketKeys holds the zones' DNSSEC key sets:
//
//	data.<n>/keys/<origin> -> KeySet, JSON
//
// A key's private part is sealed by the member that made it, with the
// key-encryption key every member of the group holds (internal/dnssec): the
// state machine stores what it is given and reads none of it but its shape.
var BucketKeys = []byte("keys")

// KeySet is a zone's DNSSEC keys.
type KeySet struct {
	Keys []SealedKey `json:"keys"`
	// Prev, when set, is the hash of the key set this one replaces
	// (SetHash): it is applied only over that one, so that of two
	// proposers of a rollover's step one wins.
	Prev string `json:"prev,omitempty"`
}

// SetHash identifies a stored key set (its bytes' SHA-256, hex).
func SetHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SealedKey is one key of a zone.
type SealedKey struct {
	Tag       uint16 `json:"tag"`
	Algorithm uint8  `json:"algorithm"`
	Flags     uint16 `json:"flags"`
	// State: "active" (in the DNSKEY RRset, signing), "published" (in the
	// DNSKEY RRset before it signs: a rollover's new key), "retired" (in
	// the DNSKEY RRset after it signed, until the signatures it made have
	// expired from caches).
	State string `json:"state"`
	// Since is when the key entered its state (the proposer's clock, Unix
	// seconds); 0 in sets made before rollovers: Created.
	Since int64 `json:"since,omitempty"`
	// DS: the parent's DS should list it (a key-signing key): the zone
	// publishes its CDS and CDNSKEY.
	DS     bool   `json:"ds,omitempty"`
	Sealed []byte `json:"sealed"` // the private key, PKCS #8, sealed
	// Created is when the key was made (the proposer's clock, Unix
	// seconds).
	Created int64 `json:"created"`
}

// Key states.
const (
	KeyActive    = "active"
	KeyPublished = "published"
	KeyRetired   = "retired"
)

// maxKeys bounds a zone's keys: a rollover has at most a few at once.
const maxKeys = 8

// ParseKeySet decodes and checks a key set's shape.
func ParseKeySet(b []byte) (*KeySet, error) {
	var ks KeySet
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ks); err != nil {
		return nil, fmt.Errorf("key set: %v", err)
	}
	if len(ks.Keys) == 0 || len(ks.Keys) > maxKeys {
		return nil, fmt.Errorf("key set: %d keys, 1 to %d", len(ks.Keys), maxKeys)
	}
	active := false
	for _, k := range ks.Keys {
		switch {
		case k.State != KeyActive && k.State != KeyPublished && k.State != KeyRetired:
			return nil, fmt.Errorf("key %d: state %q, %q, %q or %q", k.Tag, k.State, KeyActive, KeyPublished, KeyRetired)
		case k.Flags != 256 && k.Flags != 257:
			return nil, fmt.Errorf("key %d: flags %d, 256 or 257", k.Tag, k.Flags)
		case len(k.Sealed) == 0:
			return nil, fmt.Errorf("key %d: no private key", k.Tag)
		}
		active = active || k.State == KeyActive
	}
	if !active {
		return nil, fmt.Errorf("key set: no active key")
	}
	return &ks, nil
}

// applyKeys sets zone c.Zone's key set (OpKeys); with c.Absent only when it
// has none, so that of two members that make a zone's first keys at once
// one set wins.
func applyKeys(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if g.Bucket(BucketZones).Bucket([]byte(c.Zone)) == nil {
		return Result{}, nil, Errorf(ErrNotFound, "zone %q not found", c.Zone)
	}
	if _, err := ParseKeySet(c.Keys); err != nil {
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
	if ks, _ := ParseKeySet(c.Keys); ks.Prev != "" && (old == nil || SetHash(old) != ks.Prev) {
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
