package transport

import (
	"context"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// raft.Node provides the reporting half of Raft.
var _ interface {
	ReportUnreachable(uint64)
	ReportSnapshot(uint64, raft.SnapshotStatus)
} = raft.Node(nil)

// nodeRaft adapts a raft.Node to Raft.
type nodeRaft struct{ raft.Node }

func (n nodeRaft) Process(ctx context.Context, m *raftpb.Message) error { return n.Step(ctx, m) }

// TestRaftCluster runs three real raft nodes over the transport and commits
// a proposal on all of them.
func TestRaftCluster(t *testing.T) {
	const members = 3
	var peers []raft.Peer
	for id := uint64(1); id <= members; id++ {
		peers = append(peers, raft.Peer{ID: id})
	}
	var (
		nodes     [members]raft.Node
		trs       [members]*Transport
		committed [members]atomic.Int64
		wg        sync.WaitGroup
	)
	done := make(chan struct{})
	for i := range nodes {
		id := uint64(i + 1)
		storage := raft.NewMemoryStorage()
		nodes[i] = raft.StartNode(&raft.Config{
			ID: id, ElectionTick: 10, HeartbeatTick: 1, Storage: storage,
			MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256,
			Logger: &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)},
		}, peers)
		trs[i] = newTestTransport(t, id, "c", nodeRaft{nodes[i]}, nil, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ticker := time.NewTicker(10 * time.Millisecond)
			defer ticker.Stop()
			for {
				select {
				case <-done:
					return
				case <-ticker.C:
					nodes[i].Tick()
				case rd := <-nodes[i].Ready():
					if !raft.IsEmptyHardState(rd.HardState) {
						storage.SetHardState(rd.HardState)
					}
					storage.Append(rd.Entries)
					trs[i].Send(rd.Messages)
					for _, e := range rd.CommittedEntries {
						if e.GetType() == raftpb.EntryType_EntryConfChange {
							cc := new(raftpb.ConfChange)
							if err := proto.Unmarshal(e.GetData(), cc); err == nil {
								nodes[i].ApplyConfChange(cc)
							}
						}
						if string(e.GetData()) == "hello" {
							committed[i].Add(1)
						}
					}
					nodes[i].Advance()
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		for i := range nodes {
			trs[i].Stop()
			nodes[i].Stop()
		}
	})
	for i, a := range trs {
		for j, b := range trs {
			if i != j {
				a.AddPeer(uint64(j+1), b.Addr().String())
			}
		}
	}
	eventually(t, "a leader", func() bool { return nodes[0].Status().Lead != raft.None })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes[0].Propose(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		eventually(t, "the proposal committed", func() bool { return committed[i].Load() == 1 })
	}
}
