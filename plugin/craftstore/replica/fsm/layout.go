package fsm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// The bbolt file of a member holds the Raft log (package raftlog, buckets
// "raft.*") and the replicated state below. All replicated state lives in one
// generation bucket named by meta/current, so that installing a snapshot from
// the leader is a pointer switch in one transaction:
//
//	meta/current             -> "data.<n>"
//	data.<n>/applied         -> applied index and term (16 bytes)
//	data.<n>/members/<id>    -> JSON Member
//	data.<n>/removed/<id>    -> empty: ids removed from the group (never reused)
//	data.<n>/zones/<origin>/<name key> -> the RRs at that name
//	data.<n>/imports/<origin>/<name key> -> RRs of a staged zone import
//	data.<n>/importmeta/<origin> -> import id (8 bytes), absent flag (1 byte)
//	data.<n>/journal/<origin>/<sequence> -> one change, for IXFR (journal.go)
//	data.<n>/seeded/<origin>  -> empty: a seed import of the zone committed
//	data.<n>/keys/<origin>    -> the zone's DNSSEC keys, sealed (keys.go)
var (
	BucketMeta       = []byte("meta")
	KeyCurrent       = []byte("current")
	KeyCluster       = []byte("cluster") // meta: the cluster name the directory was made for
	KeyMember        = []byte("member")  // meta: the member id it was made for (8 bytes)
	keyApplied       = []byte("applied")
	BucketMembers    = []byte("members")
	BucketZones      = []byte("zones")
	bucketImports    = []byte("imports")
	bucketImportMeta = []byte("importmeta")
	BucketRemoved    = []byte("removed")
	bucketSeeded     = []byte("seeded")
)

// Member is one member of the Raft group, as the cluster API shows it.
type Member struct {
	ID   uint64 `json:"id"`
	Raft string `json:"raft"`
	DNS  string `json:"dns,omitempty"`
	API  string `json:"api,omitempty"`
	// Learner is set for a member that receives the log but does not vote
	// (Replica.AddMember).
	Learner bool `json:"learner,omitempty"`
}

// nameKey encodes a domain name so that bbolt's byte order is DNS canonical
// order (dnsname.CanonicalKey).
func nameKey(name string) []byte { return dnsname.CanonicalKey(name) }

// EncodeRRs encodes the RRs at one name (uncompressed wire format, each behind
// its length), the value stored under a name key.
func EncodeRRs(rrs []dns.RR) ([]byte, error) {
	var b []byte
	var err error
	for _, rr := range rrs {
		if b, err = appendRR(b, rr); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// DecodeRRs decodes what encodeRRs wrote. It copies nothing it keeps from v,
// so v may be a bbolt value.
func DecodeRRs(v []byte) ([]dns.RR, error) {
	d := decoder{b: v}
	var rrs []dns.RR
	for len(d.b) > 0 && d.err == nil {
		rrs = append(rrs, d.rr())
	}
	return rrs, d.err
}

// ScanRRs walks what EncodeRRs wrote without decoding it: it returns the
// number of records and calls fn, when not nil, with each one's type.
func ScanRRs(v []byte, fn func(rrtype uint16)) (int, error) {
	n := 0
	for len(v) > 0 {
		if len(v) < 4 {
			return n, errors.New("short record")
		}
		l := binary.BigEndian.Uint32(v)
		if uint64(l) > uint64(len(v)-4) {
			return n, errors.New("short record")
		}
		rr := v[4 : 4+l]
		v = v[4+l:]
		n++
		if fn == nil {
			continue
		}
		// The owner name, uncompressed, then the type.
		i := 0
		for i < len(rr) && rr[i] != 0 {
			i += int(rr[i]) + 1
		}
		if i+3 > len(rr) {
			return n, errors.New("malformed record")
		}
		fn(binary.BigEndian.Uint16(rr[i+1:]))
	}
	return n, nil
}

// Generation returns the current Generation bucket; it exists after open.
func Generation(tx *bolt.Tx) *bolt.Bucket {
	return tx.Bucket(tx.Bucket(BucketMeta).Get(KeyCurrent))
}

// CreateGeneration makes an empty generation bucket with its sub-buckets.
func CreateGeneration(tx *bolt.Tx) ([]byte, *bolt.Bucket, error) {
	meta := tx.Bucket(BucketMeta)
	n, err := meta.NextSequence()
	if err != nil {
		return nil, nil, err
	}
	name := []byte("data." + strconv.FormatUint(n, 10))
	g, err := tx.CreateBucket(name)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range [][]byte{BucketMembers, BucketZones, bucketImports, bucketImportMeta, BucketRemoved} {
		if _, err := g.CreateBucket(b); err != nil {
			return nil, nil, err
		}
	}
	return name, g, nil
}

func PutApplied(g *bolt.Bucket, index, term uint64) error {
	var v [16]byte
	binary.BigEndian.PutUint64(v[:8], index)
	binary.BigEndian.PutUint64(v[8:], term)
	return g.Put(keyApplied, v[:])
}

func Applied(g *bolt.Bucket) (index, term uint64) {
	v := g.Get(keyApplied)
	if len(v) != 16 {
		return 0, 0
	}
	return binary.BigEndian.Uint64(v[:8]), binary.BigEndian.Uint64(v[8:])
}

func IDKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

func PutMember(g *bolt.Bucket, m Member) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return g.Bucket(BucketMembers).Put(IDKey(m.ID), v)
}

func Members(g *bolt.Bucket) ([]Member, error) {
	var ms []Member
	err := g.Bucket(BucketMembers).ForEach(func(k, v []byte) error {
		var m Member
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("member %x: %w", k, err)
		}
		ms = append(ms, m)
		return nil
	})
	return ms, err
}

// RemovedIDs returns the ids removed from the group.
func RemovedIDs(g *bolt.Bucket) map[uint64]bool {
	out := map[uint64]bool{}
	if b := g.Bucket(BucketRemoved); b != nil {
		b.ForEach(func(k, _ []byte) error {
			if len(k) == 8 {
				out[binary.BigEndian.Uint64(k)] = true
			}
			return nil
		})
	}
	return out
}
