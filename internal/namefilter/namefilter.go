// Package namefilter is the existence filter a craftstore member publishes
// of the names one zone holds on it, and that craftroute consults before it
// asks every shard about a name its owner does not hold (issue 54, item 3).
//
// A Filter is a Bloom filter over canonical name keys (dnsname.CanonicalKey:
// labels from the root down, each followed by a zero byte). It holds every
// name that exists on the member, as data or as an empty non-terminal: a
// key's ancestors are its prefixes that end with a zero byte, so adding a
// name adds them all in one pass over its key. It never says a name it
// holds is absent; it says one it does not hold is present with a small
// probability (about 1% at 10 bits a name, less when the size rounds up).
// A name once added stays: deleted names make the filter only less precise,
// and its user fetches it again from time to time.
//
// Every filter has a random seed of its own, chosen by whoever builds it,
// so that nobody can choose names that collide offline. Filters are safe
// for concurrent Add and May calls (the bits are set and read atomically).
package namefilter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
)

// BitsPerName is the size a filter is made with, per name it is to hold,
// before rounding up to a power of two.
const BitsPerName = 10

// MinBits and MaxBits bound a filter's size: 64 bytes to 512 MiB.
const (
	minLog2, maxLog2 = 9, 32
	MinBits          = 1 << minLog2
	MaxBits          = 1 << maxLog2
)

// MediaType is the content type of an encoded filter in the members' API
// (GET /v1/zones/{zone}/filter).
const MediaType = "application/x.craftdns-namefilter"

// HeaderLen is the length of an encoded filter's header.
const HeaderLen = 48

// magic starts an encoded filter (version 1).
var magic = [4]byte{'C', 'N', 'F', '1'}

// Filter is a Bloom filter of canonical name keys.
type Filter struct {
	seed  uint64
	k     uint32
	log2  uint8
	words []uint64 // bits, read and set atomically
	names atomic.Int64
	// Index and Epoch say the state the filter was built from: the
	// member's applied index and its shard map's epoch (0: none).
	Index, Epoch uint64
}

// New returns an empty filter sized for names names with the given seed.
func New(names int, seed uint64) *Filter {
	want := uint64(max(names, 1)) * BitsPerName
	log2 := bits.Len64(want - 1)
	log2 = min(max(log2, minLog2), maxLog2)
	m := float64(uint64(1) << log2)
	k := uint32(math.Round(m / float64(max(names, 1)) * math.Ln2))
	k = min(max(k, 1), 12)
	return &Filter{seed: seed, k: k, log2: uint8(log2), words: make([]uint64, 1<<(log2-6))}
}

// Names returns how many names were added (each counted once per Add or
// AddKeys that reached it: see AddKeys for keys in canonical order).
func (f *Filter) Names() int64 { return f.names.Load() }

// Capacity returns the number of names the filter was sized for.
func (f *Filter) Capacity() int64 { return int64(len(f.words)) * 64 / BitsPerName }

// Bytes returns the size of the filter's bits.
func (f *Filter) Bytes() int { return len(f.words) * 8 }

// FNV-1a, 64 bits, seeded by xor into its offset basis; each prefix's state
// is finished with murmur3's fmix64 so that the probes spread.
const (
	fnvBasis = 14695981039346656037
	fnvPrime = 1099511628211
)

func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// set sets the k bits of the name whose key hashed to state h.
func (f *Filter) set(h uint64) {
	h1 := fmix64(h)
	h2 := fmix64(h1^f.seed) | 1
	mask := uint64(1)<<f.log2 - 1
	for i := uint32(0); i < f.k; i++ {
		b := h1 & mask
		w := &f.words[b>>6]
		bit := uint64(1) << (b & 63)
		if atomic.LoadUint64(w)&bit == 0 {
			atomic.OrUint64(w, bit)
		}
		h1 += h2
	}
}

// has reports whether the k bits of the name whose key hashed to h are set.
func (f *Filter) has(h uint64) bool {
	h1 := fmix64(h)
	h2 := fmix64(h1^f.seed) | 1
	mask := uint64(1)<<f.log2 - 1
	for i := uint32(0); i < f.k; i++ {
		b := h1 & mask
		if atomic.LoadUint64(&f.words[b>>6])&(uint64(1)<<(b&63)) == 0 {
			return false
		}
		h1 += h2
	}
	return true
}

// AddKey adds the name of canonical key key and every ancestor of it (the
// key's prefixes that end with a zero byte).
func (f *Filter) AddKey(key []byte) { f.AddKeys(key, 0) }

// AddKeys adds the names of key's prefixes ending with a zero byte past
// offset from: with from the length of the longest such prefix key shares
// with the key added before it, keys in canonical order add each name once
// and count it once.
func (f *Filter) AddKeys(key []byte, from int) {
	h := uint64(fnvBasis) ^ f.seed
	n := int64(0)
	for i, c := range key {
		h ^= uint64(c)
		h *= fnvPrime
		if c == 0 && i >= from {
			f.set(h)
			n++
		}
	}
	f.names.Add(n)
}

// SharedPrefix returns the length of the longest prefix of a and b that
// ends with a zero byte: the key of their deepest common ancestor (0 for
// the root).
func SharedPrefix(a, b []byte) int {
	n := 0
	for i := 0; i < len(a) && i < len(b) && a[i] == b[i]; i++ {
		if a[i] == 0 {
			n = i + 1
		}
	}
	return n
}

// MayHold reports whether the filter may hold a name that would make a
// shard's answer about the name of canonical key key differ from "absent
// below an ancestor of labels labels": the name itself or an ancestor of it
// with more than labels labels (the name exists there, or a deeper closest
// encloser does), or the wildcard "*.<the ancestor of labels labels>". It
// is false only when the filter holds none of them.
func (f *Filter) MayHold(key []byte, labels int) bool {
	h := uint64(fnvBasis) ^ f.seed
	n := 0
	if labels == 0 && f.wildcardAt(h) {
		return true
	}
	for _, c := range key {
		h ^= uint64(c)
		h *= fnvPrime
		if c != 0 {
			continue
		}
		n++
		switch {
		case n == labels:
			if f.wildcardAt(h) {
				return true
			}
		case n > labels:
			if f.has(h) {
				return true
			}
		}
	}
	return false
}

// wildcardAt reports whether the filter may hold "*.<name>", where h is the
// hash state after name's key.
func (f *Filter) wildcardAt(h uint64) bool {
	h ^= '*'
	h *= fnvPrime
	h ^= 0
	h *= fnvPrime
	return f.has(h)
}

// AppendBinary appends the filter's encoding: a header (magic, k, log2 of
// the size in bits, the seed, the names added, Index and Epoch, big-endian)
// and the bits as little-endian words.
func (f *Filter) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, magic[:]...)
	b = append(b, byte(f.k), f.log2, 0, 0)
	b = binary.BigEndian.AppendUint64(b, f.seed)
	b = binary.BigEndian.AppendUint64(b, uint64(f.names.Load()))
	b = binary.BigEndian.AppendUint64(b, f.Index)
	b = binary.BigEndian.AppendUint64(b, f.Epoch)
	b = append(b, make([]byte, HeaderLen-len(magic)-4-32)...)
	for i := range f.words {
		b = binary.LittleEndian.AppendUint64(b, atomic.LoadUint64(&f.words[i]))
	}
	return b, nil
}

// EncodedLen returns the length of the filter's encoding.
func (f *Filter) EncodedLen() int { return HeaderLen + len(f.words)*8 }

// ErrFormat is what Decode returns for bytes that are not a filter.
var ErrFormat = errors.New("namefilter: not an encoded filter")

// Decode returns the filter b encodes; one larger than maxBytes of bits is
// refused.
func Decode(b []byte, maxBytes int) (*Filter, error) {
	if len(b) < HeaderLen || [4]byte(b[:4]) != magic {
		return nil, ErrFormat
	}
	k, log2 := uint32(b[4]), b[5]
	if k < 1 || k > 16 || log2 < minLog2 || log2 > maxLog2 {
		return nil, fmt.Errorf("%w: k %d, size 2^%d bits", ErrFormat, k, log2)
	}
	names := binary.BigEndian.Uint64(b[16:])
	if b[6] != 0 || b[7] != 0 || names > math.MaxInt64 || binary.BigEndian.Uint64(b[40:]) != 0 {
		return nil, fmt.Errorf("%w: reserved bits set", ErrFormat)
	}
	size := 1 << (log2 - 3)
	if size > maxBytes {
		return nil, fmt.Errorf("namefilter: a filter of %d bytes is over the limit of %d", size, maxBytes)
	}
	if len(b) != HeaderLen+size {
		return nil, fmt.Errorf("%w: %d bytes for 2^%d bits", ErrFormat, len(b), log2)
	}
	f := &Filter{
		seed:  binary.BigEndian.Uint64(b[8:]),
		k:     k,
		log2:  log2,
		words: make([]uint64, size/8),
		Index: binary.BigEndian.Uint64(b[24:]),
		Epoch: binary.BigEndian.Uint64(b[32:]),
	}
	f.names.Store(int64(names))
	body := b[HeaderLen:]
	for i := range f.words {
		f.words[i] = binary.LittleEndian.Uint64(body[i*8:])
	}
	return f, nil
}
