package transport

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestSnapshot streams 64 MiB from a generator to a receiver that hashes it
// on the fly, and checks that the transport did not buffer it.
func TestSnapshot(t *testing.T) {
	const size = 64 << 20
	ra, rb := newFakeRaft(), newFakeRaft()
	sa, sb := newHashSnapshotter(42, size), newHashSnapshotter(0, 0)
	a := newTestTransport(t, 1, "c", ra, sa, 0)
	b := newTestTransport(t, 2, "c", rb, sb, 0)
	a.AddPeer(2, b.Addr().String())
	want := genSum(42, size)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a.Send([]*raftpb.Message{snapMsg(1, 2, 77), msg(raftpb.MessageType_MsgHeartbeat, 1, 2, 0)})
	eventually(t, "snapshot report", func() bool { return len(ra.snapshots(2)) > 0 })
	runtime.ReadMemStats(&after)

	if s := ra.snapshots(2); len(s) != 1 || s[0] != raft.SnapshotFinish {
		t.Fatalf("expected SnapshotFinish, got %v", s)
	}
	got := <-sb.got
	if got.err != nil || got.n != size || got.sum != want || got.index != 77 {
		t.Errorf("expected %d bytes with sum %x at index 77, got %d bytes with sum %x at %d (%v)",
			size, want, got.n, got.sum, got.index, got.err)
	}
	var snap *raftpb.Message
	for _, m := range rb.received(1) {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			snap = m
		}
	}
	if snap.GetSnapshot().GetMetadata().GetIndex() != 77 {
		t.Errorf("expected MsgSnap at index 77 processed, got %v", snap)
	}
	// Both ends run in this process; 64 MiB held anywhere would show.
	t.Logf("allocated %d KiB while streaming", (after.TotalAlloc-before.TotalAlloc)>>10)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("expected less than 16 MiB allocated for a %d MiB snapshot, got %d MiB", size>>20, alloc>>20)
	}
}

// flipProxy forwards connections to target and flips the byte at offset in
// every client-to-server stream long enough to have one.
func flipProxy(t *testing.T, target string, offset int64) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				io.Copy(c, s)
				c.Close()
			}()
			go func() {
				defer wg.Done()
				io.Copy(s, &flipReader{r: c, at: offset})
				s.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

type flipReader struct {
	r   io.Reader
	off int64
	at  int64
}

func (f *flipReader) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if f.at >= f.off && f.at < f.off+int64(n) {
		b[f.at-f.off] ^= 0x20
	}
	f.off += int64(n)
	return n, err
}

// TestSnapshotCorrupt checks that a stream that does not match its trailer
// fails on both ends, and that Raft never sees the MsgSnap, even when the
// Snapshotter stops reading at the end of its own format.
func TestSnapshotCorrupt(t *testing.T) {
	const size = 4 << 20
	tests := []struct {
		name    string
		flip    int64 // byte of the connection to flip, or 0
		readMax int64 // bytes the receiver reads, or 0 for all
	}{
		{"flipped byte, receiver reads to EOF", 1 << 20, 0},
		{"flipped byte, receiver reads exact size", 1 << 20, size},
		{"receiver reads less than sent", 0, size - 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ra, rb := newFakeRaft(), newFakeRaft()
			sa, sb := newHashSnapshotter(7, size), newHashSnapshotter(0, 0)
			sb.readMax = tc.readMax
			a := newTestTransport(t, 1, "c", ra, sa, 0)
			b := newTestTransport(t, 2, "c", rb, sb, 0)
			addr := b.Addr().String()
			if tc.flip > 0 {
				addr = flipProxy(t, addr, tc.flip)
			}
			a.AddPeer(2, addr)
			a.Send([]*raftpb.Message{snapMsg(1, 2, 5)})
			eventually(t, "snapshot report", func() bool { return len(ra.snapshots(2)) > 0 })
			if s := ra.snapshots(2); len(s) != 1 || s[0] != raft.SnapshotFailure {
				t.Errorf("expected SnapshotFailure, got %v", s)
			}
			got := <-sb.got
			if tc.readMax == 0 && !errors.Is(got.err, ErrCorruptSnapshot) {
				t.Errorf("expected the reader to return %v, got %v", ErrCorruptSnapshot, got.err)
			}
			if c := rb.count(1); c != 0 {
				t.Errorf("expected Raft to see no message, got %d", c)
			}
		})
	}
}

// TestSnapshotTruncated fails the sender's WriteSnapshot halfway.
func TestSnapshotTruncated(t *testing.T) {
	ra, rb := newFakeRaft(), newFakeRaft()
	sa, sb := newHashSnapshotter(7, 8<<20), newHashSnapshotter(0, 0)
	sa.failAt = 3 << 20
	a := newTestTransport(t, 1, "c", ra, sa, 0)
	b := newTestTransport(t, 2, "c", rb, sb, 0)
	a.AddPeer(2, b.Addr().String())
	a.Send([]*raftpb.Message{snapMsg(1, 2, 5)})
	eventually(t, "snapshot report", func() bool { return len(ra.snapshots(2)) > 0 })
	if s := ra.snapshots(2); len(s) != 1 || s[0] != raft.SnapshotFailure {
		t.Errorf("expected SnapshotFailure, got %v", s)
	}
	got := <-sb.got
	if !errors.Is(got.err, io.ErrUnexpectedEOF) {
		t.Errorf("expected %v, got %v", io.ErrUnexpectedEOF, got.err)
	}
	if c := rb.count(1); c != 0 {
		t.Errorf("expected Raft to see no message, got %d", c)
	}
}

// TestSnapshotQueueFull sends more snapshots than one peer takes at a time.
func TestSnapshotQueueFull(t *testing.T) {
	ra, rb := newFakeRaft(), newFakeRaft()
	sa, sb := newHashSnapshotter(7, 1<<20), newHashSnapshotter(0, 0)
	sb.block = make(chan struct{})
	a := newTestTransport(t, 1, "c", ra, sa, 0)
	b := newTestTransport(t, 2, "c", rb, sb, 0)
	a.AddPeer(2, b.Addr().String())
	// At most one is being sent and one waits: the third cannot fit.
	a.Send([]*raftpb.Message{snapMsg(1, 2, 1), snapMsg(1, 2, 2), snapMsg(1, 2, 3)})
	s := ra.snapshots(2)
	if len(s) == 0 || s[0] != raft.SnapshotFailure || ra.unreachableCount(2) == 0 {
		t.Errorf("expected a SnapshotFailure and an unreachable report at once, got %v and %d", s, ra.unreachableCount(2))
	}
	close(sb.block)
	eventually(t, "a snapshot applied", func() bool {
		for _, st := range ra.snapshots(2) {
			if st == raft.SnapshotFinish {
				return true
			}
		}
		return false
	})
}
