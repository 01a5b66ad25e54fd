package transport

import (
	"context"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// countRaft counts processed messages and drops.
type countRaft struct {
	processed   atomic.Int64
	unreachable atomic.Int64
	notify      chan struct{}
}

func (c *countRaft) Process(ctx context.Context, m *raftpb.Message) error {
	c.processed.Add(1)
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return nil
}

func (c *countRaft) ReportUnreachable(uint64)                   { c.unreachable.Add(1) }
func (c *countRaft) ReportSnapshot(uint64, raft.SnapshotStatus) {}

// BenchmarkSendMsgApp sends small MsgApp messages (one 128-byte entry) from
// one transport to another, in batches of 64 with at most 1024 in flight,
// as a leader's Ready loop would.
func BenchmarkSendMsgApp(b *testing.B) {
	const batch, window = 64, 1024
	ra, rb := &countRaft{}, &countRaft{notify: make(chan struct{}, 1)}
	a := newTestTransport(b, 1, "c", ra, nil, 0)
	t := newTestTransport(b, 2, "c", rb, nil, 0)
	a.AddPeer(2, t.Addr().String())
	data := make([]byte, 128)

	msgs := make([]*raftpb.Message, batch)
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		for int64(sent)-rb.processed.Load() > window-batch {
			<-rb.notify
		}
		n := min(batch, b.N-sent)
		for i := range n {
			m := msg(raftpb.MessageType_MsgApp, 1, 2, uint64(sent+i))
			m.Commit = new(uint64(sent))
			m.Entries = []*raftpb.Entry{{Term: new(uint64(1)), Index: new(uint64(sent + i + 1)), Data: data}}
			msgs[i] = m
		}
		a.Send(msgs[:n])
		sent += n
	}
	for rb.processed.Load() < int64(b.N) {
		<-rb.notify
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	if d := ra.unreachable.Load(); d != 0 {
		b.Fatalf("expected no drops, got %d", d)
	}
}
