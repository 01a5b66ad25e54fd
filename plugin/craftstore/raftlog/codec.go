package raftlog

import (
	"encoding/binary"
	"fmt"
	"math"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// entryTermField is the field number of Term in raftpb.Entry.
const entryTermField = 2

// encodeIndex returns the log key of index i: big-endian, so that the keys
// sort like the indices.
func encodeIndex(i uint64) []byte {
	k := make([]byte, 8)
	putIndex(k, i)
	return k
}

func putIndex(k []byte, i uint64) { binary.BigEndian.PutUint64(k, i) }

func decodeIndex(k []byte) uint64 { return binary.BigEndian.Uint64(k) }

func encodeCompacted(index, term uint64) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v[:8], index)
	binary.BigEndian.PutUint64(v[8:], term)
	return v
}

// entryTerm returns the Term field of a marshaled raftpb.Entry without
// decoding (or copying) the rest, which may be a large payload. Like
// proto.Unmarshal it takes the last occurrence, and like Entry.GetTerm it
// returns 0 when the field is unset.
func entryTerm(b []byte) (uint64, error) {
	var term uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("raftlog: decoding entry: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == entryTermField && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, fmt.Errorf("raftlog: decoding entry term: %w", protowire.ParseError(n))
			}
			term, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, fmt.Errorf("raftlog: decoding entry: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return term, nil
}

// entryArena decodes a batch of marshaled raftpb.Entry messages into memory
// allocated once per batch rather than five times per entry (the Entry, its
// three scalar pointers and its Data). The entries share their backing
// arrays, so one retained entry keeps its batch alive; that is the price
// of a handful of allocations per Entries call.
type entryArena struct {
	ents  []pb.Entry
	nums  []uint64
	types []pb.EntryType
	data  []byte
}

// newArena returns an arena for n entries whose marshaled sizes sum to size,
// an upper bound of their total Data.
func newArena(n int, size uint64) *entryArena {
	return &entryArena{
		ents:  make([]pb.Entry, n),
		nums:  make([]uint64, 2*n),
		types: make([]pb.EntryType, n),
		data:  make([]byte, 0, size),
	}
}

// decode decodes one entry, copying its Data out of b (which may point into
// bbolt's memory map). Entries with fields other than the four of Entry, or
// a field twice, are left to proto.Unmarshal so nothing is ever lost.
func (a *entryArena) decode(b []byte) (*pb.Entry, error) {
	e := &a.ents[0]
	a.ents = a.ents[1:]
	if a.decodeFast(e, b) {
		return e, nil
	}
	e.Reset()
	if err := proto.Unmarshal(b, e); err != nil {
		return nil, err
	}
	return e, nil
}

func (a *entryArena) decodeFast(e *pb.Entry, b []byte) bool {
	var seen [5]bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 4 || seen[num] {
			return false
		}
		seen[num] = true
		b = b[n:]
		if num == 4 {
			if typ != protowire.BytesType {
				return false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			start := len(a.data)
			a.data = append(a.data, v...)
			// Full slice expression: an append to one Data never
			// overwrites the next entry's.
			e.Data = a.data[start:len(a.data):len(a.data)]
			continue
		}
		if typ != protowire.VarintType {
			return false
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case 1:
			if v > math.MaxInt32 {
				return false
			}
			if _, ok := pb.EntryType_name[int32(v)]; !ok {
				return false // proto.Unmarshal keeps unknown enum values as unknown fields
			}
			a.types[0] = pb.EntryType(v)
			e.Type, a.types = &a.types[0], a.types[1:]
		case 2:
			a.nums[0] = v
			e.Term, a.nums = &a.nums[0], a.nums[1:]
		case 3:
			a.nums[0] = v
			e.Index, a.nums = &a.nums[0], a.nums[1:]
		}
	}
	return true
}
