package raftlog

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// openDB opens a bbolt file in a fresh temporary directory.
func openDB(tb testing.TB) (*bolt.DB, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "member.db")
	return reopenDB(tb, path), path
}

func reopenDB(tb testing.TB, path string) *bolt.DB {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		tb.Fatalf("opening %s: %v", path, err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func openStorage(tb testing.TB, db *bolt.DB) *Storage {
	tb.Helper()
	s, err := Open(db)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	return s
}

// update runs fn in one committed write transaction.
func update(tb testing.TB, db *bolt.DB, fn func(tx *bolt.Tx) error) {
	tb.Helper()
	if err := db.Update(fn); err != nil {
		tb.Fatalf("update: %v", err)
	}
}

// newStorageWith returns a Storage whose state equals
// MemoryStorage{ents: ents}: ents[0] is the dummy (compacted) entry.
func newStorageWith(tb testing.TB, ents []*pb.Entry) (*Storage, *bolt.DB) {
	tb.Helper()
	db, _ := openDB(tb)
	s := openStorage(tb, db)
	dummy := ents[0]
	update(tb, db, func(tx *bolt.Tx) error {
		var all []*pb.Entry
		for i := uint64(1); i < dummy.GetIndex(); i++ {
			all = append(all, entry(i, dummy.GetTerm()))
		}
		if dummy.GetIndex() > 0 {
			all = append(all, dummy)
		}
		all = append(all, ents[1:]...)
		if err := s.Append(tx, all); err != nil {
			return err
		}
		if dummy.GetIndex() > 0 {
			return s.Compact(tx, dummy.GetIndex())
		}
		return nil
	})
	return s, db
}

func entry(index, term uint64) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term)}
}

// index(i).terms(t1, t2, ...) builds entries i, i+1, ... with those terms,
// as in raft's own tests.
type index uint64

func (i index) terms(terms ...uint64) []*pb.Entry {
	ents := make([]*pb.Entry, 0, len(terms))
	for j, t := range terms {
		ents = append(ents, entry(uint64(i)+uint64(j), t))
	}
	return ents
}

// dump returns the whole log as MemoryStorage keeps it: the dummy entry
// (compacted index and its term) followed by the entries.
func dump(tb testing.TB, s *Storage) []*pb.Entry {
	tb.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	term, err := s.Term(first - 1)
	if err != nil {
		tb.Fatalf("Term(%d): %v", first-1, err)
	}
	out := []*pb.Entry{entry(first-1, term)}
	if last >= first {
		ents, err := s.Entries(first, last+1, math.MaxUint64)
		if err != nil {
			tb.Fatalf("Entries(%d, %d): %v", first, last+1, err)
		}
		out = append(out, ents...)
	}
	return out
}

func equalEntries(a, b []*pb.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func fmtEntries(ents []*pb.Entry) string {
	s := "["
	for i, e := range ents {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d/%d", e.GetIndex(), e.GetTerm())
		if len(e.GetData()) > 0 {
			s += fmt.Sprintf("(%dB)", len(e.GetData()))
		}
	}
	return s + "]"
}
