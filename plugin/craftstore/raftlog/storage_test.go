package raftlog

import (
	"errors"
	"math"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The tests in this file port raft's storage_test.go (v3.7.0) so that this
// Storage is held to MemoryStorage's semantics.

func TestStorageTerm(t *testing.T) {
	ents := index(3).terms(3, 4, 5)
	tests := []struct {
		i     uint64
		werr  error
		wterm uint64
	}{
		{2, raft.ErrCompacted, 0},
		{3, nil, 3},
		{4, nil, 4},
		{5, nil, 5},
		{6, raft.ErrUnavailable, 0},
	}
	for _, tt := range tests {
		s, _ := newStorageWith(t, ents)
		term, err := s.Term(tt.i)
		if err != tt.werr { // raft compares with ==
			t.Errorf("Term(%d): expected error %v, got %v", tt.i, tt.werr, err)
		}
		if term != tt.wterm {
			t.Errorf("Term(%d): expected %d, got %d", tt.i, tt.wterm, term)
		}
	}
}

func TestStorageEntries(t *testing.T) {
	ents := index(3).terms(3, 4, 5, 6)
	size := func(es ...*pb.Entry) uint64 {
		var n int
		for _, e := range es {
			n += proto.Size(e)
		}
		return uint64(n)
	}
	tests := []struct {
		lo, hi, maxsize uint64
		werr            error
		wentries        []*pb.Entry
	}{
		{2, 6, math.MaxUint64, raft.ErrCompacted, nil},
		{3, 4, math.MaxUint64, raft.ErrCompacted, nil},
		{4, 5, math.MaxUint64, nil, index(4).terms(4)},
		{4, 6, math.MaxUint64, nil, index(4).terms(4, 5)},
		{4, 7, math.MaxUint64, nil, index(4).terms(4, 5, 6)},
		// even if maxsize is zero, the first entry should be returned
		{4, 7, 0, nil, index(4).terms(4)},
		// limit to 2
		{4, 7, size(ents[1], ents[2]), nil, index(4).terms(4, 5)},
		{4, 7, size(ents[1], ents[2]) + size(ents[3])/2, nil, index(4).terms(4, 5)},
		{4, 7, size(ents[1], ents[2], ents[3]) - 1, nil, index(4).terms(4, 5)},
		// all
		{4, 7, size(ents[1], ents[2], ents[3]), nil, index(4).terms(4, 5, 6)},
	}
	for _, tt := range tests {
		s, _ := newStorageWith(t, ents)
		got, err := s.Entries(tt.lo, tt.hi, tt.maxsize)
		if err != tt.werr {
			t.Errorf("Entries(%d, %d, %d): expected error %v, got %v", tt.lo, tt.hi, tt.maxsize, tt.werr, err)
		}
		if !equalEntries(got, tt.wentries) {
			t.Errorf("Entries(%d, %d, %d): expected %s, got %s", tt.lo, tt.hi, tt.maxsize, fmtEntries(tt.wentries), fmtEntries(got))
		}
	}
}

func TestStorageEntriesWithPayload(t *testing.T) {
	ents := index(3).terms(3, 4, 5, 6)
	for i, e := range ents[1:] {
		e.Type = pb.EntryNormal.Enum()
		e.Data = make([]byte, 100*(i+1))
	}
	s, _ := newStorageWith(t, ents)
	limit := uint64(proto.Size(ents[1]) + proto.Size(ents[2]))
	got, err := s.Entries(4, 7, limit)
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	if !equalEntries(got, ents[1:3]) {
		t.Errorf("expected %s, got %s", fmtEntries(ents[1:3]), fmtEntries(got))
	}
}

func TestStorageEntriesOnlyDummy(t *testing.T) {
	s, _ := newStorageWith(t, index(3).terms(3))
	if _, err := s.Entries(4, 4, math.MaxUint64); err != raft.ErrUnavailable {
		t.Errorf("expected %v, got %v", raft.ErrUnavailable, err)
	}
	if _, err := s.Entries(4, 6, math.MaxUint64); err == nil {
		t.Errorf("expected an error for hi beyond the last index")
	}
}

func TestStorageEntriesAppendSafe(t *testing.T) {
	s, _ := newStorageWith(t, index(3).terms(3, 4, 5, 6))
	got, err := s.Entries(4, 6, math.MaxUint64)
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	_ = append(got, entry(99, 99))
	again, err := s.Entries(4, 7, math.MaxUint64)
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	if want := index(4).terms(4, 5, 6); !equalEntries(again, want) {
		t.Errorf("expected %s, got %s", fmtEntries(want), fmtEntries(again))
	}
}

func TestStorageLastIndex(t *testing.T) {
	s, db := newStorageWith(t, index(3).terms(3, 4, 5))
	if last, _ := s.LastIndex(); last != 5 {
		t.Errorf("expected last index 5, got %d", last)
	}
	update(t, db, func(tx *bolt.Tx) error { return s.Append(tx, index(6).terms(5)) })
	if last, _ := s.LastIndex(); last != 6 {
		t.Errorf("expected last index 6, got %d", last)
	}
}

func TestStorageFirstIndex(t *testing.T) {
	s, db := newStorageWith(t, index(3).terms(3, 4, 5))
	if first, _ := s.FirstIndex(); first != 4 {
		t.Errorf("expected first index 4, got %d", first)
	}
	update(t, db, func(tx *bolt.Tx) error { return s.Compact(tx, 4) })
	if first, _ := s.FirstIndex(); first != 5 {
		t.Errorf("expected first index 5, got %d", first)
	}
}

func TestStorageCompact(t *testing.T) {
	ents := index(3).terms(3, 4, 5)
	tests := []struct {
		i      uint64
		werr   error
		windex uint64
		wterm  uint64
		wlen   int
	}{
		{2, raft.ErrCompacted, 3, 3, 3},
		{3, raft.ErrCompacted, 3, 3, 3},
		{4, nil, 4, 4, 2},
		{5, nil, 5, 5, 1},
	}
	for _, tt := range tests {
		s, db := newStorageWith(t, ents)
		err := db.Update(func(tx *bolt.Tx) error { return s.Compact(tx, tt.i) })
		if err != tt.werr {
			t.Errorf("Compact(%d): expected error %v, got %v", tt.i, tt.werr, err)
		}
		log := dump(t, s)
		if log[0].GetIndex() != tt.windex || log[0].GetTerm() != tt.wterm || len(log) != tt.wlen {
			t.Errorf("Compact(%d): expected dummy %d/%d and %d entries, got %s", tt.i, tt.windex, tt.wterm, tt.wlen, fmtEntries(log))
		}
	}

	s, db := newStorageWith(t, ents)
	if err := db.Update(func(tx *bolt.Tx) error { return s.Compact(tx, 6) }); err == nil {
		t.Errorf("Compact beyond the last index: expected an error")
	}
}

func TestStorageCreateSnapshot(t *testing.T) {
	ents := index(3).terms(3, 4, 5)
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	tests := []struct {
		i     uint64
		werr  error
		wsnap *pb.Snapshot
	}{
		{4, nil, &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(4)), Term: new(uint64(4)), ConfState: pb.EnsureConfState(&pb.ConfState{Voters: []uint64{1, 2, 3}})}}},
		{5, nil, &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(5)), ConfState: pb.EnsureConfState(&pb.ConfState{Voters: []uint64{1, 2, 3}})}}},
	}
	for _, tt := range tests {
		s, db := newStorageWith(t, ents)
		var snap *pb.Snapshot
		err := db.Update(func(tx *bolt.Tx) (err error) {
			snap, err = s.CreateSnapshot(tx, tt.i, cs)
			return err
		})
		if err != tt.werr {
			t.Errorf("CreateSnapshot(%d): expected error %v, got %v", tt.i, tt.werr, err)
		}
		if !proto.Equal(snap, tt.wsnap) {
			t.Errorf("CreateSnapshot(%d): expected %v, got %v", tt.i, tt.wsnap, snap)
		}
		stored, _ := s.Snapshot()
		if !proto.Equal(stored, tt.wsnap) {
			t.Errorf("Snapshot after CreateSnapshot(%d): expected %v, got %v", tt.i, tt.wsnap, stored)
		}
	}
}

func TestStorageCreateSnapshotErrors(t *testing.T) {
	s, db := newStorageWith(t, index(3).terms(3, 4, 5))
	create := func(i uint64) error {
		return db.Update(func(tx *bolt.Tx) error {
			_, err := s.CreateSnapshot(tx, i, nil)
			return err
		})
	}
	if err := create(4); err != nil {
		t.Fatalf("CreateSnapshot(4): %v", err)
	}
	for _, i := range []uint64{3, 4} {
		if err := create(i); err != raft.ErrSnapOutOfDate {
			t.Errorf("CreateSnapshot(%d): expected %v, got %v", i, raft.ErrSnapOutOfDate, err)
		}
	}
	if err := create(6); err == nil {
		t.Errorf("CreateSnapshot beyond the last index: expected an error")
	}
}

func TestStorageAppend(t *testing.T) {
	ents := index(3).terms(3, 4, 5)
	tests := []struct {
		entries  []*pb.Entry
		wentries []*pb.Entry
	}{
		{index(1).terms(1, 2), index(3).terms(3, 4, 5)},
		{index(3).terms(3, 4, 5), index(3).terms(3, 4, 5)},
		{index(3).terms(3, 6, 6), index(3).terms(3, 6, 6)},
		{index(3).terms(3, 4, 5, 5), index(3).terms(3, 4, 5, 5)},
		// Truncate incoming entries, truncate the existing entries and append.
		{index(2).terms(3, 3, 5), index(3).terms(3, 5)},
		// Truncate the existing entries and append.
		{index(4).terms(5), index(3).terms(3, 5)},
		// Direct append.
		{index(6).terms(5), index(3).terms(3, 4, 5, 5)},
	}
	for _, tt := range tests {
		s, db := newStorageWith(t, ents)
		update(t, db, func(tx *bolt.Tx) error { return s.Append(tx, tt.entries) })
		if got := dump(t, s); !equalEntries(got, tt.wentries) {
			t.Errorf("Append(%s): expected %s, got %s", fmtEntries(tt.entries), fmtEntries(tt.wentries), fmtEntries(got))
		}
	}
}

func TestStorageAppendErrors(t *testing.T) {
	tests := []struct {
		name    string
		entries []*pb.Entry
	}{
		{"gap after the last index", index(7).terms(5)},
		{"not contiguous", []*pb.Entry{entry(6, 5), entry(8, 5)}},
	}
	for _, tt := range tests {
		s, db := newStorageWith(t, index(3).terms(3, 4, 5))
		if err := db.Update(func(tx *bolt.Tx) error { return s.Append(tx, tt.entries) }); err == nil {
			t.Errorf("%s: expected an error", tt.name)
		}
		if got, want := dump(t, s), index(3).terms(3, 4, 5); !equalEntries(got, want) {
			t.Errorf("%s: expected %s, got %s", tt.name, fmtEntries(want), fmtEntries(got))
		}
	}
}

func TestStorageWriteNeedsWritableTx(t *testing.T) {
	s, db := newStorageWith(t, index(3).terms(3, 4, 5))
	err := db.View(func(tx *bolt.Tx) error { return s.Append(tx, index(6).terms(5)) })
	if err == nil {
		t.Errorf("Append in a read-only transaction: expected an error")
	}
}

func TestStorageApplySnapshot(t *testing.T) {
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	data := []byte("data")
	tests := []struct {
		name      string
		snapshots []*pb.Snapshot
		werr      error
	}{
		{"normal case", []*pb.Snapshot{
			{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(uint64(4)), Term: new(uint64(4)), ConfState: cs}},
		}, nil},
		{"snapshot out of date", []*pb.Snapshot{
			{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(uint64(4)), Term: new(uint64(4)), ConfState: cs}},
			{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(uint64(3)), Term: new(uint64(3)), ConfState: cs}},
		}, raft.ErrSnapOutOfDate},
		{"same index", []*pb.Snapshot{
			{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(uint64(4)), Term: new(uint64(4)), ConfState: cs}},
			{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(uint64(4)), Term: new(uint64(4)), ConfState: cs}},
		}, raft.ErrSnapOutOfDate},
		{"bootstrap with confState", []*pb.Snapshot{
			{Data: data, Metadata: &pb.SnapshotMetadata{ConfState: cs}},
		}, nil},
	}
	for _, tt := range tests {
		db, _ := openDB(t)
		s := openStorage(t, db)
		var err error
		for _, sn := range tt.snapshots {
			err = db.Update(func(tx *bolt.Tx) error { return s.ApplySnapshot(tx, sn) })
		}
		if err != tt.werr {
			t.Errorf("%s: expected error %v, got %v", tt.name, tt.werr, err)
		}
		// The first snapshot is the one that must be in effect.
		md := tt.snapshots[0].GetMetadata()
		if first, _ := s.FirstIndex(); first != md.GetIndex()+1 {
			t.Errorf("%s: expected first index %d, got %d", tt.name, md.GetIndex()+1, first)
		}
		if last, _ := s.LastIndex(); last != md.GetIndex() {
			t.Errorf("%s: expected last index %d, got %d", tt.name, md.GetIndex(), last)
		}
		if term, err := s.Term(md.GetIndex()); err != nil || term != md.GetTerm() {
			t.Errorf("%s: expected Term(%d) = %d, got %d, %v", tt.name, md.GetIndex(), md.GetTerm(), term, err)
		}
		snap, _ := s.Snapshot()
		if snap.GetData() != nil || snap.GetMetadata().GetIndex() != md.GetIndex() || !proto.Equal(snap.GetMetadata().GetConfState(), pb.EnsureConfState(proto.Clone(cs).(*pb.ConfState))) {
			t.Errorf("%s: unexpected stored snapshot %v", tt.name, snap)
		}
		if _, gotCS, _ := s.InitialState(); !equalVoters(gotCS, cs) {
			t.Errorf("%s: expected conf state %v, got %v", tt.name, cs, gotCS)
		}
	}
}

func TestStorageApplySnapshotDropsLog(t *testing.T) {
	s, db := newStorageWith(t, index(3).terms(3, 4, 5, 6, 7))
	snap := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(5)), Term: new(uint64(5)), ConfState: &pb.ConfState{Voters: []uint64{1}}}}
	update(t, db, func(tx *bolt.Tx) error { return s.ApplySnapshot(tx, snap) })
	if got, want := dump(t, s), index(5).terms(5); !equalEntries(got, want) {
		t.Errorf("expected %s, got %s", fmtEntries(want), fmtEntries(got))
	}
	if _, err := s.Entries(6, 6, math.MaxUint64); err != raft.ErrUnavailable {
		t.Errorf("expected %v, got %v", raft.ErrUnavailable, err)
	}
	// The log continues after the snapshot.
	update(t, db, func(tx *bolt.Tx) error { return s.Append(tx, index(6).terms(6, 6)) })
	if got, want := dump(t, s), index(5).terms(5, 6, 6); !equalEntries(got, want) {
		t.Errorf("expected %s, got %s", fmtEntries(want), fmtEntries(got))
	}
}

func TestStorageEmpty(t *testing.T) {
	db, _ := openDB(t)
	s := openStorage(t, db)
	hs, cs, err := s.InitialState()
	if err != nil || hs == nil || cs == nil || !raft.IsEmptyHardState(hs) || len(cs.GetVoters()) != 0 {
		t.Errorf("expected empty initial state, got %v, %v, %v", hs, cs, err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 1 || last != 0 {
		t.Errorf("expected first 1 and last 0, got %d and %d", first, last)
	}
	if term, err := s.Term(0); term != 0 || err != nil {
		t.Errorf("expected Term(0) = 0, got %d, %v", term, err)
	}
	if snap, err := s.Snapshot(); err != nil || !raft.IsEmptySnap(snap) || snap.GetMetadata().GetConfState() == nil {
		t.Errorf("expected an empty snapshot, got %v, %v", snap, err)
	}
	if _, err := s.Entries(1, 1, math.MaxUint64); !errors.Is(err, raft.ErrUnavailable) {
		t.Errorf("expected %v, got %v", raft.ErrUnavailable, err)
	}
}

func equalVoters(a, b *pb.ConfState) bool {
	if len(a.GetVoters()) != len(b.GetVoters()) {
		return false
	}
	for i := range a.GetVoters() {
		if a.GetVoters()[i] != b.GetVoters()[i] {
			return false
		}
	}
	return true
}
