package dnssec

import (
	"crypto"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin/pkg/cache"

	"github.com/miekg/dns"
)

// Window is the validity of a signature: its inception and expiration, in
// seconds since the Unix epoch (RFC 4034 §3.1.5).
type Window struct{ Inception, Expiration uint32 }

// DefaultPeriod is the period windows are aligned to: a week, as
// PowerDNS's (weeks that begin on Thursday at 00:00 UTC, as the Unix epoch
// did).
const DefaultPeriod = 7 * 24 * time.Hour

// WindowAt is the window of the signatures made at now with period p. The
// period that holds now begins at start (periods count from the Unix epoch,
// so every member whose clock is right picks the same one); the signatures
// are valid from start-p, for validators whose clocks are behind, to
// start+2p, so that one made at the end of a period is still valid for a
// whole period after it.
func WindowAt(now time.Time, p time.Duration) Window {
	sec := int64(p / time.Second)
	start := now.Unix() / sec * sec
	return Window{Inception: uint32(start - sec), Expiration: uint32(start + 2*sec)}
}

// Signer signs RRsets with a zone's keys. Its signatures are deterministic
// (RFC 6979 for ECDSA; Ed25519 is), and it keeps them in a bounded cache
// keyed by the key and a hash of the exact data signed: the window, and the
// RRset's records as given (owner, type, class, TTL, RDATA, in their
// order; the signature covers their canonical form, which they determine).
// A cached signature therefore never outlives what it signed: a change of
// the data is another key, and entries nothing asks for any more are
// evicted as others come in. A hit costs a hash of the records, not their
// canonical form.
type Signer struct {
	cache        *cache.Cache[signature]
	hits, misses atomic.Uint64
	// Counted, when set, is told of every signature asked for: whether
	// the cache had it.
	Counted func(hit bool)
	bufs    sync.Pool // *[]byte: records packed for the cache's key
}

// signature is a cache entry: the full hash it is for (the cache's key is
// its first 8 bytes) and the RRSIG made.
type signature struct {
	sum [sha256.Size]byte
	sig *dns.RRSIG
}

// NewSigner returns a Signer whose cache holds about entries signatures
// (CoreDNS's cache: 256 shards of at least 4 entries, random eviction).
func NewSigner(entries int) *Signer {
	s := &Signer{cache: cache.New[signature](max(entries, 1024))}
	s.bufs.New = func() any { b := make([]byte, 0, 512); return &b }
	return s
}

// Stats returns the cache's hits and misses so far.
func (s *Signer) Stats() (hits, misses uint64) { return s.hits.Load(), s.misses.Load() }

// Sign returns the RRSIG of rrset (records of one owner, class and type;
// the TTL of the first is the signed one) made with k over w. A wildcard
// RRset is signed at its owner (*.zone): the RRSIG's Labels field lets a
// validator check it for any name the wildcard answers (RFC 4035 §5.3.2).
func (s *Signer) Sign(k *Key, rrset []dns.RR, w Window) (*dns.RRSIG, error) {
	if len(rrset) == 0 {
		return nil, errors.New("no records to sign")
	}
	h := rrset[0].Header()
	// The cache's key: the key, the window, the records.
	bp := s.bufs.Get().(*[]byte)
	buf := append((*bp)[:0], k.id[:]...)
	buf = binary.BigEndian.AppendUint32(buf, w.Inception)
	buf = binary.BigEndian.AppendUint32(buf, w.Expiration)
	for _, rr := range rrset {
		off := len(buf)
		need := off + dns.Len(rr)
		if cap(buf) < need {
			buf = append(buf[:cap(buf)], make([]byte, need-cap(buf))...)
		}
		n, err := dns.PackRR(rr, buf[:need], off, nil, false)
		if err != nil {
			*bp = buf
			s.bufs.Put(bp)
			return nil, err
		}
		buf = buf[:n]
	}
	var e signature
	e.sum = sha256.Sum256(buf)
	*bp = buf
	s.bufs.Put(bp)
	key := binary.BigEndian.Uint64(e.sum[:8])
	if v, ok := s.cache.Get(key); ok && v.sum == e.sum {
		s.hits.Add(1)
		if s.Counted != nil {
			s.Counted(true)
		}
		out := *v.sig
		out.Hdr.Name = h.Name // the same name, in the case asked
		return &out, nil
	}
	s.misses.Add(1)
	if s.Counted != nil {
		s.Counted(false)
	}
	rrsig := &dns.RRSIG{
		Hdr:        dns.RR_Header{Name: h.Name, Rrtype: dns.TypeRRSIG, Class: h.Class, Ttl: h.Ttl},
		Algorithm:  k.DNSKEY.Algorithm,
		OrigTtl:    h.Ttl,
		Expiration: w.Expiration,
		Inception:  w.Inception,
		KeyTag:     k.Tag,
		SignerName: k.DNSKEY.Hdr.Name,
	}
	if err := rrsig.Sign(deterministic{k}, rrset); err != nil {
		return nil, err
	}
	kept := *rrsig
	e.sig = &kept
	s.cache.Add(key, e)
	return rrsig, nil
}

// deterministic is the crypto.Signer miekg/dns's RRSIG.Sign calls with the
// digest of the signed data (ECDSA: its SHA-256; Ed25519: the data
// itself): it signs without randomness.
type deterministic struct{ k *Key }

func (d deterministic) Public() crypto.PublicKey { return d.k.signer.Public() }

func (d deterministic) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	// nil: a deterministic signature (crypto/ecdsa: RFC 6979).
	return d.k.signer.Sign(nil, digest, opts)
}
