package raftlog

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The methods in this file implement raft.Storage. Each runs in its own
// read-only bbolt transaction (or reads the bounds cached at the last
// commit), so it only observes committed state. raft compares the errors
// ErrCompacted and ErrUnavailable with ==, so they are returned unwrapped.

// InitialState returns the stored HardState (empty if none was stored) and
// the latest ConfState, as set by SetConfState or ApplySnapshot (empty, never
// nil, if none was stored).
func (s *Storage) InitialState() (hs *pb.HardState, cs *pb.ConfState, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		hs, cs, err = StateIn(tx)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return hs, cs, nil
}

// Entries returns the log entries in [lo, hi), limited to maxSize bytes
// (proto.Size of the entries) but always at least one entry. It returns
// raft.ErrCompacted if lo is at or below the compacted index and
// raft.ErrUnavailable if the log holds no entries. The slice is freshly
// allocated: the caller may append to it.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	var ents []*pb.Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		st, err := loadState(tx)
		if err != nil {
			return err
		}
		if lo <= st.compacted {
			return raft.ErrCompacted
		}
		if hi > st.last+1 {
			return fmt.Errorf("raftlog: entries[%d,%d) out of bound last index %d", lo, hi, st.last)
		}
		if st.last == st.compacted {
			return raft.ErrUnavailable
		}
		if lo > hi {
			return fmt.Errorf("raftlog: invalid range entries[%d,%d)", lo, hi)
		}

		// Find the values first, so that the entries can be decoded into
		// memory allocated once for all of them.
		n := hi - lo
		vals := make([][]byte, 0, min(n, 256))
		var size uint64
		c := st.log.Cursor()
		for k, v := c.Seek(encodeIndex(lo)); uint64(len(vals)) < n; k, v = c.Next() {
			want := lo + uint64(len(vals))
			if k == nil || decodeIndex(k) != want {
				return fmt.Errorf("raftlog: entry %d missing inside the log (%d, %d]", want, st.compacted, st.last)
			}
			// len(v) is proto.Size of the entry: it was stored marshaled.
			if len(vals) > 0 && size+uint64(len(v)) > maxSize {
				break
			}
			size += uint64(len(v))
			vals = append(vals, v)
		}
		arena := newArena(len(vals), size)
		ents = make([]*pb.Entry, len(vals))
		for i, v := range vals {
			if ents[i], err = arena.decode(v); err != nil { // copies out of the mmap
				return fmt.Errorf("raftlog: decoding entry %d: %w", lo+uint64(i), err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ents, nil
}

// Term returns the term of entry i, which must be in the range
// [FirstIndex()-1, LastIndex()]: raft.ErrCompacted below it,
// raft.ErrUnavailable above it. It answers from the terms cached at the
// last commit that changed the log, without a transaction: raft asks for
// the term before every append it sends.
func (s *Storage) Term(i uint64) (uint64, error) {
	if term, ok, err := s.bounds.Load().term(i); ok {
		return term, err
	}
	return s.storedTerm(i)
}

// storedTerm reads the term of entry i from the log in bbolt, with Term's
// errors.
func (s *Storage) storedTerm(i uint64) (uint64, error) {
	var term uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		st, err := loadMarker(tx)
		if err != nil {
			return err
		}
		term, err = st.term(i)
		return err
	})
	if err != nil {
		return 0, err
	}
	return term, nil
}

// LastIndex returns the index of the last entry in the log, or the compacted
// index if the log is empty.
func (s *Storage) LastIndex() (uint64, error) {
	return s.bounds.Load().last, nil
}

// FirstIndex returns the index of the first entry possibly available through
// Entries: the compacted index plus one.
func (s *Storage) FirstIndex() (uint64, error) {
	return s.bounds.Load().compacted + 1, nil
}

// Snapshot returns the metadata (Index, Term, ConfState) of the latest
// snapshot, with nil Data: the zone data lives in the same bbolt file and is
// streamed by the transport. Without a snapshot it returns an empty one.
func (s *Storage) Snapshot() (*pb.Snapshot, error) {
	md := &pb.SnapshotMetadata{}
	err := s.db.View(func(tx *bolt.Tx) error {
		st, err := loadMarker(tx)
		if err != nil {
			return err
		}
		if v := st.meta.Get(snapshotKey); v != nil {
			if err := proto.Unmarshal(v, md); err != nil {
				return fmt.Errorf("decoding snapshot metadata: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	return pb.EnsureSnapshot(&pb.Snapshot{Metadata: md}), nil
}

// The functions below read inside a transaction of the caller's, so that
// what they see of the log and of the state machine sharing its file is one
// moment of both.

// StateIn returns the HardState and ConfState stored in tx (as
// InitialState does).
func StateIn(tx *bolt.Tx) (*pb.HardState, *pb.ConfState, error) {
	st, err := loadMarker(tx)
	if err != nil {
		return nil, nil, fmt.Errorf("raftlog: %w", err)
	}
	hs, cs := &pb.HardState{}, &pb.ConfState{}
	if v := st.meta.Get(hardStateKey); v != nil {
		if err := proto.Unmarshal(v, hs); err != nil {
			return nil, nil, fmt.Errorf("raftlog: decoding hard state: %w", err)
		}
	}
	if v := st.meta.Get(confStateKey); v != nil {
		if err := proto.Unmarshal(v, cs); err != nil {
			return nil, nil, fmt.Errorf("raftlog: decoding conf state: %w", err)
		}
	}
	return hs, pb.EnsureConfState(cs), nil
}

// ScanIn calls f with each entry of the log in tx after index after, in
// order, until f returns false. The entry passed to f is reused for the
// next one: f must not keep it.
func ScanIn(tx *bolt.Tx, after uint64, f func(*pb.Entry) bool) error {
	st, err := loadMarker(tx)
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	c := st.log.Cursor()
	var e pb.Entry
	for k, v := c.Seek(encodeIndex(max(after, st.compacted) + 1)); k != nil; k, v = c.Next() {
		if err := proto.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("raftlog: decoding entry %d: %w", decodeIndex(k), err)
		}
		if !f(&e) {
			return nil
		}
	}
	return nil
}
