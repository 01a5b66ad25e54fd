package raftlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The state machine of the raft tests: a bucket with the applied index and
// the number and sum of the applied proposals, written in the same
// transaction as the Ready that carried them.
var (
	appBucket  = []byte("app")
	appliedKey = []byte("applied")
	countKey   = []byte("count")
	sumKey     = []byte("sum")
)

func getUint(b *bolt.Bucket, k []byte) uint64 {
	if v := b.Get(k); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putUint(b *bolt.Bucket, k []byte, v uint64) error {
	return b.Put(k, binary.BigEndian.AppendUint64(nil, v))
}

func quietLogger() raft.Logger { return &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)} }

// singleNode runs the Ready loop of one raft.Node over a Storage, in the
// order raft's documentation prescribes: persist, (send), apply, Advance.
type singleNode struct {
	db      *bolt.DB
	s       *Storage
	n       raft.Node
	applied atomic.Uint64
	count   atomic.Uint64
	stopc   chan struct{}
	done    chan struct{}
	err     error
}

func startSingle(t *testing.T, db *bolt.DB, restart bool) *singleNode {
	t.Helper()
	sn := &singleNode{db: db, s: openStorage(t, db), stopc: make(chan struct{}), done: make(chan struct{})}
	update(t, db, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(appBucket)
		if err != nil {
			return err
		}
		sn.applied.Store(getUint(b, appliedKey))
		sn.count.Store(getUint(b, countKey))
		return nil
	})
	c := &raft.Config{
		ID:              1,
		ElectionTick:    10,
		HeartbeatTick:   1,
		Storage:         sn.s,
		Applied:         sn.applied.Load(),
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		Logger:          quietLogger(),
	}
	if restart {
		sn.n = raft.RestartNode(c)
	} else {
		sn.n = raft.StartNode(c, []raft.Peer{{ID: 1}})
	}
	go sn.run()
	return sn
}

func (sn *singleNode) run() {
	defer close(sn.done)
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-sn.stopc:
			return
		case <-ticker.C:
			sn.n.Tick()
		case rd := <-sn.n.Ready():
			if err := sn.db.Update(func(tx *bolt.Tx) error { return sn.handle(tx, rd) }); err != nil {
				sn.err = err
				return
			}
			// A single member has no messages to send.
			sn.n.Advance()
		}
	}
}

func (sn *singleNode) handle(tx *bolt.Tx, rd raft.Ready) error {
	applied, count, err := handleReady(tx, sn.s, rd, sn.n.ApplyConfChange)
	if err != nil {
		return err
	}
	tx.OnCommit(func() { sn.applied.Store(applied); sn.count.Store(count) })
	return nil
}

// handleReady persists rd and applies its committed entries in tx, as the
// owner of a Storage does, and returns the applied index and proposal count.
// Every 64 applied entries it takes a snapshot (its state machine state is
// kept under "snap/<index>" for the test transport) and compacts the log,
// keeping 16 entries for followers that lag a little.
func handleReady(tx *bolt.Tx, s *Storage, rd raft.Ready, applyCC func(pb.ConfChangeI) *pb.ConfState) (uint64, uint64, error) {
	app, err := tx.CreateBucketIfNotExists(appBucket)
	if err != nil {
		return 0, 0, err
	}
	applied, count, sum := getUint(app, appliedKey), getUint(app, countKey), getUint(app, sumKey)
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := s.ApplySnapshot(tx, rd.Snapshot); err != nil {
			return 0, 0, err
		}
		// The zone data would be streamed; the test carries count and sum.
		d := rd.Snapshot.GetData()
		if len(d) != 16 {
			return 0, 0, fmt.Errorf("snapshot %d carries %d bytes", rd.Snapshot.GetMetadata().GetIndex(), len(d))
		}
		applied = rd.Snapshot.GetMetadata().GetIndex()
		count, sum = binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:])
	}
	if err := s.SetHardState(tx, rd.HardState); err != nil {
		return 0, 0, err
	}
	if err := s.Append(tx, rd.Entries); err != nil {
		return 0, 0, err
	}
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() != applied+1 {
			return 0, 0, fmt.Errorf("entry %d applied after %d", e.GetIndex(), applied)
		}
		applied = e.GetIndex()
		switch e.GetType() {
		case pb.EntryConfChange:
			cc := &pb.ConfChange{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return 0, 0, err
			}
			if err := s.SetConfState(tx, applyCC(cc)); err != nil {
				return 0, 0, err
			}
		case pb.EntryNormal:
			if len(e.GetData()) == 8 {
				count++
				sum += binary.BigEndian.Uint64(e.GetData())
			}
		}
	}
	if len(rd.CommittedEntries) > 0 {
		snap, err := s.Snapshot()
		if err != nil {
			return 0, 0, err
		}
		if applied-snap.GetMetadata().GetIndex() >= 64 {
			if _, err := s.CreateSnapshot(tx, applied, nil); err != nil {
				return 0, 0, err
			}
			state := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, count), sum)
			if err := app.Put(fmt.Appendf(nil, "snap/%d", applied), state); err != nil {
				return 0, 0, err
			}
			if err := s.Compact(tx, applied-16); err != nil && err != raft.ErrCompacted {
				return 0, 0, err
			}
		}
	}
	for k, v := range map[string]uint64{"applied": applied, "count": count, "sum": sum} {
		if err := putUint(app, []byte(k), v); err != nil {
			return 0, 0, err
		}
	}
	return applied, count, nil
}

func (sn *singleNode) stop(t *testing.T) {
	t.Helper()
	close(sn.stopc)
	<-sn.done
	sn.n.Stop()
	if sn.err != nil {
		t.Fatalf("ready loop: %v", sn.err)
	}
}

// propose proposes values from..to-1 and waits until they are applied.
func (sn *singleNode) propose(t *testing.T, from, to uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for sn.n.Status().Lead != 1 {
		if err := sn.n.Campaign(ctx); err != nil {
			t.Fatalf("campaign: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := sn.count.Load() + to - from
	for v := from; v < to; v++ {
		if err := sn.n.Propose(ctx, binary.BigEndian.AppendUint64(nil, v)); err != nil {
			if errors.Is(err, raft.ErrProposalDropped) {
				v--
				time.Sleep(time.Millisecond)
				continue
			}
			t.Fatalf("propose %d: %v", v, err)
		}
	}
	for sn.count.Load() < want {
		select {
		case <-ctx.Done():
			t.Fatalf("applied %d proposals, expected %d", sn.count.Load(), want)
		case <-sn.done:
			t.Fatalf("ready loop stopped: %v", sn.err)
		case <-time.After(time.Millisecond):
		}
	}
}

func TestRaftSingleNodeRestart(t *testing.T) {
	db, path := openDB(t)
	sn := startSingle(t, db, false)
	sn.propose(t, 1, 301)
	sn.stop(t)
	applied := sn.applied.Load()
	wantLast, _ := sn.s.LastIndex()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = reopenDB(t, path)
	sn = startSingle(t, db, true)
	hs, cs, err := sn.s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if hs.GetCommit() < applied || hs.GetTerm() == 0 || hs.GetVote() != 1 {
		t.Errorf("expected a hard state committing at least %d with a vote for 1, got %v", applied, hs)
	}
	if len(cs.GetVoters()) != 1 || cs.GetVoters()[0] != 1 {
		t.Errorf("expected voters [1], got %v", cs.GetVoters())
	}
	if first, _ := sn.s.FirstIndex(); first <= 1 {
		t.Errorf("expected the log to have been compacted, first index is %d", first)
	}
	if last, _ := sn.s.LastIndex(); last < wantLast {
		t.Errorf("expected last index at least %d, got %d", wantLast, last)
	}
	if snap, _ := sn.s.Snapshot(); raft.IsEmptySnap(snap) {
		t.Errorf("expected a snapshot, got none")
	}

	sn.propose(t, 301, 401) // the handler fails if an entry is applied twice
	sn.stop(t)
	var count, sum uint64
	update(t, db, func(tx *bolt.Tx) error {
		count, sum = getUint(tx.Bucket(appBucket), countKey), getUint(tx.Bucket(appBucket), sumKey)
		return nil
	})
	if count != 400 || sum != 400*401/2 {
		t.Errorf("expected 400 proposals summing to %d, got %d summing to %d", 400*401/2, count, sum)
	}
}
