package raftlog

import (
	"errors"
	"math/rand/v2"
	"testing"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
)

// TestTermCache checks Term, answered from the cached term runs, against
// the log in bbolt after random appends (overwriting suffixes, new terms),
// compactions, snapshots and rolled-back transactions, several in one
// transaction, and after reopening.
func TestTermCache(t *testing.T) {
	db, path := openDB(t)
	s := openStorage(t, db)
	rng := rand.New(rand.NewPCG(1, 2))
	term, lastAppended := uint64(1), uint64(0)
	check := func(step int) {
		t.Helper()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		lo := uint64(0)
		if first > 3 {
			lo = first - 3
		}
		for i := lo; i <= last+2; i++ {
			got, gerr := s.Term(i)
			want, werr := s.storedTerm(i) // from the log in bbolt, not the cache
			if got != want || !errors.Is(gerr, werr) {
				t.Fatalf("step %d: Term(%d) = %d, %v; the log in bbolt says %d, %v (first %d, last %d)", step, i, got, gerr, want, werr, first, last)
			}
		}
	}
	for step := 0; step < 400; step++ {
		rollback := rng.IntN(8) == 0
		err := db.Update(func(tx *bolt.Tx) error {
			for range 1 + rng.IntN(3) {
				st, err := loadState(tx)
				if err != nil {
					return err
				}
				switch op := rng.IntN(10); {
				case op < 7: // append, at the end or over a suffix
					at := st.last + 1
					if st.last > st.compacted && rng.IntN(3) == 0 {
						at = st.compacted + 1 + uint64(rng.IntN(int(st.last-st.compacted)))
					}
					if rng.IntN(3) == 0 {
						term++
					}
					var ents []*pb.Entry
					for j := range 1 + rng.IntN(6) {
						ents = append(ents, entry(at+uint64(j), term))
					}
					if err := s.Append(tx, ents); err != nil {
						return err
					}
					lastAppended = at + uint64(len(ents)) - 1
				case op < 9: // compact
					if st.last > st.compacted {
						if err := s.Compact(tx, st.compacted+1+uint64(rng.IntN(int(st.last-st.compacted)))); err != nil {
							return err
						}
					}
				default: // a snapshot from the leader
					term++
					idx := st.last + 1 + uint64(rng.IntN(5))
					if err := s.ApplySnapshot(tx, &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(idx), Term: new(term)}}); err != nil {
						return err
					}
				}
			}
			if rollback {
				return errors.New("roll back")
			}
			return nil
		})
		if (err != nil) != rollback {
			t.Fatalf("step %d: %v", step, err)
		}
		check(step)
	}
	if lastAppended == 0 {
		t.Fatal("nothing appended")
	}
	db.Close()
	s = openStorage(t, reopenDB(t, path))
	check(-1)
}
