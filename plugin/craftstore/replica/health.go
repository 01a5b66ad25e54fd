package replica

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
)

// A member is ready when it may answer for its group: it knows a leader, it
// has applied at least the commit index the leader told it (Raft
// ReadIndex, asked while it is not ready), and its storage works. It stops
// being ready when one of these stays false for staleTicks ticks (three
// election timeouts): it has had no leader for that long (it is cut off, or
// the group lost its quorum), it has not applied what its group committed
// that long ago (its disk or its apply is stuck), or at once when persisting
// a Ready fails. It becomes ready again only through ReadIndex, so a member
// coming back from a partition does not answer for the group before it
// caught up.
//
// A member that is not ready still answers plain queries from its last
// state (a lone member's stale answers beat none; see the craftstore
// README's `stale` option); it refuses the router's queries, so craftroute
// fails over to a member that is ready.

// staleTicks is how many ticks without a leader, or with an apply that
// lags behind the commit index, make a member not ready.
const staleTicks = 30

// health is the Ready loop's bookkeeping of readiness.
type health struct {
	index     uint64    // commit index known at start, then the leader's (ReadIndex)
	confirmed bool      // the leader confirmed index
	asked     time.Time // when ReadIndex was last asked
	noLeader  time.Time // since when the member has known no leader (zero: it knows one)
	lagIndex  uint64    // a commit index the member had not yet applied...
	lagSince  time.Time // ...seen at this time
	reason    string    // why the member is not ready (logged once)
}

// readyCtx tags the ReadIndex request of askReady.
const readyCtx = "craftstore-ready"

// askReady asks the leader for its commit index (Raft's ReadIndex) while
// the member is not ready, at most once a second: a member that restarts
// after missing entries must not count as ready, and answer for the group
// (craftroute prefers ready members), before it has applied what the group
// committed meanwhile.
func (r *Replica) askReady() {
	h := &r.health
	if r.ready.Load() || h.confirmed || !r.Healthy() || r.leader.Load() == raft.None || time.Since(h.asked) < time.Second {
		return
	}
	h.asked = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Tick)
	defer cancel()
	_ = r.node.ReadIndex(ctx, []byte(readyCtx)) // a lost request is asked again
}

// readIndexAnswered takes the leader's answer to askReady.
func (r *Replica) readIndexAnswered(rs raft.ReadState) {
	if string(rs.RequestCtx) == readyCtx {
		r.health.index = max(r.health.index, rs.Index)
		r.health.confirmed = true
	}
}

// markReady makes the member ready once the leader told its commit index
// (askReady) and the member has applied up to it.
func (r *Replica) markReady() {
	h := &r.health
	if r.ready.Load() || !h.confirmed || !r.Healthy() || r.leader.Load() == raft.None || r.applied.Load() < h.index {
		return
	}
	r.ready.Store(true)
	if h.reason != "" {
		r.log.Infof("member %d is ready again (applied %d, leader %d)", r.cfg.ID, r.applied.Load(), r.leader.Load())
		h.reason = ""
	}
}

// checkHealth runs every tick: it takes readiness away from a member that
// has known no leader, or has lagged behind its commit index, for
// staleTicks ticks.
func (r *Replica) checkHealth(now time.Time) {
	h := &r.health
	stale := time.Duration(staleTicks) * r.cfg.Tick
	if r.leader.Load() == raft.None {
		if h.noLeader.IsZero() {
			h.noLeader = now
		}
	} else {
		h.noLeader = time.Time{}
	}
	if applied := r.applied.Load(); applied >= h.lagIndex {
		h.lagIndex, h.lagSince = r.commit.Load(), now
	}
	r.leaderless.Store(!h.noLeader.IsZero() && now.Sub(h.noLeader) >= stale)
	switch {
	case !r.Healthy():
		r.notReady(fmt.Sprintf("its storage fails: %v", r.StorageError()))
	case !h.noLeader.IsZero() && now.Sub(h.noLeader) >= stale:
		r.notReady(fmt.Sprintf("it has known no leader for %v", now.Sub(h.noLeader).Round(r.cfg.Tick)))
	case now.Sub(h.lagSince) >= stale:
		r.notReady(fmt.Sprintf("it has not applied index %d, committed %v ago (applied %d)",
			h.lagIndex, now.Sub(h.lagSince).Round(r.cfg.Tick), r.applied.Load()))
	}
}

// notReady takes readiness away; the member must ask the leader again.
func (r *Replica) notReady(why string) {
	if !r.ready.Load() && r.health.reason != "" {
		return
	}
	r.ready.Store(false)
	r.health.confirmed = false
	r.health.reason = why
	r.log.Warningf("member %d is not ready: %s; it answers plain queries from its last state", r.cfg.ID, why)
}

// Healthy reports whether the member's storage works: false while the
// Ready loop retries persisting a Ready that failed (a full disk, an I/O
// error).
func (r *Replica) Healthy() bool { return r.storageFailing.Load() == nil }

// StorageError returns the error that keeps the member's storage failing,
// or nil.
func (r *Replica) StorageError() error {
	if p := r.storageFailing.Load(); p != nil {
		return *p
	}
	return nil
}
