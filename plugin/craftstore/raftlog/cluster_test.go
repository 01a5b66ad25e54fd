package raftlog

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// member is one RawNode of a deterministic in-process cluster.
type member struct {
	id      uint64
	path    string
	db      *bolt.DB
	s       *Storage
	rn      *raft.RawNode
	applied uint64
	count   uint64
}

// cluster steps its members in one goroutine and carries their messages.
// A member in cut neither sends nor receives; a member with rn == nil is
// down.
type cluster struct {
	t       *testing.T
	members []*member
	cut     map[uint64]bool
}

func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, cut: map[uint64]bool{}}
	dir := t.TempDir()
	var peers []raft.Peer
	for i := 1; i <= n; i++ {
		peers = append(peers, raft.Peer{ID: uint64(i)})
	}
	for i := 1; i <= n; i++ {
		m := &member{id: uint64(i), path: filepath.Join(dir, fmt.Sprintf("m%d.db", i))}
		c.members = append(c.members, m)
		c.start(m)
		if err := m.rn.Bootstrap(peers); err != nil {
			t.Fatalf("bootstrap %d: %v", m.id, err)
		}
	}
	return c
}

// start opens the member's file and (re)creates its RawNode from it.
func (c *cluster) start(m *member) {
	m.db = reopenDB(c.t, m.path)
	m.db.NoSync = true // a crash here is a clean Close: fsync is not under test
	m.s = openStorage(c.t, m.db)
	update(c.t, m.db, func(tx *bolt.Tx) error {
		if b := tx.Bucket(appBucket); b != nil {
			m.applied, m.count = getUint(b, appliedKey), getUint(b, countKey)
		}
		return nil
	})
	rn, err := raft.NewRawNode(&raft.Config{
		ID:              m.id,
		ElectionTick:    10,
		HeartbeatTick:   1,
		Storage:         m.s,
		Applied:         m.applied,
		MaxSizePerMsg:   4096,
		MaxInflightMsgs: 16,
		Logger:          quietLogger(),
	})
	if err != nil {
		c.t.Fatalf("starting %d: %v", m.id, err)
	}
	m.rn = rn
}

// crash drops the member's RawNode and closes its file.
func (c *cluster) crash(m *member) {
	m.rn = nil
	if err := m.db.Close(); err != nil {
		c.t.Fatal(err)
	}
}

// round ticks every live member, handles its Ready and delivers the
// messages, which only leave after the Ready that produced them is durable.
func (c *cluster) round() {
	var msgs []*pb.Message
	for _, m := range c.members {
		if m.rn == nil {
			continue
		}
		m.rn.Tick()
		if !m.rn.HasReady() {
			continue
		}
		rd := m.rn.Ready()
		if !raft.IsEmptySnap(rd.Snapshot) || rd.HardState != nil || len(rd.Entries) > 0 || len(rd.CommittedEntries) > 0 {
			err := m.db.Update(func(tx *bolt.Tx) error {
				var err error
				m.applied, m.count, err = handleReady(tx, m.s, rd, m.rn.ApplyConfChange)
				return err
			})
			if err != nil {
				c.t.Fatalf("member %d: %v", m.id, err)
			}
		}
		msgs = append(msgs, rd.Messages...)
		m.rn.Advance(rd)
	}
	for _, msg := range msgs {
		from, to := c.members[msg.GetFrom()-1], c.members[msg.GetTo()-1]
		if c.cut[from.id] || c.cut[to.id] || to.rn == nil {
			if msg.GetType() == pb.MsgSnap {
				from.rn.ReportSnapshot(to.id, raft.SnapshotFailure)
			}
			continue
		}
		if msg.GetType() == pb.MsgSnap {
			// Storage.Snapshot has no Data: attach the state at that index,
			// as the transport streams the zone data.
			idx := msg.GetSnapshot().GetMetadata().GetIndex()
			update(c.t, from.db, func(tx *bolt.Tx) error {
				msg.Snapshot.Data = append([]byte(nil), tx.Bucket(appBucket).Get(fmt.Appendf(nil, "snap/%d", idx))...)
				return nil
			})
		}
		if err := to.rn.Step(msg); err != nil {
			c.t.Fatalf("member %d stepping %v: %v", to.id, msg.GetType(), err)
		}
		if msg.GetType() == pb.MsgSnap {
			from.rn.ReportSnapshot(to.id, raft.SnapshotFinish)
		}
	}
}

// until runs rounds until cond holds.
func (c *cluster) until(what string, cond func() bool) {
	c.t.Helper()
	for i := 0; i < 5000; i++ {
		if cond() {
			return
		}
		c.round()
	}
	c.t.Fatalf("gave up waiting for %s", what)
}

// leader makes m the leader: it campaigns until it wins (raft ignores a
// campaign while conf changes are pending, or loses it to a random timeout).
func (c *cluster) leader(m *member) {
	c.t.Helper()
	i := 0
	c.until(fmt.Sprintf("member %d to lead", m.id), func() bool {
		if m.rn.Status().RaftState == raft.StateLeader {
			return true
		}
		if i%5 == 0 {
			if err := m.rn.Campaign(); err != nil {
				c.t.Fatal(err)
			}
		}
		i++
		return false
	})
}

func (c *cluster) propose(m *member, from, to uint64) {
	c.t.Helper()
	for v := from; v < to; v++ {
		if err := m.rn.Propose(binary.BigEndian.AppendUint64(nil, v)); err != nil {
			c.t.Fatalf("member %d proposing %d: %v", m.id, v, err)
		}
		c.round()
	}
}

// allApplied waits until every live, connected member applied count
// proposals.
func (c *cluster) allApplied(count uint64) {
	c.t.Helper()
	c.until(fmt.Sprintf("%d proposals applied everywhere", count), func() bool {
		for _, m := range c.members {
			if m.rn != nil && !c.cut[m.id] && m.count != count {
				return false
			}
		}
		return true
	})
}

// TestRaftClusterCatchUpAndTruncate runs three members on this Storage: a
// member that crashed misses so much that it must catch up from a snapshot
// (ApplySnapshot), and an isolated leader's uncommitted entries are
// overwritten and truncated by the new leader (Append over a longer
// conflicting suffix).
func TestRaftClusterCatchUpAndTruncate(t *testing.T) {
	c := newCluster(t, 3)
	m1, m2, m3 := c.members[0], c.members[1], c.members[2]
	c.leader(m1)
	c.propose(m1, 1, 101)
	c.allApplied(100)

	// m3 crashes, the others move on and compact far beyond its log.
	c.crash(m3)
	c.propose(m1, 101, 401)
	c.allApplied(300 + 100)
	if first, _ := m1.s.FirstIndex(); first <= m3.applied+1 {
		t.Fatalf("leader's log starts at %d, not beyond m3's applied %d", first, m3.applied)
	}
	c.start(m3)
	c.allApplied(400)
	if snap, _ := m3.s.Snapshot(); raft.IsEmptySnap(snap) {
		t.Errorf("expected m3 to have caught up from a snapshot")
	}

	// m1 is cut off while leading and appends entries that never commit.
	c.cut[m1.id] = true
	for v := uint64(1000); v < 1030; v++ {
		if err := m1.rn.Propose(binary.BigEndian.AppendUint64(nil, v)); err != nil {
			t.Fatal(err)
		}
	}
	c.round()
	m1Last, _ := m1.s.LastIndex()
	c.leader(m2)
	c.propose(m2, 401, 411)
	c.allApplied(410)
	delete(c.cut, m1.id)
	c.allApplied(410)

	var sums []uint64
	for _, m := range c.members {
		update(t, m.db, func(tx *bolt.Tx) error {
			sums = append(sums, getUint(tx.Bucket(appBucket), sumKey))
			return nil
		})
		first, _ := m.s.FirstIndex()
		last, _ := m.s.LastIndex()
		if _, err := m.s.Entries(first, last+1, 1<<30); err != nil && err != raft.ErrUnavailable {
			t.Errorf("member %d: reading its log [%d, %d]: %v", m.id, first, last, err)
		}
	}
	want := uint64(410 * 411 / 2)
	for i, sum := range sums {
		if sum != want {
			t.Errorf("member %d: expected sum %d, got %d", i+1, want, sum)
		}
	}
	// m1's 30 uncommitted entries were overwritten and the rest of them
	// truncated: its log now ends where the new leader's does.
	wantLast, _ := m2.s.LastIndex()
	if last, _ := m1.s.LastIndex(); last != wantLast || last >= m1Last {
		t.Errorf("expected m1's log to end at %d (before its old end %d), got %d", wantLast, m1Last, last)
	}
	for i := wantLast - 5; i <= wantLast; i++ {
		want, _ := m2.s.Term(i)
		if got, err := m1.s.Term(i); err != nil || got != want {
			t.Errorf("expected m1's entry %d to be of term %d, got %d, %v", i, want, got, err)
		}
	}
}
