package raftlog

import (
	"errors"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The methods in this file write inside a transaction owned by the caller,
// so that one Raft Ready and the apply of its committed entries share one
// commit. Nothing they do is visible to the read methods until tx commits;
// if tx is rolled back, nothing changes. The bytes they Put stay valid for
// the life of tx, as bbolt requires.

// logFillPercent fills log pages completely: keys only ever grow at the end,
// so a page split never has to make room for an insert in the middle.
const logFillPercent = 1.0

// marshalCached reuses the sizes that Append computed just before: raft's
// entries are immutable.
var marshalCached = proto.MarshalOptions{UseCachedSize: true}

// writeState checks that tx is writable and returns the log as visible in it.
func writeState(tx *bolt.Tx) (*logState, error) {
	if !tx.Writable() {
		return nil, errors.New("raftlog: transaction is read-only")
	}
	st, err := loadState(tx)
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	st.log.FillPercent = logFillPercent
	return st, nil
}

// Append writes contiguous entries to the log. Existing entries with an index
// at or above ents[0]'s are replaced (raft may overwrite a conflicting
// suffix), entries at or below the compacted index are ignored, and a gap
// after the last index is an error. Like MemoryStorage.Append it does not
// check that the terms of the entries it keeps match.
func (s *Storage) Append(tx *bolt.Tx, ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	st, err := writeState(tx)
	if err != nil {
		return err
	}
	for i, e := range ents {
		if e.GetIndex() != ents[0].GetIndex()+uint64(i) {
			return fmt.Errorf("raftlog: append of non-contiguous entries: index %d at position %d after %d", e.GetIndex(), i, ents[0].GetIndex())
		}
	}

	first := st.compacted + 1
	last := ents[0].GetIndex() + uint64(len(ents)) - 1
	if last < first {
		return nil // all compacted already
	}
	if first > ents[0].GetIndex() {
		ents = ents[first-ents[0].GetIndex():]
	}
	if ents[0].GetIndex() > st.last+1 {
		return fmt.Errorf("raftlog: missing log entry [last: %d, append at: %d]", st.last, ents[0].GetIndex())
	}

	base, err := s.runsIn(tx, st)
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	// The runs before ents[0], then those of ents: shared with the
	// previous state when ents only extend its last run.
	keep := sort.Search(len(base), func(j int) bool { return base[j].first >= ents[0].GetIndex() })
	runs := base[:keep:keep]
	for _, e := range ents {
		runs = addRun(runs, e.GetIndex(), e.GetTerm())
	}

	// Entries in [ents[0].Index, last] are overwritten by Put; only the part
	// of a conflicting suffix beyond the new last index has to go. Deleting
	// by key costs O(entries deleted) tree descents, never a walk of the log.
	if err := deleteRange(st.log, last+1, st.last); err != nil {
		return err
	}

	// Marshal all values into one buffer: bbolt keeps referencing them until
	// the transaction ends (it copies keys, not values).
	size := 0
	for _, e := range ents {
		size += proto.Size(e)
	}
	buf := make([]byte, 0, size)
	var k [8]byte
	for _, e := range ents {
		start := len(buf)
		if buf, err = marshalCached.MarshalAppend(buf, e); err != nil {
			return fmt.Errorf("raftlog: encoding entry %d: %w", e.GetIndex(), err)
		}
		putIndex(k[:], e.GetIndex())
		if err := st.log.Put(k[:], buf[start:len(buf):len(buf)]); err != nil {
			return fmt.Errorf("raftlog: writing entry %d: %w", e.GetIndex(), err)
		}
	}
	st.last, st.runs = last, runs
	s.publish(tx, st)
	return nil
}

// SetHardState stores hs; a nil hs stores nothing (raft's Ready carries a nil
// HardState when it did not change).
func (s *Storage) SetHardState(tx *bolt.Tx, hs *pb.HardState) error {
	if hs == nil {
		return nil
	}
	st, err := writeState(tx)
	if err != nil {
		return err
	}
	return putProto(st.meta, hardStateKey, hs)
}

// SetConfState stores cs as the latest configuration, which InitialState
// returns. The apply path calls it with the result of ApplyConfChange, in the
// transaction that records the applied index.
func (s *Storage) SetConfState(tx *bolt.Tx, cs *pb.ConfState) error {
	if cs == nil {
		return errors.New("raftlog: nil conf state")
	}
	st, err := writeState(tx)
	if err != nil {
		return err
	}
	return putProto(st.meta, confStateKey, cs)
}

// ApplySnapshot records a snapshot received from the leader: it replaces the
// snapshot metadata and the ConfState and drops the whole log, so that the
// first index becomes the snapshot index plus one. snap.Data is not stored;
// the caller writes the zone data it carries in the same transaction. It
// returns raft.ErrSnapOutOfDate if snap is not newer than the current
// snapshot; a snapshot with index 0 that only carries a ConfState is
// accepted while there is no snapshot (bootstrap), as in MemoryStorage.
func (s *Storage) ApplySnapshot(tx *bolt.Tx, snap *pb.Snapshot) error {
	if snap == nil {
		return errors.New("raftlog: nil snapshot")
	}
	st, err := writeState(tx)
	if err != nil {
		return err
	}
	cur, err := snapshotMeta(st.meta)
	if err != nil {
		return err
	}
	md := snap.GetMetadata()
	if cur.GetIndex() != 0 && cur.GetIndex() >= md.GetIndex() {
		return raft.ErrSnapOutOfDate
	}

	// Dropping and recreating the bucket frees its pages without visiting
	// every key.
	if err := tx.DeleteBucket(logBucket); err != nil {
		return fmt.Errorf("raftlog: dropping log: %w", err)
	}
	if st.log, err = tx.CreateBucket(logBucket); err != nil {
		return fmt.Errorf("raftlog: recreating log: %w", err)
	}

	cs := &pb.ConfState{}
	if md.GetConfState() != nil {
		cs = proto.Clone(md.GetConfState()).(*pb.ConfState)
	}
	cs = pb.EnsureConfState(cs)
	stored := &pb.SnapshotMetadata{Index: new(md.GetIndex()), Term: new(md.GetTerm()), ConfState: cs}
	if err := putProto(st.meta, snapshotKey, stored); err != nil {
		return err
	}
	if err := putProto(st.meta, confStateKey, cs); err != nil {
		return err
	}
	st.compacted, st.compactedTerm, st.last, st.runs = md.GetIndex(), md.GetTerm(), md.GetIndex(), nil
	if err := st.meta.Put(compactedKey, encodeCompacted(st.compacted, st.compactedTerm)); err != nil {
		return fmt.Errorf("raftlog: writing compacted marker: %w", err)
	}
	s.publish(tx, st)
	return nil
}

// CreateSnapshot records the metadata of a local snapshot at the applied
// index and returns it. The term is looked up in the log. Data stays nil:
// the zone data lives in the same file and is streamed separately. If cs is
// nil, the latest ConfState (SetConfState) is used. It returns
// raft.ErrSnapOutOfDate if index is not above the current snapshot's, and an
// error if index is beyond the last index or its term was compacted away.
func (s *Storage) CreateSnapshot(tx *bolt.Tx, index uint64, cs *pb.ConfState) (*pb.Snapshot, error) {
	st, err := writeState(tx)
	if err != nil {
		return nil, err
	}
	cur, err := snapshotMeta(st.meta)
	if err != nil {
		return nil, err
	}
	if index <= cur.GetIndex() {
		return nil, raft.ErrSnapOutOfDate
	}
	if index > st.last {
		return nil, fmt.Errorf("raftlog: snapshot %d is out of bound last index %d", index, st.last)
	}
	term, err := st.term(index)
	if err != nil {
		return nil, fmt.Errorf("raftlog: snapshot %d: %w", index, err)
	}
	if cs == nil {
		cs = &pb.ConfState{}
		if v := st.meta.Get(confStateKey); v != nil {
			if err := proto.Unmarshal(v, cs); err != nil {
				return nil, fmt.Errorf("raftlog: decoding conf state: %w", err)
			}
		}
	} else {
		cs = proto.Clone(cs).(*pb.ConfState)
	}
	md := &pb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: pb.EnsureConfState(cs)}
	if err := putProto(st.meta, snapshotKey, md); err != nil {
		return nil, err
	}
	return &pb.Snapshot{Metadata: proto.Clone(md).(*pb.SnapshotMetadata)}, nil
}

// Compact discards the entries up to and including index; the term of index
// is kept, so Term(index) still answers. It returns raft.ErrCompacted if
// index is at or below the compacted index and an error if it is beyond the
// last index. The caller must not compact beyond the applied index, nor
// beyond the latest snapshot (CreateSnapshot first): raft sends a lagging
// follower the latest snapshot, which must reach at least the first index.
func (s *Storage) Compact(tx *bolt.Tx, index uint64) error {
	st, err := writeState(tx)
	if err != nil {
		return err
	}
	if index <= st.compacted {
		return raft.ErrCompacted
	}
	if index > st.last {
		return fmt.Errorf("raftlog: compact %d is out of bound last index %d", index, st.last)
	}
	term, err := st.term(index)
	if err != nil {
		return fmt.Errorf("raftlog: compact %d: %w", index, err)
	}
	base, err := s.runsIn(tx, st)
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	if err := deleteRange(st.log, st.compacted+1, index); err != nil {
		return err
	}
	// The runs of (index, last]: the one holding index+1 now starts there.
	st.compacted, st.compactedTerm, st.runs = index, term, nil
	if index < st.last {
		j := sort.Search(len(base), func(j int) bool { return base[j].first > index+1 }) - 1
		if j >= 0 {
			st.runs = append(append(make([]termRun, 0, len(base)-j), termRun{first: index + 1, term: base[j].term}), base[j+1:]...)
		} else if st.runs, err = st.scanRuns(); err != nil { // not reached: base covers the log
			return fmt.Errorf("raftlog: %w", err)
		}
	}
	if err := st.meta.Put(compactedKey, encodeCompacted(index, term)); err != nil {
		return fmt.Errorf("raftlog: writing compacted marker: %w", err)
	}
	s.publish(tx, st)
	return nil
}

// deleteRange deletes the entries [lo, hi] of the log by key. The log is
// contiguous, so every key in the range exists; bbolt's Cursor.Delete
// followed by Next would skip keys, so no cursor is walked.
func deleteRange(log *bolt.Bucket, lo, hi uint64) error {
	var k [8]byte
	for i := lo; i <= hi && i >= lo; i++ {
		putIndex(k[:], i)
		if err := log.Delete(k[:]); err != nil {
			return fmt.Errorf("raftlog: deleting entry %d: %w", i, err)
		}
	}
	return nil
}

func snapshotMeta(meta *bolt.Bucket) (*pb.SnapshotMetadata, error) {
	md := &pb.SnapshotMetadata{}
	if v := meta.Get(snapshotKey); v != nil {
		if err := proto.Unmarshal(v, md); err != nil {
			return nil, fmt.Errorf("raftlog: decoding snapshot metadata: %w", err)
		}
	}
	return md, nil
}

func putProto(b *bolt.Bucket, key []byte, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("raftlog: encoding %s: %w", key, err)
	}
	if err := b.Put(key, v); err != nil {
		return fmt.Errorf("raftlog: writing %s: %w", key, err)
	}
	return nil
}
