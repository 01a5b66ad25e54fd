package raftlog

import (
	"math"
	"testing"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
)

// benchEntries returns n entries from index first with 64-byte payloads,
// about the size of a one-record DNS update.
func benchEntries(first uint64, n int) []*pb.Entry {
	ents := make([]*pb.Entry, n)
	for i := range ents {
		ents[i] = &pb.Entry{Index: new(first + uint64(i)), Term: new(uint64(1)), Type: pb.EntryNormal.Enum(), Data: make([]byte, 64)}
	}
	return ents
}

// BenchmarkAppend measures one Ready's write: 1000 small entries and a
// HardState in one transaction, committed with fsync.
func BenchmarkAppend(b *testing.B) { benchAppend(b, false) }

// BenchmarkAppendNoSync is BenchmarkAppend without the fsync: the CPU cost.
func BenchmarkAppendNoSync(b *testing.B) { benchAppend(b, true) }

func benchAppend(b *testing.B, noSync bool) {
	db, _ := openDB(b)
	db.NoSync = noSync
	s := openStorage(b, db)
	const batch = 1000
	next := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ents := benchEntries(next, batch)
		b.StartTimer()
		hs := &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(next + batch - 1)}
		update(b, db, func(tx *bolt.Tx) error {
			if err := s.SetHardState(tx, hs); err != nil {
				return err
			}
			return s.Append(tx, ents)
		})
		next += batch
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkAppendCompact is BenchmarkAppend with the log kept at 10000
// entries: every transaction also compacts the oldest 1000.
func BenchmarkAppendCompact(b *testing.B) {
	db, _ := openDB(b)
	s := openStorage(b, db)
	const batch, keep = 1000, 10000
	update(b, db, func(tx *bolt.Tx) error { return s.Append(tx, benchEntries(1, keep)) })
	next := uint64(keep + 1)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ents := benchEntries(next, batch)
		b.StartTimer()
		update(b, db, func(tx *bolt.Tx) error {
			if err := s.Append(tx, ents); err != nil {
				return err
			}
			return s.Compact(tx, next+batch-1-keep)
		})
		next += batch
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
}

func benchLog(b *testing.B, n int) *Storage {
	db, _ := openDB(b)
	s := openStorage(b, db)
	for i := 0; i < n; i += 1000 {
		update(b, db, func(tx *bolt.Tx) error { return s.Append(tx, benchEntries(uint64(i+1), 1000)) })
	}
	return s
}

// BenchmarkEntries reads 100 entries, as raft does to fill a MsgApp.
func BenchmarkEntries(b *testing.B) {
	s := benchLog(b, 10000)
	lo := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		ents, err := s.Entries(lo, lo+100, math.MaxUint64)
		if err != nil || len(ents) != 100 {
			b.Fatalf("Entries: %d entries, %v", len(ents), err)
		}
		lo = (lo+100)%9800 + 1
	}
}

// BenchmarkEntriesOne reads a single entry, as raft does for a follower
// that is only one entry behind.
func BenchmarkEntriesOne(b *testing.B) {
	s := benchLog(b, 10000)
	lo := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Entries(lo, lo+1, math.MaxUint64); err != nil {
			b.Fatal(err)
		}
		lo = lo%9999 + 1
	}
}

// BenchmarkTerm measures the lookup raft does for every MsgApp it sends or
// receives.
func BenchmarkTerm(b *testing.B) {
	s := benchLog(b, 10000)
	i := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Term(i); err != nil {
			b.Fatal(err)
		}
		i = i%9999 + 1
	}
}

// BenchmarkLastIndex measures the cached bounds.
func BenchmarkLastIndex(b *testing.B) {
	s := benchLog(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.LastIndex(); err != nil {
			b.Fatal(err)
		}
	}
}
