package replica

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
)

// Fresh reads: a member that answers for its group (craftroute's queries)
// must not answer from a state older than a write its group acknowledged
// before the query arrived, wherever that write was made (another member,
// another router). Every member applies committed entries on its own
// schedule, so a follower may lag the member that acknowledged a write by a
// few milliseconds; a query in that window would miss the write (a zone
// created a moment ago answered REFUSED, a name NXDOMAIN).
//
// Fresh closes the window with Raft's ReadIndex: the leader confirms its
// leadership with a quorum and tells its commit index, which covers every
// acknowledged write; the member then waits until it has applied that
// index. One ReadIndex serves every call that arrived before it was sent
// (calls arriving meanwhile share the next one), so under load a call waits
// for at most two rounds to the leader, and the leader sees one request per
// round per member, not one per query.

// freshTicks bounds a Fresh call, in ticks: the ReadIndex round and the
// apply up to the index it returned (a round takes a millisecond or two on
// a healthy group, tens under heavy write load). A member that cannot get
// an answer in that time (no leader, or cut off from it) says so, and the
// router asks another member. After a round that got no answer, calls fail
// at once, each starting a new round when none is in flight, until a round
// is answered: while the leader is gone (an election, a partition) queries
// do not each wait for the bound.
const freshTicks = 3

// readPrefix starts the RequestCtx of a Fresh round; the rest is the round's
// sequence number.
const readPrefix = "craftstore-fresh"

// freshRound is one ReadIndex request and the calls waiting for it.
type freshRound struct {
	seq   uint64
	done  chan struct{} // closed once index or err is set
	index uint64        // the leader's commit index
	err   error
}

// freshReads batches Fresh calls into ReadIndex rounds: at most one round is
// in flight; calls arriving meanwhile join the next, sent when it ends.
type freshReads struct {
	mu       sync.Mutex
	seq      uint64
	inflight *freshRound
	next     *freshRound
	timer    *time.Timer // fails inflight when no answer comes
	// failing is set when a round got no answer, cleared when one does.
	failing error
}

// Fresh waits until the member has applied every entry its group committed
// before the call, or fails with an ErrUnavailable error: the member is not
// ready, knows no leader, or got no answer from it in time. ctx may end the
// wait earlier.
func (r *Replica) Fresh(ctx context.Context) error {
	if !r.ready.Load() {
		return Errorf(ErrUnavailable, "member is not ready")
	}
	index, err := r.readIndex(ctx)
	if err != nil {
		return err
	}
	if r.applied.Load() >= index {
		return nil
	}
	limit := time.Duration(freshTicks) * r.cfg.Tick
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return r.waitApplied(ctx, index, limit)
}

// readIndex returns the leader's commit index, confirmed by a Fresh round
// that started after the call, or fails with an ErrUnavailable error.
func (r *Replica) readIndex(ctx context.Context) (uint64, error) {
	if r.leader.Load() == raft.None {
		return 0, Errorf(ErrUnavailable, "member knows no leader")
	}
	// No timer per call: the round's own timer ends a round that gets no
	// answer, so a call waits at most for the round in flight and its own.
	fr := &r.freshReads
	fr.mu.Lock()
	if err := fr.failing; err != nil {
		// Fail at once; a new round, when none is in flight, finds out
		// whether the leader answers again.
		if fr.inflight == nil {
			if fr.next == nil {
				fr.seq++
				fr.next = &freshRound{seq: fr.seq, done: make(chan struct{})}
			}
			r.sendFresh()
		}
		fr.mu.Unlock()
		return 0, err
	}
	round := fr.next
	if round == nil {
		fr.seq++
		round = &freshRound{seq: fr.seq, done: make(chan struct{})}
		fr.next = round
		if fr.inflight == nil {
			r.sendFresh()
		}
	}
	fr.mu.Unlock()

	select {
	case <-round.done:
	case <-ctx.Done():
		return 0, Errorf(ErrUnavailable, "the query ended before the leader confirmed its commit index")
	case <-r.donec:
		return 0, Errorf(ErrUnavailable, "member is shutting down")
	}
	return round.index, round.err
}

// sendFresh sends the next round's ReadIndex request. fr.mu is held.
func (r *Replica) sendFresh() {
	fr := &r.freshReads
	round := fr.next
	fr.next, fr.inflight = nil, round
	limit := time.Duration(freshTicks) * r.cfg.Tick
	fr.timer = time.AfterFunc(limit, func() {
		r.endFresh(round, 0, Errorf(ErrUnavailable, "the leader did not confirm its commit index within %v", limit))
	})
	rctx := binary.BigEndian.AppendUint64([]byte(readPrefix), round.seq)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		// A request raft drops (no leader, a leader change) gets no
		// answer: the timer ends the round.
		_ = r.node.ReadIndex(ctx, rctx)
	}()
}

// endFresh ends round, when it is the one in flight, with index or err, and
// sends the next round if calls wait for one.
func (r *Replica) endFresh(round *freshRound, index uint64, err error) {
	fr := &r.freshReads
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.inflight != round {
		return // answered already, or timed out
	}
	fr.timer.Stop()
	round.index, round.err = index, err
	fr.failing = err
	close(round.done)
	fr.inflight = nil
	if fr.next != nil {
		r.sendFresh()
	}
}

// freshAnswered takes the leader's answer to a Fresh round (the Ready
// loop's ReadStates).
func (r *Replica) freshAnswered(rs raft.ReadState) {
	c := rs.RequestCtx
	if len(c) != len(readPrefix)+8 || string(c[:len(readPrefix)]) != readPrefix {
		return
	}
	seq := binary.BigEndian.Uint64(c[len(readPrefix):])
	fr := &r.freshReads
	fr.mu.Lock()
	round := fr.inflight
	fr.mu.Unlock()
	if round != nil && round.seq == seq {
		r.endFresh(round, rs.Index, nil)
	}
}

// waitApplied waits until the member applied index.
func (r *Replica) waitApplied(ctx context.Context, index uint64, limit time.Duration) error {
	for {
		ch := *r.appliedSignal.Load()
		if r.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Errorf(ErrUnavailable, "member has not applied index %d within %v (applied %d)", index, limit, r.applied.Load())
		case <-r.donec:
			return Errorf(ErrUnavailable, "member is shutting down")
		}
	}
}

// signalApplied wakes the waitApplied calls after the applied index rose.
func (r *Replica) signalApplied() {
	ch := make(chan struct{})
	close(*r.appliedSignal.Swap(&ch))
}

// Applied returns the highest index whose entry may show in the member's
// views: the commit index, at least as high as every entry being applied
// (the views change before the applied index is stored).
func (r *Replica) Applied() uint64 { return max(r.applied.Load(), r.commit.Load()) }

// CaughtUp waits until the member has applied index, for at most the bound
// of Fresh, or fails with an ErrUnavailable error (it is not ready, or its
// apply lags): the router, which tracks the writes its group acknowledged
// (partition/index.go), then asks another member.
func (r *Replica) CaughtUp(ctx context.Context, index uint64) error {
	if !r.ready.Load() {
		return Errorf(ErrUnavailable, "member is not ready")
	}
	if r.applied.Load() >= index {
		return nil
	}
	limit := time.Duration(freshTicks) * r.cfg.Tick
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return r.waitApplied(ctx, index, limit)
}
