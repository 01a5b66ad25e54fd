package transport

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// TestBlockedProposalKeepsStreamMoving is the regression test of issue 9: a
// peer's forwarded proposals arrive at a node that knows no leader (raft
// holds them in Step), and the messages behind them on the same stream
// (here a heartbeat; in the field, the vote rejections that would have told
// the node of the new leader) must still reach the node.
func TestBlockedProposalKeepsStreamMoving(t *testing.T) {
	ra, rb := newFakeRaft(), newFakeRaft()
	rb.blockProposals = true
	a := newTestTransport(t, 1, "c", ra, nil, 0)
	b := newTestTransport(t, 2, "c", rb, nil, 0)
	a.AddPeer(2, b.Addr().String())

	a.Send([]*raftpb.Message{
		msg(raftpb.MessageType_MsgProp, 1, 2, 0),
		msg(raftpb.MessageType_MsgProp, 1, 2, 0),
		msg(raftpb.MessageType_MsgHeartbeat, 1, 2, 7),
	})
	eventually(t, "the heartbeat behind two held proposals", func() bool { return rb.count(1) == 1 })
	if got := rb.received(1)[0]; got.GetType() != raftpb.MessageType_MsgHeartbeat || got.GetIndex() != 7 {
		t.Errorf("expected the heartbeat, got %v %d", got.GetType(), got.GetIndex())
	}
}

// silentPeer accepts stream connections, answers their handshake and then
// neither reads nor writes, like a peer behind a partition that drops
// packets or a paused process.
type silentPeer struct {
	ln       net.Listener
	accepted atomic.Int32
}

func newSilentPeer(t *testing.T) *silentPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentPeer{ln: ln}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
			if _, err := readHandshake(c); err == nil {
				c.Write([]byte{replyOK})
				p.accepted.Add(1)
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return p
}

// TestSilentPeerIsRedialled: the sender notices within StreamTimeout that
// nothing comes back on a stream (no keepalive) and dials again.
func TestSilentPeerIsRedialled(t *testing.T) {
	peer := newSilentPeer(t)
	ra := newFakeRaft()
	a := startTransport(t, Config{ID: 1, Cluster: "c", Listen: "127.0.0.1:0", Raft: ra,
		Snapshotter: newHashSnapshotter(1, 0), StreamTimeout: 200 * time.Millisecond})
	a.AddPeer(2, peer.ln.Addr().String())
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 2, 1)})
	eventually(t, "a second connection", func() bool { return peer.accepted.Load() >= 2 })
	if ra.unreachableCount(2) == 0 {
		t.Errorf("expected the silent peer to be reported unreachable")
	}
}

// TestSilentDialerIsDropped: the receiver closes a stream on which nothing
// arrives for StreamTimeout, and writes keepalives meanwhile.
func TestSilentDialerIsDropped(t *testing.T) {
	b := startTransport(t, Config{ID: 2, Cluster: "c", Listen: "127.0.0.1:0", Raft: newFakeRaft(),
		Snapshotter: newHashSnapshotter(1, 0), StreamTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := handshake{kind: kindStream, from: 1, to: 2, cluster: "c"}
	if _, err := c.Write(h.encode()); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var reply [1]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil || reply[0] != replyOK {
		t.Fatalf("expected handshake accepted, got %v %v", reply[0], err)
	}
	n, err := io.Copy(io.Discard, c) // keepalive bytes until the receiver closes
	if err != nil {
		t.Fatalf("expected the receiver to close the silent stream, got %v", err)
	}
	if n == 0 {
		t.Errorf("expected keepalive bytes from the receiver before it closed")
	}
}

// TestIdleStreamStaysUp: keepalives keep an idle stream open for many
// StreamTimeouts; nothing is reported unreachable.
func TestIdleStreamStaysUp(t *testing.T) {
	ra, rb := newFakeRaft(), newFakeRaft()
	cfg := func(id uint64, r *fakeRaft) Config {
		return Config{ID: id, Cluster: "c", Listen: "127.0.0.1:0", Raft: r,
			Snapshotter: newHashSnapshotter(1, 0), StreamTimeout: 100 * time.Millisecond}
	}
	a := startTransport(t, cfg(1, ra))
	b := startTransport(t, cfg(2, rb))
	a.AddPeer(2, b.Addr().String())
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 2, 1)})
	eventually(t, "the first message", func() bool { return rb.count(1) == 1 })
	time.Sleep(time.Second) // ten stream timeouts without a message
	a.Send([]*raftpb.Message{msg(raftpb.MessageType_MsgHeartbeat, 1, 2, 2)})
	eventually(t, "the second message", func() bool { return rb.count(1) == 2 })
	if n := ra.unreachableCount(2); n != 0 {
		t.Errorf("expected no unreachable reports on an idle stream, got %d", n)
	}
}
