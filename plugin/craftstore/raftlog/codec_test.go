package raftlog

import (
	"math"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func codecCases(t *testing.T) [][]byte {
	ents := []*pb.Entry{
		{},
		{Index: new(uint64(1))},
		{Index: new(uint64(7)), Term: new(uint64(3)), Type: pb.EntryConfChange.Enum(), Data: []byte("cc")},
		{Index: new(uint64(math.MaxUint64)), Term: new(uint64(math.MaxUint64)), Type: pb.EntryNormal.Enum()},
		{Index: new(uint64(9)), Term: new(uint64(0)), Data: []byte{}},
		{Index: new(uint64(10)), Term: new(uint64(4)), Type: pb.EntryConfChangeV2.Enum(), Data: make([]byte, 70000)},
	}
	var out [][]byte
	for _, e := range ents {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	base := out[2]
	// Unknown field, a field twice, an unknown enum value.
	out = append(out,
		protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), base...), 9, protowire.VarintType), 5),
		protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), base...), 2, protowire.VarintType), 8),
		protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), base...), 1, protowire.VarintType), 42),
	)
	return out
}

func TestArenaDecodeMatchesUnmarshal(t *testing.T) {
	cases := codecCases(t)
	var size uint64
	for _, b := range cases {
		size += uint64(len(b))
	}
	arena := newArena(len(cases), size)
	var got []*pb.Entry
	for i, b := range cases {
		want := &pb.Entry{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		e, err := arena.decode(b)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !proto.Equal(e, want) || (e.Data == nil) != (want.Data == nil) {
			t.Errorf("case %d: expected %v, got %v", i, want, e)
		}
		if term, err := entryTerm(b); err != nil || term != want.GetTerm() {
			t.Errorf("case %d: expected term %d, got %d, %v", i, want.GetTerm(), term, err)
		}
		got = append(got, e)
	}
	// Entries share the arena: appending to one Data must not touch another.
	before := append([]byte(nil), got[3].GetData()...)
	_ = append(got[2].Data, "clobber"...)
	if string(got[3].GetData()) != string(before) {
		t.Errorf("append to entry 2's data changed entry 3's")
	}
}

func TestArenaDecodeCorrupt(t *testing.T) {
	b, _ := proto.Marshal(&pb.Entry{Index: new(uint64(1)), Data: []byte("abc")})
	arena := newArena(1, uint64(len(b)))
	if _, err := arena.decode(b[:len(b)-1]); err == nil {
		t.Errorf("expected an error for a truncated entry")
	}
}
