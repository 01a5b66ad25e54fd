package dnssec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// A zone's keys as the replicated store keeps them: a KeySet, JSON, whose
// private keys are sealed with the key-encryption key (kek.go). The
// members' state machine stores a set it is given and reads nothing of it
// but its shape; whoever makes a set or its next step (a group's leader,
// or in a sharded deployment a router, over every shard at once) uses the
// functions here, so that every maker takes the same steps.

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
		case k.Flags != FlagZSK && k.Flags != FlagKSK:
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

// KeyTTL is the TTL of the DNSKEY, CDS and CDNSKEY RRsets.
const KeyTTL = 3600

// sealAD binds a sealed private key to its zone and key.
func sealAD(zone string, flags uint16, alg uint8, tag uint16) []byte {
	return fmt.Appendf(nil, "%s %d %d %d", zone, flags, alg, tag)
}

// OpenKeySet opens the key set raw of zone with kek.
func OpenKeySet(zone string, raw []byte, kek *KEK) (*Keys, error) {
	ks, err := ParseKeySet(raw)
	if err != nil {
		return nil, err
	}
	keys := &Keys{Zone: zone, TTL: KeyTTL}
	for _, sk := range ks.Keys {
		priv, err := kek.Open(sk.Sealed, sealAD(zone, sk.Flags, sk.Algorithm, sk.Tag))
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", sk.Tag, err)
		}
		k, err := ParseKey(zone, sk.Algorithm, sk.Flags, priv)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", sk.Tag, err)
		}
		if k.Tag != sk.Tag {
			return nil, fmt.Errorf("key %d: its private key has the tag %d", sk.Tag, k.Tag)
		}
		if sk.State == KeyActive {
			keys.Signing = append(keys.Signing, k)
		} else { // published before it signs, or retired after
			keys.Published = append(keys.Published, k)
		}
		if sk.DS {
			keys.DS = append(keys.DS, k)
		}
	}
	return keys, nil
}

// Policy is how a zone's keys are made and rolled (the dnssec_* lines).
type Policy struct {
	Algorithm uint8
	CSK       bool // one combined key (flags 257) instead of a KSK and a ZSK
	// ZSKLifetime is how long a zone-signing key signs before the next
	// replaces it; 0: never. RolloverWait is each of a rollover's waits:
	// the new key published before it signs, the old one published after
	// it stopped (at least the DNSKEY TTL and the zone's largest TTL, so
	// that no cache holds a signature whose key it cannot find).
	ZSKLifetime  time.Duration
	RolloverWait time.Duration
	// KSKLifetime is how long a key-signing key serves before the next
	// replaces it; 0: never. Parents are the parent zone's servers,
	// asked for the zone's DS: the old KSK goes once they list only the
	// new one's (the registry acted on the CDS).
	KSKLifetime time.Duration
	Parents     []string
	KEK         *KEK
}

// NewKeySet makes zone's first keys: a key-signing and a zone-signing key,
// or one combined key, sealed with the policy's KEK.
func (p *Policy) NewKeySet(zone string, now time.Time) ([]byte, error) {
	flags := []uint16{FlagKSK, FlagZSK}
	if p.CSK {
		flags = flags[:1]
	}
	var ks KeySet
	for _, f := range flags {
		sk, err := p.newKey(zone, p.Algorithm, f, now)
		if err != nil {
			return nil, err
		}
		sk.DS = f == FlagKSK
		ks.Keys = append(ks.Keys, sk)
	}
	return json.Marshal(ks)
}

// newKey makes one key, active, sealed.
func (p *Policy) newKey(zone string, alg uint8, flags uint16, now time.Time) (SealedKey, error) {
	k, err := GenerateKey(zone, alg, flags)
	if err != nil {
		return SealedKey{}, err
	}
	der, err := k.MarshalPrivate()
	if err != nil {
		return SealedKey{}, err
	}
	return SealedKey{Tag: k.Tag, Algorithm: alg, Flags: flags, State: KeyActive,
		Sealed: p.KEK.Seal(der, sealAD(zone, flags, alg, k.Tag)), Created: now.Unix(), Since: now.Unix()}, nil
}

// since is when key k entered its state.
func since(k SealedKey) time.Time {
	if k.Since != 0 {
		return time.Unix(k.Since, 0)
	}
	return time.Unix(k.Created, 0)
}

// Step returns the key set that follows raw, zone's, at now: a ZSK
// rollover's step (RolloverStep), else a KSK rollover's (KSKStep, which
// may ask the parent's servers); nil when nothing is due. kind says
// which.
func (p *Policy) Step(zone string, raw []byte, now time.Time) (step []byte, kind string, err error) {
	if step, err = p.RolloverStep(zone, raw, now); err != nil || step != nil {
		return step, "ZSK", err
	}
	step, err = p.KSKStep(zone, raw, now, func() ([]*dns.DS, error) { return AskParents(zone, p.Parents) })
	return step, "KSK", err
}

// RolloverStep returns the key set that follows raw, zone's, at now in a
// pre-publication ZSK rollover (RFC 6781 section 4.1.1.1), or nil when
// nothing is due:
//
//  1. the active ZSK has signed for the lifetime: a new ZSK is published;
//  2. it has been published for the wait: it signs, the old one retires
//     (still published);
//  3. the retired one has been published for the wait since: it goes.
//
// A combined key (CSK) does not roll over here. The step carries the hash
// of raw: it applies over raw only.
func (p *Policy) RolloverStep(zone string, raw []byte, now time.Time) ([]byte, error) {
	ks, err := ParseKeySet(raw)
	if err != nil {
		return nil, err
	}
	if p.ZSKLifetime <= 0 {
		return nil, nil
	}
	var active, published, retired []int
	for i, k := range ks.Keys {
		if k.Flags != FlagZSK {
			continue
		}
		switch k.State {
		case KeyActive:
			active = append(active, i)
		case KeyPublished:
			published = append(published, i)
		case KeyRetired:
			retired = append(retired, i)
		}
	}
	if len(active) == 0 {
		return nil, nil // a CSK zone
	}
	next := KeySet{Prev: SetHash(raw)}
	switch {
	case len(retired) > 0 && !now.Before(since(ks.Keys[retired[0]]).Add(p.RolloverWait)):
		for i, k := range ks.Keys {
			if i != retired[0] {
				next.Keys = append(next.Keys, k)
			}
		}
	case len(published) > 0 && !now.Before(since(ks.Keys[published[0]]).Add(p.RolloverWait)):
		for i, k := range ks.Keys {
			switch {
			case i == published[0]:
				k.State, k.Since = KeyActive, now.Unix()
			case k.Flags == FlagZSK && k.State == KeyActive:
				k.State, k.Since = KeyRetired, now.Unix()
			}
			next.Keys = append(next.Keys, k)
		}
	case len(published) == 0 && len(retired) == 0 && !now.Before(since(ks.Keys[active[0]]).Add(p.ZSKLifetime)):
		sk, err := p.newKey(zone, ks.Keys[active[0]].Algorithm, FlagZSK, now)
		if err != nil {
			return nil, err
		}
		sk.State = KeyPublished
		next.Keys = append(ks.Keys, sk)
	default:
		return nil, nil
	}
	return json.Marshal(next)
}

// KSKStep returns the key set that follows raw, zone's, at now in a KSK
// rollover driven by CDS (RFC 7344; the double-signature rollover of RFC
// 6781 section 4.1.2), or nil when nothing is due. parentDS asks the
// parent zone's servers for the zone's DS RRset.
//
//  1. the KSK has served for its lifetime: a new one is made; both sign
//     the DNSKEY RRset, and CDS and CDNSKEY list only the new one, which
//     asks the parent (its registry's CDS scanner) to change the DS;
//  2. the parent's servers list the new key's DS and not the old one's:
//     the old KSK is retired (published, not signing);
//  3. after the wait it goes.
func (p *Policy) KSKStep(zone string, raw []byte, now time.Time, parentDS func() ([]*dns.DS, error)) ([]byte, error) {
	if p.KSKLifetime <= 0 {
		return nil, nil
	}
	ks, err := ParseKeySet(raw)
	if err != nil {
		return nil, err
	}
	var listed, leaving, retired []int // active KSKs the DS lists, and not; retired KSKs
	for i, k := range ks.Keys {
		if k.Flags != FlagKSK {
			continue
		}
		switch {
		case k.State == KeyRetired:
			retired = append(retired, i)
		case k.State == KeyActive && k.DS:
			listed = append(listed, i)
		case k.State == KeyActive:
			leaving = append(leaving, i)
		}
	}
	if len(listed) == 0 {
		return nil, nil
	}
	next := KeySet{Prev: SetHash(raw)}
	switch {
	case len(retired) > 0:
		if now.Before(since(ks.Keys[retired[0]]).Add(p.RolloverWait)) {
			return nil, nil
		}
		for i, k := range ks.Keys {
			if i != retired[0] {
				next.Keys = append(next.Keys, k)
			}
		}
	case len(leaving) > 0:
		ds, err := parentDS()
		if err != nil {
			return nil, err
		}
		if !parentLists(zone, ds, ks.Keys, listed, leaving) {
			return nil, nil
		}
		for i, k := range ks.Keys {
			if i == leaving[0] {
				k.State, k.Since = KeyRetired, now.Unix()
			}
			next.Keys = append(next.Keys, k)
		}
	case !now.Before(since(ks.Keys[listed[0]]).Add(p.KSKLifetime)):
		sk, err := p.newKey(zone, ks.Keys[listed[0]].Algorithm, FlagKSK, now)
		if err != nil {
			return nil, err
		}
		sk.DS = true
		for i, old := range ks.Keys {
			if i == listed[0] {
				old.DS, old.Since = false, now.Unix()
			}
			next.Keys = append(next.Keys, old)
		}
		next.Keys = append(next.Keys, sk)
	default:
		return nil, nil
	}
	return json.Marshal(next)
}

// parentLists reports whether the parent's DS RRset ds lists the keys
// listed (by tag and algorithm) and none of the keys leaving.
func parentLists(zone string, ds []*dns.DS, keys []SealedKey, listed, leaving []int) bool {
	has := func(k SealedKey) bool {
		for _, d := range ds {
			if d.KeyTag == k.Tag && d.Algorithm == k.Algorithm && dns.CanonicalName(d.Hdr.Name) == zone {
				return true
			}
		}
		return false
	}
	for _, i := range listed {
		if !has(keys[i]) {
			return false
		}
	}
	for _, i := range leaving {
		if has(keys[i]) {
			return false
		}
	}
	return true
}

// AskParents asks each of servers (host:port) for zone's DS RRset, and
// returns it when they all give the same one.
func AskParents(zone string, servers []string) ([]*dns.DS, error) {
	var first []*dns.DS
	for i, srv := range servers {
		q := new(dns.Msg)
		q.SetQuestion(zone, dns.TypeDS)
		q.RecursionDesired = false
		c := &dns.Client{Timeout: 2 * time.Second}
		r, _, err := c.Exchange(q, srv)
		if err != nil {
			return nil, fmt.Errorf("parent %s: %w", srv, err)
		}
		var ds []*dns.DS
		for _, rr := range r.Answer {
			if d, ok := rr.(*dns.DS); ok {
				ds = append(ds, d)
			}
		}
		if i == 0 {
			first = ds
		} else if len(ds) != len(first) {
			return nil, nil // not every server has the change yet
		}
	}
	return first, nil
}

// DescribeKeys says a key set's keys and states, for the log.
func DescribeKeys(raw []byte) string {
	ks, err := ParseKeySet(raw)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, k := range ks.Keys {
		kind := "ZSK"
		if k.Flags == FlagKSK {
			kind = "KSK"
		}
		out = append(out, fmt.Sprintf("%s %d %s", kind, k.Tag, k.State))
	}
	return strings.Join(out, ", ")
}
