package transport

import (
	"bufio"
	"net"
	"runtime"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

func TestNew(t *testing.T) {
	r, s := newFakeRaft(), newHashSnapshotter(1, 0)
	tests := []struct {
		cfg Config
		ok  bool
	}{
		{Config{ID: 1, Raft: r, Snapshotter: s}, true},
		{Config{ID: 0, Raft: r, Snapshotter: s}, false},
		{Config{ID: 1, Snapshotter: s}, false},
		{Config{ID: 1, Raft: r}, false},
		{Config{ID: 1, Raft: r, Snapshotter: s, QueueSize: -1}, false},
	}
	for i, tc := range tests {
		tr, err := New(tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("test %d: expected ok %v, got error %v", i, tc.ok, err)
		}
		if err == nil {
			if tr.cfg.QueueSize != DefaultQueueSize || tr.cfg.DialTimeout != DefaultDialTimeout {
				t.Errorf("test %d: expected defaults, got %d and %v", i, tr.cfg.QueueSize, tr.cfg.DialTimeout)
			}
			if tr.Addr() != nil {
				t.Errorf("test %d: expected no address before Start, got %v", i, tr.Addr())
			}
			tr.Stop()
		}
	}
}

// TestExchange has three members send to each other and checks that every
// message arrives, in order per sender.
func TestExchange(t *testing.T) {
	const n = 600
	var rafts [3]*fakeRaft
	var trs [3]*Transport
	for i := range trs {
		rafts[i] = newFakeRaft()
		trs[i] = newTestTransport(t, uint64(i+1), "c", rafts[i], nil, 0)
	}
	for i, a := range trs {
		for j, b := range trs {
			if i != j {
				a.AddPeer(uint64(j+1), b.Addr().String())
			}
		}
	}
	// Batches of varying size, as Ready would deliver them.
	for i, a := range trs {
		from := uint64(i + 1)
		for next := uint64(1); next <= n; {
			var batch []*raftpb.Message
			for k := 0; k < int(next%7)+1 && next <= n; k++ {
				for to := uint64(1); to <= 3; to++ {
					if to != from {
						batch = append(batch, msg(raftpb.MessageType_MsgApp, from, to, next))
					}
				}
				next++
			}
			a.Send(batch)
		}
	}
	for i, r := range rafts {
		for from := uint64(1); from <= 3; from++ {
			if from == uint64(i+1) {
				continue
			}
			eventually(t, "all messages", func() bool { return r.count(from) >= n })
			got := r.received(from)
			if len(got) != n {
				t.Fatalf("member %d from %d: expected %d messages, got %d", i+1, from, n, len(got))
			}
			for k, m := range got {
				if m.GetIndex() != uint64(k+1) || m.GetTo() != uint64(i+1) {
					t.Fatalf("member %d from %d: message %d: expected index %d to %d, got %d to %d",
						i+1, from, k, k+1, i+1, m.GetIndex(), m.GetTo())
				}
			}
		}
	}
	for i, r := range rafts {
		for id := uint64(1); id <= 3; id++ {
			if c := r.unreachableCount(id); c != 0 {
				t.Errorf("member %d: expected no unreachable reports for %d, got %d", i+1, id, c)
			}
		}
	}
}

// TestReconnect restarts a peer on the same address.
func TestReconnect(t *testing.T) {
	ra, rb := newFakeRaft(), newFakeRaft()
	a := newTestTransport(t, 1, "c", ra, nil, 0)
	b := newTestTransport(t, 2, "c", rb, nil, 0)
	addr := b.Addr().String()
	a.AddPeer(2, addr)
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 2, 1)})
	eventually(t, "first message", func() bool { return rb.count(1) == 1 })

	b.Stop()
	eventually(t, "unreachable report", func() bool { return ra.unreachableCount(2) > 0 })

	rb2 := newFakeRaft()
	b2, err := New(Config{ID: 2, Cluster: "c", Listen: addr, Raft: rb2, Snapshotter: newHashSnapshotter(1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b2.Stop)
	eventually(t, "listening on the old address", func() bool { return b2.Start() == nil })
	// Raft keeps sending; messages sent while the peer was down are dropped.
	i := uint64(2)
	eventually(t, "message after restart", func() bool {
		a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 2, i)})
		i++
		return rb2.count(1) > 0
	})
}

// TestFullQueue blocks the receiver until the sender's queue overflows.
func TestFullQueue(t *testing.T) {
	ra, rb := newFakeRaft(), newFakeRaft()
	rb.block = make(chan struct{})
	a := newTestTransport(t, 1, "c", ra, nil, 8)
	b := newTestTransport(t, 2, "c", rb, nil, 0)
	a.AddPeer(2, b.Addr().String())

	data := make([]byte, 64<<10)
	eventually(t, "a full queue", func() bool {
		var batch []*raftpb.Message
		for range 16 {
			m := msg(raftpb.MessageType_MsgApp, 1, 2, 1)
			m.Entries = []*raftpb.Entry{{Data: data}}
			batch = append(batch, m)
		}
		a.Send(batch)
		return ra.unreachableCount(2) > 0
	})
	close(rb.block)
	eventually(t, "messages after unblocking", func() bool { return rb.count(1) > 0 })
}

// TestSendUnknownPeer reports messages for unknown and removed peers.
func TestSendUnknownPeer(t *testing.T) {
	ra := newFakeRaft()
	a := newTestTransport(t, 1, "c", ra, nil, 0)
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 9, 1), snapMsg(1, 9, 5), nil})
	if c := ra.unreachableCount(9); c != 2 {
		t.Errorf("expected 2 unreachable reports, got %d", c)
	}
	if s := ra.snapshots(9); len(s) != 1 || s[0] != raft.SnapshotFailure {
		t.Errorf("expected one snapshot failure, got %v", s)
	}
	a.AddPeer(9, "127.0.0.1:1")
	a.RemovePeer(9)
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 9, 2)})
	if c := ra.unreachableCount(9); c < 3 {
		t.Errorf("expected an unreachable report after RemovePeer, got %d in all", c)
	}
}

// TestAddPeerNewAddress moves a peer from a dead address to a live one.
func TestAddPeerNewAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	ra, rb := newFakeRaft(), newFakeRaft()
	a := newTestTransport(t, 1, "c", ra, nil, 0)
	b := newTestTransport(t, 2, "c", rb, nil, 0)
	a.AddPeer(2, dead)
	a.AddPeer(2, dead) // idempotent
	eventually(t, "unreachable report", func() bool { return ra.unreachableCount(2) > 0 })
	a.AddPeer(2, b.Addr().String())
	i := uint64(1)
	eventually(t, "message at the new address", func() bool {
		a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 2, i)})
		i++
		return rb.count(1) > 0
	})
}

// TestWrongCluster checks that members of another cluster are refused.
func TestWrongCluster(t *testing.T) {
	ra, rb := newFakeRaft(), newFakeRaft()
	a := newTestTransport(t, 1, "red", ra, nil, 0)
	b := newTestTransport(t, 2, "blue", rb, nil, 0)
	a.AddPeer(2, b.Addr().String())
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 2, 1)})
	eventually(t, "unreachable report", func() bool { return ra.unreachableCount(2) > 0 })

	tests := []struct {
		h    handshake
		want byte
	}{
		{handshake{kind: kindStream, from: 1, to: 2, cluster: "red"}, replyWrongCluster},
		{handshake{kind: kindStream, from: 1, to: 3, cluster: "blue"}, replyWrongID},
		{handshake{kind: 7, from: 1, to: 2, cluster: "blue"}, replyMalformed},
		{handshake{kind: kindStream, from: 1, to: 2, cluster: "blue"}, replyOK},
	}
	for i, tc := range tests {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(tc.h.encode())
		var reply [1]byte
		if _, err := c.Read(reply[:]); err != nil {
			t.Fatalf("test %d: %v", i, err)
		}
		if reply[0] != tc.want {
			t.Errorf("test %d: expected reply %d, got %d", i, tc.want, reply[0])
		}
		c.Close()
	}
	if c := rb.count(1); c != 0 {
		t.Errorf("expected no message from another cluster, got %d", c)
	}
}

// TestDropForeign writes frames by hand: only the one addressed to the
// member, from the member named in the handshake, reaches Raft.
func TestDropForeign(t *testing.T) {
	rb := newFakeRaft()
	b := newTestTransport(t, 2, "c", rb, nil, 0)
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(handshake{kind: kindStream, from: 1, to: 2, cluster: "c"}.encode())
	var reply [1]byte
	if _, err := c.Read(reply[:]); err != nil || reply[0] != replyOK {
		t.Fatalf("expected handshake reply %d, got %d (%v)", replyOK, reply[0], err)
	}
	var buf []byte
	for _, m := range []*raftpb.Message{
		msg(raftpb.MessageType_MsgApp, 1, 3, 1), // another member
		msg(raftpb.MessageType_MsgApp, 4, 2, 2), // sender not the one of the handshake
		snapMsg(1, 2, 3),                        // a MsgSnap without its state
		msg(raftpb.MessageType_MsgApp, 1, 2, 4), // good
	} {
		if buf, err = appendFrame(buf, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write(buf); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the good message", func() bool { return rb.count(1) > 0 })
	if got := rb.received(1); len(got) != 1 || got[0].GetIndex() != 4 {
		t.Errorf("expected only message 4, got %v", got)
	}
	if c := rb.count(4); c != 0 {
		t.Errorf("expected no message from 4, got %d", c)
	}
}

// TestStop checks that Stop ends every goroutine, twice over.
func TestStop(t *testing.T) {
	base := runtime.NumGoroutine()
	var trs [3]*Transport
	var rafts [3]*fakeRaft
	for i := range trs {
		rafts[i] = newFakeRaft()
		s := newHashSnapshotter(uint64(i), 4<<20)
		tr, err := New(Config{ID: uint64(i + 1), Cluster: "c", Listen: "127.0.0.1:0", Raft: rafts[i], Snapshotter: s})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Start(); err != nil {
			t.Fatal(err)
		}
		trs[i] = tr
	}
	rafts[2].block = make(chan struct{}) // member 3 never processes: Stop must not wait for it
	for i, a := range trs {
		for j, b := range trs {
			if i != j {
				a.AddPeer(uint64(j+1), b.Addr().String())
			}
		}
	}
	trs[0].AddPeer(4, "127.0.0.1:1") // a peer that never answers
	trs[0].Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 2, 1), msg(raftpb.MessageType_MsgApp, 1, 3, 1), snapMsg(1, 2, 10)})
	trs[1].Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 2, 1, 1), snapMsg(2, 3, 10)})
	eventually(t, "traffic", func() bool { return rafts[1].count(1) > 0 && rafts[0].count(2) > 0 })

	for _, tr := range trs {
		tr.Stop()
		tr.Stop()
	}
	trs[0].Send([]*raftpb.Message{msg(raftpb.MessageType_MsgApp, 1, 2, 2)})
	trs[0].AddPeer(5, "127.0.0.1:1")
	if err := trs[0].Start(); err == nil {
		t.Errorf("expected Start after Stop to fail")
	}
	for range 2000 {
		if runtime.NumGoroutine() <= base {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("expected at most %d goroutines, got %d:\n%s", base, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
}

// TestFrameLimit checks that a frame claiming more than 64 MiB is refused
// before anything is allocated for it.
func TestFrameLimit(t *testing.T) {
	r, w := net.Pipe()
	defer r.Close()
	go func() {
		w.Write([]byte{0x04, 0x00, 0x00, 0x01})
		w.Close()
	}()
	fr := frameReader{r: bufio.NewReader(r)}
	if _, err := fr.next(); err == nil {
		t.Errorf("expected an error for a frame of 64 MiB + 1")
	}
}
