package raftlog

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestStoragePersistsAcrossReopen(t *testing.T) {
	db, path := openDB(t)
	s := openStorage(t, db)
	hs := &pb.HardState{Term: new(uint64(7)), Vote: new(uint64(2)), Commit: new(uint64(90))}
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	update(t, db, func(tx *bolt.Tx) error {
		ents := make([]*pb.Entry, 100)
		for i := range ents {
			ents[i] = &pb.Entry{Index: new(uint64(i + 1)), Term: new(uint64(i/10 + 1)), Data: []byte(fmt.Sprint(i + 1))}
		}
		if err := s.Append(tx, ents); err != nil {
			return err
		}
		if err := s.SetHardState(tx, hs); err != nil {
			return err
		}
		return s.SetConfState(tx, cs)
	})
	update(t, db, func(tx *bolt.Tx) error {
		if _, err := s.CreateSnapshot(tx, 60, nil); err != nil {
			return err
		}
		return s.Compact(tx, 50)
	})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = reopenDB(t, path)
	s = openStorage(t, db)
	gotHS, gotCS, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(gotHS, hs) {
		t.Errorf("expected hard state %v, got %v", hs, gotHS)
	}
	if !proto.Equal(gotCS, pb.EnsureConfState(proto.Clone(cs).(*pb.ConfState))) {
		t.Errorf("expected conf state %v, got %v", cs, gotCS)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	md := snap.GetMetadata()
	if md.GetIndex() != 60 || md.GetTerm() != 6 || !equalVoters(md.GetConfState(), cs) || snap.Data != nil {
		t.Errorf("expected snapshot 60/6 with voters %v, got %v", cs.GetVoters(), snap)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 51 || last != 100 {
		t.Errorf("expected log bounds [51, 100], got [%d, %d]", first, last)
	}
	if term, err := s.Term(50); err != nil || term != 5 {
		t.Errorf("expected Term(50) = 5, got %d, %v", term, err)
	}
	if _, err := s.Term(49); err != raft.ErrCompacted {
		t.Errorf("expected Term(49) to fail with %v, got %v", raft.ErrCompacted, err)
	}
	ents, err := s.Entries(51, 101, math.MaxUint64)
	if err != nil || len(ents) != 50 || string(ents[49].GetData()) != "100" {
		t.Errorf("expected entries 51..100, got %s, %v", fmtEntries(ents), err)
	}
}

func TestStorageRollbackLeavesStateUnchanged(t *testing.T) {
	s, db := newStorageWith(t, index(3).terms(3, 4, 5, 6))
	update(t, db, func(tx *bolt.Tx) error {
		return s.SetHardState(tx, &pb.HardState{Term: new(uint64(6)), Commit: new(uint64(5))})
	})
	beforeLog := dump(t, s)
	beforeHS, beforeCS, _ := s.InitialState()
	beforeSnap, _ := s.Snapshot()

	errAbort := errors.New("abort")
	steps := []func(tx *bolt.Tx) error{
		func(tx *bolt.Tx) error { return s.Append(tx, index(5).terms(9, 9, 9, 9)) },
		func(tx *bolt.Tx) error { return s.Compact(tx, 5) },
		func(tx *bolt.Tx) error {
			return s.SetHardState(tx, &pb.HardState{Term: new(uint64(9)), Commit: new(uint64(8))})
		},
		func(tx *bolt.Tx) error { return s.SetConfState(tx, &pb.ConfState{Voters: []uint64{7}}) },
		func(tx *bolt.Tx) error {
			_, err := s.CreateSnapshot(tx, 6, nil)
			return err
		},
		func(tx *bolt.Tx) error {
			return s.ApplySnapshot(tx, &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(uint64(20)), Term: new(uint64(9))}})
		},
	}
	err := db.Update(func(tx *bolt.Tx) error {
		for _, step := range steps {
			if err := step(tx); err != nil {
				return err
			}
		}
		return errAbort
	})
	if err != errAbort {
		t.Fatalf("expected the transaction to abort, got %v", err)
	}
	// Also a transaction rolled back by hand.
	tx, err := db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(tx, index(7).terms(9, 9)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	// Nothing of a rolled-back transaction is published.
	if got := dump(t, s); !equalEntries(got, beforeLog) {
		t.Errorf("expected log %s, got %s", fmtEntries(beforeLog), fmtEntries(got))
	}
	hs, cs, _ := s.InitialState()
	snap, _ := s.Snapshot()
	if !proto.Equal(hs, beforeHS) || !proto.Equal(cs, beforeCS) || !proto.Equal(snap, beforeSnap) {
		t.Errorf("expected state %v %v %v, got %v %v %v", beforeHS, beforeCS, beforeSnap, hs, cs, snap)
	}

	// The next committed transaction starts from the committed state.
	update(t, db, func(tx *bolt.Tx) error { return s.Append(tx, index(7).terms(7)) })
	if got, want := dump(t, s), index(3).terms(3, 4, 5, 6, 7); !equalEntries(got, want) {
		t.Errorf("expected log %s, got %s", fmtEntries(want), fmtEntries(got))
	}
}

// TestStorageConcurrentReads runs raft-like readers against a writer that
// appends, overwrites suffixes, compacts and installs snapshots. Every entry
// carries its own index and term in Data, so a reader can tell whether what
// it observes is one consistent committed state.
func TestStorageConcurrentReads(t *testing.T) {
	db, _ := openDB(t)
	db.NoSync = true // durability is not under test here
	s := openStorage(t, db)
	mk := func(i, term uint64) *pb.Entry {
		return &pb.Entry{Index: new(i), Term: new(term), Data: fmt.Appendf(nil, "%d/%d", i, term)}
	}

	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Go(func() {
			for !done.Load() {
				if err := checkRead(s); err != nil {
					errc <- err
					return
				}
			}
		})
	}

	term := uint64(1)
	for round := 0; round < 1000; round++ {
		update(t, db, func(tx *bolt.Tx) error {
			first, _ := s.FirstIndex()
			last, _ := s.LastIndex()
			at := last + 1
			if round%7 == 3 && last >= first+2 {
				term++ // a new leader overwrites a suffix
				at = last - 2
			}
			ents := make([]*pb.Entry, 0, 20)
			for i := at; i < at+20; i++ {
				ents = append(ents, mk(i, term))
			}
			if err := s.Append(tx, ents); err != nil {
				return err
			}
			switch {
			case round%50 == 49:
				term++
				md := &pb.SnapshotMetadata{Index: new(at + 100), Term: new(term)}
				return s.ApplySnapshot(tx, &pb.Snapshot{Metadata: md})
			case round%5 == 4:
				return s.Compact(tx, at)
			}
			return nil
		})
	}
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func checkRead(s *Storage) error {
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if last+1 < first {
		return fmt.Errorf("bounds [%d, %d]", first, last)
	}
	if last < first {
		return nil
	}
	ents, err := s.Entries(first, last+1, math.MaxUint64)
	switch {
	case err == raft.ErrCompacted:
		return nil
	case err != nil:
		return fmt.Errorf("Entries(%d, %d): %w", first, last+1, err)
	}
	for i, e := range ents {
		if e.GetIndex() != first+uint64(i) || string(e.GetData()) != fmt.Sprintf("%d/%d", e.GetIndex(), e.GetTerm()) {
			return fmt.Errorf("entry %d of Entries(%d, ...) is %d/%d %q", i, first, e.GetIndex(), e.GetTerm(), e.GetData())
		}
	}
	if _, err := s.Term(last); err != nil && err != raft.ErrCompacted {
		return fmt.Errorf("Term(%d): %w", last, err)
	}
	return nil
}
