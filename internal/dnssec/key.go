// Package dnssec is what craftdns's online signing is made of: a zone's
// keys and their sealing under a key-encryption key, signature validity
// windows aligned to a period, deterministic signatures with a bounded cache
// keyed by the key and a hash of the exact data signed, and the records of
// RFC 9824's compact denial of existence.
//
// Every member of a group holds the same keys (they are in the replicated
// store, sealed) and signs with the same window at the same time, and both
// signature algorithms it offers are deterministic (ECDSA P-256 with RFC
// 6979 nonces, Ed25519), so every member gives the same bytes for the same
// signed answer. A signature is a function of the key and the signed data,
// which holds the RRset, its owner, TTL and the window: a cached signature
// is never stale, and a change of any of them is a new cache key.
package dnssec

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// Algorithms the signer offers: deterministic ones only.
const (
	ECDSAP256SHA256 = dns.ECDSAP256SHA256 // 13, the default
	ED25519         = dns.ED25519         // 15
)

// DNSKEY flags (RFC 4034 §2.1.1): a zone key, and the Secure Entry Point
// bit of a key-signing (or combined) key.
const (
	FlagZSK = dns.ZONE
	FlagKSK = dns.ZONE | dns.SEP
)

// Key is one signing key of a zone: its DNSKEY and its private key.
type Key struct {
	DNSKEY *dns.DNSKEY
	Tag    uint16
	signer crypto.Signer
	// id tells keys apart where tags may not (two keys of a zone can share
	// a tag): a hash of the public key.
	id [16]byte
}

// AlgorithmByName maps the names the Corefile takes to algorithms.
func AlgorithmByName(name string) (uint8, error) {
	switch strings.ToLower(name) {
	case "ecdsap256sha256", "ecdsa", "13":
		return ECDSAP256SHA256, nil
	case "ed25519", "15":
		return ED25519, nil
	}
	return 0, fmt.Errorf("algorithm %q: ECDSAP256SHA256 or ED25519 (signatures every member makes alike)", name)
}

// GenerateKey makes a new key of zone with algorithm alg and DNSKEY flags
// (FlagZSK or FlagKSK).
func GenerateKey(zone string, alg uint8, flags uint16) (*Key, error) {
	var (
		signer crypto.Signer
		err    error
	)
	switch alg {
	case ECDSAP256SHA256:
		signer, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case ED25519:
		_, signer, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, fmt.Errorf("algorithm %d: not one the signer offers", alg)
	}
	if err != nil {
		return nil, err
	}
	return newKey(zone, alg, flags, signer)
}

func newKey(zone string, alg uint8, flags uint16, signer crypto.Signer) (*Key, error) {
	if flags != FlagZSK && flags != FlagKSK {
		return nil, fmt.Errorf("DNSKEY flags %d: %d (zone signing) or %d (key signing)", flags, FlagZSK, FlagKSK)
	}
	k := &dns.DNSKEY{
		Hdr:       dns.RR_Header{Name: dns.CanonicalName(zone), Rrtype: dns.TypeDNSKEY, Class: dns.ClassINET, Ttl: 3600},
		Flags:     flags,
		Protocol:  3,
		Algorithm: alg,
	}
	switch pub := signer.Public().(type) {
	case *ecdsa.PublicKey:
		if alg != ECDSAP256SHA256 || pub.Curve != elliptic.P256() {
			return nil, errors.New("an ECDSA key that is not P-256 for algorithm 13")
		}
		b, err := pub.Bytes() // 0x04 || X || Y
		if err != nil {
			return nil, err
		}
		k.PublicKey = toBase64(b[1:])
	case ed25519.PublicKey:
		if alg != ED25519 {
			return nil, errors.New("an Ed25519 key for another algorithm")
		}
		k.PublicKey = toBase64(pub)
	default:
		return nil, fmt.Errorf("a %T key", pub)
	}
	key := &Key{DNSKEY: k, Tag: k.KeyTag(), signer: signer}
	sum := sha256.Sum256([]byte(k.PublicKey))
	copy(key.id[:], sum[:])
	return key, nil
}

// MarshalPrivate returns the private key, PKCS #8 DER.
func (k *Key) MarshalPrivate() ([]byte, error) { return x509.MarshalPKCS8PrivateKey(k.signer) }

// ParseKey returns the key of zone whose private key priv (PKCS #8 DER)
// is, with the DNSKEY flags it was made with; its DNSKEY is made again from
// the private key, so it cannot disagree with it.
func ParseKey(zone string, alg uint8, flags uint16, priv []byte) (*Key, error) {
	p, err := x509.ParsePKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	signer, ok := p.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key: a %T", p)
	}
	if e, ok := signer.(ed25519.PrivateKey); ok {
		signer = e // by value, as GenerateKey's
	}
	return newKey(zone, alg, flags, signer)
}

// DS returns the DS record of a key-signing key for the parent zone
// (SHA-256 digest, RFC 4509), with ttl.
func (k *Key) DS(ttl uint32) *dns.DS {
	ds := k.DNSKEY.ToDS(dns.SHA256)
	ds.Hdr.Ttl = ttl
	return ds
}

// CDS and CDNSKEY are the child's copies of DS and DNSKEY that ask the
// parent to change its DS (RFC 7344).
func (k *Key) CDS(ttl uint32) *dns.CDS {
	ds := k.DS(ttl)
	ds.Hdr.Rrtype = dns.TypeCDS
	return &dns.CDS{DS: *ds}
}

// CDNSKEY: see CDS.
func (k *Key) CDNSKEY(ttl uint32) *dns.CDNSKEY {
	c := &dns.CDNSKEY{DNSKEY: *k.DNSKEY}
	c.Hdr.Rrtype, c.Hdr.Ttl = dns.TypeCDNSKEY, ttl
	return c
}

func toBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
