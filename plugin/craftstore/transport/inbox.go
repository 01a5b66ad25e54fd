package transport

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

const (
	// stepTimeout bounds how long one message may wait for the local node
	// to take it. A node that takes longer is stuck (a Ready it cannot
	// persist); the message is dropped, as the network might have.
	stepTimeout = 5 * time.Second
	// proposalTimeout bounds how long a proposal forwarded by a peer may
	// wait, queued or in Step, for a node that has no leader (raft takes
	// proposals only while it knows one). Its proposer has given up by then
	// (a write times out after 5s by default) and never acknowledged it.
	proposalTimeout = 5 * time.Second
)

// inbox hands the messages of one incoming stream to Raft without ever
// blocking the stream's reader: the reader queues, and two goroutines step
// the queued messages into the node. Proposals forwarded by a peer have a
// queue and a goroutine of their own, because raft.Node.Step blocks a
// MsgProp until the node knows a leader; other messages (heartbeats, votes,
// appends and their answers) are what lets it learn one. A full queue drops
// what arrives, like a lossy network: Raft retransmits, and a dropped
// proposal is never acknowledged to its client.
type inbox struct {
	t     *Transport
	from  uint64
	msgs  chan *raftpb.Message
	props chan queuedProp
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu       sync.Mutex
	dropped  int       // messages dropped since the last warning
	warnedAt time.Time // when dropped messages were last logged
}

type queuedProp struct {
	m  *raftpb.Message
	at time.Time
}

func newInbox(t *Transport, from uint64) *inbox {
	in := &inbox{
		t:     t,
		from:  from,
		msgs:  make(chan *raftpb.Message, t.cfg.QueueSize),
		props: make(chan queuedProp, t.cfg.QueueSize),
	}
	in.ctx, in.stop = context.WithCancel(t.ctx)
	in.wg.Add(2)
	go in.stepMessages()
	go in.stepProposals()
	return in
}

// close stops the inbox's goroutines; what is still queued is dropped.
func (in *inbox) close() {
	in.stop()
	in.wg.Wait()
}

// put queues m without blocking.
func (in *inbox) put(m *raftpb.Message) {
	var ok bool
	if m.GetType() == raftpb.MessageType_MsgProp {
		select {
		case in.props <- queuedProp{m: m, at: time.Now()}:
			ok = true
		default:
		}
	} else {
		select {
		case in.msgs <- m:
			ok = true
		default:
		}
	}
	if !ok {
		in.drop(1)
	}
}

// drop counts n dropped messages and logs them at most once a second.
func (in *inbox) drop(n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.dropped += n
	if time.Since(in.warnedAt) < time.Second {
		return
	}
	in.t.log.Warningf("member %x: dropped %d incoming messages: the local Raft node is not taking them", in.from, in.dropped)
	in.dropped = 0
	in.warnedAt = time.Now()
}

func (in *inbox) stepMessages() {
	defer in.wg.Done()
	for {
		select {
		case <-in.ctx.Done():
			return
		case m := <-in.msgs:
			if !in.step(m, time.Now().Add(stepTimeout)) {
				return
			}
		}
	}
}

func (in *inbox) stepProposals() {
	defer in.wg.Done()
	for {
		select {
		case <-in.ctx.Done():
			return
		case p := <-in.props:
			if !in.step(p.m, p.at.Add(proposalTimeout)) {
				return
			}
		}
	}
}

// step hands m to Raft by deadline and reports whether the inbox goes on.
func (in *inbox) step(m *raftpb.Message, deadline time.Time) bool {
	ctx, cancel := context.WithDeadline(in.ctx, deadline)
	err := in.t.cfg.Raft.Process(ctx, m)
	cancel()
	if in.ctx.Err() != nil {
		return false
	}
	if err != nil && ctx.Err() != nil {
		in.drop(1)
	}
	return true
}
