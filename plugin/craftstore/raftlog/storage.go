// Package raftlog implements raft.Storage over buckets of a bbolt database
// that the caller shares with its state machine.
//
// The Raft log, HardState, ConfState and snapshot metadata live in two
// buckets ("raft.log" and "raft.meta") of the member's one bbolt file. Reads
// (the raft.Storage methods) run in their own read-only transactions and so
// only ever observe committed state. Writes take a write transaction owned by
// the caller, so that persisting one Raft Ready and applying its committed
// entries to the zone data share a single commit and a single fsync.
//
// Log entries are keyed by their index as a big-endian uint64 and stored as
// marshaled raftpb.Entry messages. The entry just before the first one in
// the log (the "compacted" entry, MemoryStorage's dummy entry) is remembered
// by index and term only, so that Term answers for FirstIndex()-1.
package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
)

var (
	logBucket  = []byte("raft.log")
	metaBucket = []byte("raft.meta")

	hardStateKey = []byte("hardstate") // marshaled pb.HardState
	confStateKey = []byte("confstate") // marshaled pb.ConfState, the latest applied configuration
	snapshotKey  = []byte("snapshot")  // marshaled pb.SnapshotMetadata of the latest snapshot
	compactedKey = []byte("compacted") // index and term (2 × big-endian uint64) of the last compacted entry
)

// Storage implements raft.Storage over buckets of a bbolt DB that the caller
// also uses for the state machine. It is safe for concurrent use: raft's
// goroutine may call the read methods while the owner runs a write
// transaction in another goroutine.
type Storage struct {
	db *bolt.DB

	// bounds caches the log bounds and terms of the latest committed
	// transaction that changed them. It is replaced, never mutated, by a
	// commit hook.
	bounds atomic.Pointer[bounds]

	// written is the log's terms as the latest transaction that changed the
	// log left them, for the next one to start from. Write transactions
	// are serialized by bbolt.
	written struct {
		sync.Mutex
		tx        *bolt.Tx // the transaction; nil before the first
		runs      []termRun
		committed bool // tx committed (its hook ran)
	}
}

// bounds describes the log of one committed state.
type bounds struct {
	txid          int    // bbolt transaction that produced this state
	compacted     uint64 // index of the last compacted entry: FirstIndex() - 1
	compactedTerm uint64
	last          uint64    // index of the last entry, compacted if the log is empty
	runs          []termRun // the terms of the entries (compacted, last]
}

// termRun is a run of log entries of one term, from index first up to the
// next run's first (or the last index). Terms only grow along a log, so a
// log of thousands of entries has a handful of runs: Term answers from
// them without a transaction.
type termRun struct{ first, term uint64 }

// term returns the term of entry i in b, ok false if b cannot tell (it
// always can, for the bounds the Storage publishes).
func (b *bounds) term(i uint64) (term uint64, ok bool, err error) {
	switch {
	case i < b.compacted:
		return 0, true, raft.ErrCompacted
	case i == b.compacted:
		return b.compactedTerm, true, nil
	case i > b.last:
		return 0, true, raft.ErrUnavailable
	}
	k := sort.Search(len(b.runs), func(k int) bool { return b.runs[k].first > i }) - 1
	if k < 0 {
		return 0, false, nil
	}
	return b.runs[k].term, true, nil
}

// logState is the log as seen from inside one transaction.
type logState struct {
	log, meta     *bolt.Bucket
	compacted     uint64
	compactedTerm uint64
	last          uint64
	runs          []termRun // terms of (compacted, last], set by the writes that change them
}

// Open returns a Storage over db, creating its buckets if they are missing.
// The caller keeps ownership of db and closes it after it stops using the
// Storage. Use one Storage per DB (share it across a Corefile reload) and
// write its buckets only through it: FirstIndex and LastIndex answer from
// bounds that follow the transactions written through this Storage.
func Open(db *bolt.DB) (*Storage, error) {
	exists := false
	if err := db.View(func(tx *bolt.Tx) error {
		exists = tx.Bucket(logBucket) != nil && tx.Bucket(metaBucket) != nil
		return nil
	}); err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	if !exists {
		if err := db.Update(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{logBucket, metaBucket} {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return fmt.Errorf("creating bucket %s: %w", name, err)
				}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("raftlog: %w", err)
		}
	}

	s := &Storage{db: db}
	err := db.View(func(tx *bolt.Tx) error {
		st, err := loadState(tx)
		if err != nil {
			return err
		}
		if k, _ := st.log.Cursor().First(); k != nil && decodeIndex(k) != st.compacted+1 {
			return fmt.Errorf("log starts at %d, expected %d after the compacted entry", decodeIndex(k), st.compacted+1)
		}
		runs, err := st.scanRuns()
		if err != nil {
			return err
		}
		s.bounds.Store(&bounds{txid: tx.ID(), compacted: st.compacted, compactedTerm: st.compactedTerm, last: st.last, runs: runs})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	return s, nil
}

// loadState reads the log bounds visible in tx.
func loadState(tx *bolt.Tx) (*logState, error) {
	st, err := loadMarker(tx)
	if err != nil {
		return nil, err
	}
	st.last = st.compacted
	if k, _ := st.log.Cursor().Last(); k != nil {
		st.last = decodeIndex(k)
	}
	return st, nil
}

// loadMarker reads the buckets and the compacted entry visible in tx, but
// not the last index: st.last is left zero.
func loadMarker(tx *bolt.Tx) (*logState, error) {
	st := &logState{log: tx.Bucket(logBucket), meta: tx.Bucket(metaBucket)}
	if st.log == nil || st.meta == nil {
		return nil, errors.New("buckets missing, storage not opened with raftlog.Open")
	}
	if v := st.meta.Get(compactedKey); v != nil {
		if len(v) != 16 {
			return nil, fmt.Errorf("corrupt compacted marker of %d bytes", len(v))
		}
		st.compacted = binary.BigEndian.Uint64(v[:8])
		st.compactedTerm = binary.BigEndian.Uint64(v[8:])
	}
	return st, nil
}

// term returns the term of entry i as visible in the transaction of st,
// with the errors of raft.Storage.Term. It does not need st.last: the log
// is contiguous, so a missing key above the compacted index is beyond it.
func (st *logState) term(i uint64) (uint64, error) {
	switch {
	case i < st.compacted:
		return 0, raft.ErrCompacted
	case i == st.compacted:
		return st.compactedTerm, nil
	}
	var k [8]byte
	putIndex(k[:], i)
	v := st.log.Get(k[:])
	if v == nil {
		return 0, raft.ErrUnavailable
	}
	return entryTerm(v)
}

// scanRuns reads the terms of the entries (st.compacted, st.last].
func (st *logState) scanRuns() ([]termRun, error) {
	var runs []termRun
	c := st.log.Cursor()
	for k, v := c.Seek(encodeIndex(st.compacted + 1)); k != nil; k, v = c.Next() {
		term, err := entryTerm(v)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", decodeIndex(k), err)
		}
		runs = addRun(runs, decodeIndex(k), term)
	}
	return runs, nil
}

// addRun returns runs with entry i of term appended (i follows the last
// entry of runs).
func addRun(runs []termRun, i, term uint64) []termRun {
	if n := len(runs); n > 0 && runs[n-1].term == term {
		return runs
	}
	return append(runs, termRun{first: i, term: term})
}

// runsIn returns the terms of the log as the write transaction tx sees
// them (st, read from tx): those the previous log change left, when it
// committed, else read from tx (after a rollback).
func (s *Storage) runsIn(tx *bolt.Tx, st *logState) ([]termRun, error) {
	s.written.Lock()
	defer s.written.Unlock()
	switch {
	case s.written.tx == tx || (s.written.tx != nil && s.written.committed):
		return s.written.runs, nil
	case s.written.tx == nil:
		if b := s.bounds.Load(); b.compacted == st.compacted && b.last == st.last {
			return b.runs, nil // as Open found them
		}
	}
	return st.scanRuns()
}

// publish makes the bounds in st the cached ones once tx commits, and the
// terms in st those the next write transaction starts from.
func (s *Storage) publish(tx *bolt.Tx, st *logState) {
	b := &bounds{txid: tx.ID(), compacted: st.compacted, compactedTerm: st.compactedTerm, last: st.last, runs: st.runs}
	s.written.Lock()
	s.written.tx, s.written.runs, s.written.committed = tx, st.runs, false
	s.written.Unlock()
	tx.OnCommit(func() {
		s.written.Lock()
		if s.written.tx == tx {
			s.written.committed = true
		}
		s.written.Unlock()
		// Commit hooks run after bbolt released the writer lock, so a later
		// transaction's hook may already have run: never go backwards.
		for {
			cur := s.bounds.Load()
			if cur.txid > b.txid || s.bounds.CompareAndSwap(cur, b) {
				return
			}
		}
	})
}

// Compile-time check that Storage serves raft.
var _ raft.Storage = (*Storage)(nil)
