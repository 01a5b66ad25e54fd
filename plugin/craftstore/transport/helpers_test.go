package transport

import (
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// fakeRaft records what the transport hands to the local node.
type fakeRaft struct {
	mu          sync.Mutex
	msgs        map[uint64][]*raftpb.Message // by sender
	unreachable map[uint64]int
	snapStatus  map[uint64][]raft.SnapshotStatus
	block       chan struct{} // if not nil, Process waits until it is closed
	// blockProposals makes Process hold every MsgProp until its context
	// ends, as raft.Node.Step does while the node knows no leader.
	blockProposals bool
}

func newFakeRaft() *fakeRaft {
	return &fakeRaft{
		msgs:        make(map[uint64][]*raftpb.Message),
		unreachable: make(map[uint64]int),
		snapStatus:  make(map[uint64][]raft.SnapshotStatus),
	}
}

func (f *fakeRaft) Process(ctx context.Context, m *raftpb.Message) error {
	if f.blockProposals && m.GetType() == raftpb.MessageType_MsgProp {
		<-ctx.Done()
		return ctx.Err()
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs[m.GetFrom()] = append(f.msgs[m.GetFrom()], m)
	return nil
}

func (f *fakeRaft) ReportUnreachable(id uint64) {
	f.mu.Lock()
	f.unreachable[id]++
	f.mu.Unlock()
}

func (f *fakeRaft) ReportSnapshot(id uint64, status raft.SnapshotStatus) {
	f.mu.Lock()
	f.snapStatus[id] = append(f.snapStatus[id], status)
	f.mu.Unlock()
}

func (f *fakeRaft) received(from uint64) []*raftpb.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*raftpb.Message(nil), f.msgs[from]...)
}

func (f *fakeRaft) count(from uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.msgs[from])
}

func (f *fakeRaft) unreachableCount(id uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unreachable[id]
}

func (f *fakeRaft) snapshots(id uint64) []raft.SnapshotStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]raft.SnapshotStatus(nil), f.snapStatus[id]...)
}

// genReader produces size pseudo-random bytes without holding them.
type genReader struct {
	state uint64
	left  int64
}

func newGen(seed uint64, size int64) *genReader { return &genReader{state: seed | 1, left: size} }

func (g *genReader) Read(b []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > g.left {
		b = b[:g.left]
	}
	for i := range b {
		if i%8 == 0 {
			g.state ^= g.state << 13
			g.state ^= g.state >> 7
			g.state ^= g.state << 17
		}
		b[i] = byte(g.state >> (8 * (i % 8)))
	}
	g.left -= int64(len(b))
	return len(b), nil
}

// genSum is the SHA-256 of what newGen(seed, size) produces.
func genSum(seed uint64, size int64) [32]byte {
	h := sha256.New()
	io.Copy(h, newGen(seed, size))
	return [32]byte(h.Sum(nil))
}

// received is what a hashSnapshotter's ReceiveSnapshot saw.
type receivedSnap struct {
	index uint64
	sum   [32]byte
	n     int64
	err   error
}

// hashSnapshotter writes generated state and hashes received state on the
// fly; neither side materialises the stream.
type hashSnapshotter struct {
	seed    uint64
	size    int64
	failAt  int64 // if > 0, WriteSnapshot fails after this many bytes
	readMax int64 // if > 0, ReceiveSnapshot reads exactly this many bytes and stops
	block   chan struct{}
	got     chan receivedSnap
}

func newHashSnapshotter(seed uint64, size int64) *hashSnapshotter {
	return &hashSnapshotter{seed: seed, size: size, got: make(chan receivedSnap, 16)}
}

func (s *hashSnapshotter) WriteSnapshot(w io.Writer) error {
	if s.failAt > 0 {
		if _, err := io.CopyN(w, newGen(s.seed, s.size), s.failAt); err != nil {
			return err
		}
		return errors.New("disk on fire")
	}
	_, err := io.Copy(w, newGen(s.seed, s.size))
	return err
}

func (s *hashSnapshotter) ReceiveSnapshot(m *raftpb.Message, r io.Reader) error {
	if s.block != nil {
		<-s.block
	}
	var h hash.Hash = sha256.New()
	var n int64
	var err error
	if s.readMax > 0 {
		n, err = io.CopyN(h, r, s.readMax)
	} else {
		n, err = io.Copy(h, r)
	}
	s.got <- receivedSnap{index: m.GetSnapshot().GetMetadata().GetIndex(), sum: [32]byte(h.Sum(nil)), n: n, err: err}
	return err
}

// newTestTransport starts a transport on a loopback port.
func newTestTransport(t testing.TB, id uint64, cluster string, r Raft, s Snapshotter, queue int) *Transport {
	t.Helper()
	if s == nil {
		s = newHashSnapshotter(1, 0)
	}
	return startTransport(t, Config{ID: id, Cluster: cluster, Listen: "127.0.0.1:0", Raft: r, Snapshotter: s, QueueSize: queue})
}

// startTransport starts a transport with cfg.
func startTransport(t testing.TB, cfg Config) *Transport {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	return tr
}

// eventually polls cond every 5ms, at most 2000 times (10s).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func msg(typ raftpb.MessageType, from, to, index uint64) *raftpb.Message {
	return &raftpb.Message{Type: typ.Enum(), From: &from, To: &to, Index: &index, Term: new(uint64(1))}
}

func snapMsg(from, to, index uint64) *raftpb.Message {
	m := msg(raftpb.MessageType_MsgSnap, from, to, index)
	m.Snapshot = &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index:     &index,
		Term:      new(uint64(1)),
		ConfState: &raftpb.ConfState{Voters: []uint64{from, to}},
	}}
	return m
}
