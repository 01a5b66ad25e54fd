package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// run is the Ready loop: persist, send, apply, advance.
func (r *Replica) run() {
	defer close(r.donec)
	defer r.tr.Stop()
	defer r.node.Stop()
	ticker := time.NewTicker(r.cfg.Tick)
	defer ticker.Stop()
	for {
		select {
		case now := <-ticker.C:
			r.tick(now)
		case rd := <-r.node.Ready():
			if !r.handleReady(rd, ticker.C) {
				return
			}
		case <-r.removedc:
			r.log.Warningf("member %d was removed from the group; Raft stopped", r.cfg.ID)
			r.failWaiters(Errorf(ErrUnavailable, "member was removed from the group"))
			<-r.stopc
			return
		case <-r.stopc:
			r.failWaiters(Errorf(ErrUnavailable, "member is shutting down"))
			return
		}
	}
}

// tick advances Raft's clock and the member's health bookkeeping.
func (r *Replica) tick(now time.Time) {
	r.node.Tick()
	r.checkHealth(now)
	r.askReady()
}

// pending is what a Ready's transaction leaves to do once it committed.
type pending struct {
	effects   []*fsm.Effect
	results   map[uint64]applied
	snapshot  bool
	lastIndex uint64 // applied index after the transaction
	// raftApplied is the last entry handed to raft, or the installed
	// snapshot's index when there were none (Replica.raftApplied).
	raftApplied uint64
}

// handleReady persists rd, sends its messages, applies its committed
// entries and advances the node. Storage failures are retried until they
// clear (retry); it returns false only when the member stops meanwhile.
func (r *Replica) handleReady(rd raft.Ready, tick <-chan time.Time) bool {
	if rd.SoftState != nil {
		if lead := rd.SoftState.Lead; r.leader.Swap(lead) != lead && lead != raft.None {
			// One line per leader, instead of raft's election chatter.
			term := r.term.Load()
			if rd.HardState != nil {
				term = rd.HardState.GetTerm()
			}
			r.log.Infof("member %d: member %d is the leader of term %d", r.cfg.ID, lead, term)
		}
	}
	for _, rs := range rd.ReadStates {
		r.readIndexAnswered(rs)
		r.freshAnswered(rs)
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		r.term.Store(rd.HardState.GetTerm())
		r.commit.Store(rd.HardState.GetCommit())
	}
	if len(rd.Entries) == 0 && len(rd.CommittedEntries) == 0 && raft.IsEmptySnap(rd.Snapshot) &&
		(rd.HardState == nil || raft.IsEmptyHardState(rd.HardState)) {
		// Nothing to persist or apply (heartbeats, votes in flight): no
		// transaction, no fsync.
		r.tr.Send(r.mergeSnapshots(rd.Messages, r.applied.Load()))
		r.markReady()
		r.node.Advance()
		return true
	}
	start := time.Now()
	r.notePending(rd)
	if f := r.beforePersist.Load(); f != nil {
		(*f)(rd)
	}
	msgs := rd.Messages
	if r.sendsEarly(rd) {
		// A leader replicates while it persists (Raft thesis §10.2.1, as
		// etcd's leader does), so that its fsync and its followers' run
		// side by side. Raft counts the leader's own copy of an entry
		// towards the commit quorum only at Advance, after persist, and
		// its term and vote are on disk already.
		var early []*pb.Message
		early, msgs = splitEarly(msgs)
		r.tr.Send(early)
	}
	var p pending
	r.dropSnap() // the write may remap the file (paged.go)
	if !r.retry("persist a Raft Ready", tick, func() (err error) {
		p, err = r.persist(rd)
		return err
	}) {
		return false
	}
	if p.snapshot || p.raftApplied > r.raftApplied.Load() {
		r.raftApplied.Store(p.raftApplied)
	}
	if hs := rd.HardState; hs != nil && !raft.IsEmptyHardState(hs) {
		r.voted.term, r.voted.vote = hs.GetTerm(), hs.GetVote()
	}

	r.tr.Send(r.mergeSnapshots(msgs, p.lastIndex))

	if p.snapshot && !r.retry("load an installed snapshot", tick, r.afterSnapshot) {
		return false
	}
	for _, e := range coalesce(p.effects) {
		if !r.retry("apply a change to the zone views", tick, func() error { return r.applyEffect(e) }) {
			return false
		}
	}
	r.renewSnap() // before the applied index moves
	if p.lastIndex > r.applied.Load() {
		r.applied.Store(p.lastIndex)
		r.signalApplied()
	}
	r.appliedPending()
	r.announce(&p)
	r.notify(p.results)
	if o := r.cfg.Observer; o != nil && len(rd.CommittedEntries) > 0 {
		o.Applied(len(rd.CommittedEntries), time.Since(start))
	}
	r.markReady()
	r.node.Advance()
	return true
}

// sendsEarly reports whether rd's messages may go out before rd is
// persisted: the member leads and rd changes neither its term nor its
// vote. A follower's messages acknowledge what rd persists, and a
// candidate's ask for votes in a term that must be on disk first.
func (r *Replica) sendsEarly(rd raft.Ready) bool {
	if r.leader.Load() != r.cfg.ID || len(rd.Messages) == 0 {
		return false
	}
	hs := rd.HardState
	return hs == nil || raft.IsEmptyHardState(hs) ||
		hs.GetTerm() == r.voted.term && hs.GetVote() == r.voted.vote
}

// splitEarly parts a leader's msgs into those it may send before it
// persists their Ready and those that wait, keeping the order within each.
// Snapshots wait for the index this Ready applies; responses that vote or
// acknowledge an append wait for the disk, as raft itself holds them back
// (msgsAfterAppend) when storage writes are asynchronous.
func splitEarly(msgs []*pb.Message) (early, after []*pb.Message) {
	for _, m := range msgs {
		switch m.GetType() {
		case pb.MsgSnap, pb.MsgAppResp, pb.MsgVoteResp, pb.MsgPreVoteResp:
			after = append(after, m)
		default:
			early = append(early, m)
		}
	}
	return early, after
}

// persist writes rd's snapshot, entries and HardState and applies its
// committed entries, all in one bbolt transaction (one fsync). When it
// fails nothing changed, on disk or in memory, and it can run again.
func (r *Replica) persist(rd raft.Ready) (pending, error) {
	p := pending{results: map[uint64]applied{}}
	err := r.db.Update(func(tx *bolt.Tx) error {
		if !raft.IsEmptySnap(rd.Snapshot) {
			if err := r.installSnapshot(tx, rd.Snapshot); err != nil {
				return err
			}
			p.snapshot = true
			p.raftApplied = rd.Snapshot.GetMetadata().GetIndex()
		}
		if err := r.store.Append(tx, rd.Entries); err != nil {
			return err
		}
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			if err := r.store.SetHardState(tx, rd.HardState); err != nil {
				return err
			}
		}
		g := fsm.Generation(tx)
		done, _ := fsm.Applied(g)
		var lastIndex, lastTerm uint64
		for _, e := range rd.CommittedEntries {
			if err := r.applyEntry(tx, g, e, done, &p); err != nil {
				return fmt.Errorf("applying entry %d: %w", e.GetIndex(), err)
			}
			lastIndex, lastTerm = e.GetIndex(), e.GetTerm()
			p.raftApplied = lastIndex
		}
		if lastIndex > done {
			if err := fsm.PutApplied(g, lastIndex, lastTerm); err != nil {
				return err
			}
		} else {
			lastIndex = done
		}
		p.lastIndex = lastIndex
		if p.snapshot {
			return nil // the installed snapshot is the newest; the log is empty
		}
		return r.maybeSnapshot(tx, lastIndex)
	})
	return p, err
}

// retry runs f until it succeeds, with a backoff of up to two seconds,
// ticking the node meanwhile. A failure is a storage failure (a full disk,
// an I/O error): the member is not ready and not healthy and answers no
// proposals until f succeeds; its followers elect another leader, as it
// sends nothing more (a leader may have sent the failing Ready's appends:
// sendsEarly). retry returns false when the member stops meanwhile.
func (r *Replica) retry(what string, tick <-chan time.Time, f func() error) bool {
	backoff := r.cfg.Tick
	for {
		err := f()
		if err == nil {
			if prev := r.storageFailing.Swap(nil); prev != nil {
				r.log.Infof("member %d: storage works again (could not %s: %v)", r.cfg.ID, what, *prev)
			}
			return true
		}
		if prev := r.storageFailing.Swap(&err); prev == nil || (*prev).Error() != err.Error() {
			r.log.Errorf("member %d cannot %s: %v; retrying until it works", r.cfg.ID, what, err)
		}
		r.notReady(fmt.Sprintf("its storage fails: %v", err))
		if o := r.cfg.Observer; o != nil {
			o.StorageFailed()
		}
		timer := time.NewTimer(backoff)
	wait:
		for {
			select {
			case now := <-tick:
				r.tick(now)
			case <-timer.C:
				break wait
			case <-r.stopc:
				timer.Stop()
				r.failWaiters(Errorf(ErrUnavailable, "member is shutting down"))
				return false
			}
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// mergeSnapshots rewrites outgoing snapshot messages to describe the state
// the stream will carry (as etcd's createMergedSnapshotMessage does): the
// applied index, its term and the ConfState as of now, instead of raft's
// last stored snapshot, which may predate the recipient's own addition to
// the group. The streamed data may be newer still; see snapshot.go.
func (r *Replica) mergeSnapshots(msgs []*pb.Message, applied uint64) []*pb.Message {
	for i, m := range msgs {
		if m.GetType() != pb.MsgSnap {
			continue
		}
		term, err := r.store.Term(applied)
		if err != nil {
			// The applied entry is always in the log or the snapshot's term.
			r.log.Warningf("snapshot for %d: term of %d: %v", m.GetTo(), applied, err)
			continue
		}
		cp := proto.Clone(m).(*pb.Message)
		cp.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			Index:     proto.Uint64(applied),
			Term:      proto.Uint64(term),
			ConfState: proto.Clone(r.confState).(*pb.ConfState),
		}}
		msgs[i] = cp
	}
	return msgs
}

// applyEntry applies one committed entry inside the Ready's transaction.
// Entries at or below the data's applied index (possible after a snapshot
// whose data was newer than its metadata) change no data; conf changes are
// always handed to raft, which reset its configuration to the snapshot's.
func (r *Replica) applyEntry(tx *bolt.Tx, g *bolt.Bucket, e *pb.Entry, done uint64, p *pending) error {
	skip := e.GetIndex() <= done
	switch e.GetType() {
	case pb.EntryNormal:
		if skip || len(e.GetData()) == 0 {
			return nil
		}
		c, err := fsm.Unmarshal(e.GetData())
		if err != nil {
			return err
		}
		res, eff, err := fsm.Apply(g, c, r.cfg.Journal)
		if rerr, ok := err.(*Error); ok {
			p.results[c.ID] = applied{err: rerr}
			return nil
		}
		if err != nil {
			return err
		}
		if eff != nil {
			// A map part's moves first: its own effect unlocks their names.
			p.effects = append(append(p.effects, eff.More...), eff)
		}
		p.results[c.ID] = applied{res: res}
	case pb.EntryConfChange:
		cc := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return err
		}
		r.confState = r.node.ApplyConfChange(cc)
		if err := r.store.SetConfState(tx, r.confState); err != nil {
			return err
		}
		logf := r.log.Infof
		if !r.cfg.Join && e.GetIndex() <= uint64(len(r.cfg.Peers)) {
			logf = r.log.Debugf // the group's first members, as it starts
		}
		logf("member %d: %s member %d (index %d); voters %v, learners %v", r.cfg.ID, confChangeText(cc.GetType()), cc.GetNodeId(), e.GetIndex(),
			r.confState.GetVoters(), r.confState.GetLearners())
		if t := cc.GetType(); t == pb.ConfChangeAddNode || t == pb.ConfChangeAddLearnerNode || t == pb.ConfChangeRemoveNode {
			eff, err := fsm.ApplyConfChange(g, fsm.ConfChange{ID: cc.GetNodeId(), Remove: t == pb.ConfChangeRemoveNode,
				Learner: t == pb.ConfChangeAddLearnerNode, Context: cc.GetContext()}, skip)
			if err != nil {
				return err
			}
			p.effects = append(p.effects, eff)
		}
		p.results[cc.GetId()] = applied{}
	}
	return nil
}

// maybeSnapshot records a local snapshot at the applied index every
// SnapshotEntries entries and compacts the log behind it.
func (r *Replica) maybeSnapshot(tx *bolt.Tx, index uint64) error {
	if index < r.snapIndex+r.cfg.SnapshotEntries {
		return nil
	}
	if _, err := r.store.CreateSnapshot(tx, index, r.confState); err != nil {
		return err
	}
	tx.OnCommit(func() { r.snapIndex = index })
	if index > r.cfg.CatchupEntries {
		first, err := r.store.FirstIndex()
		if err != nil {
			return err
		}
		if compact := index - r.cfg.CatchupEntries; compact >= first {
			if err := r.store.Compact(tx, compact); err != nil && !errors.Is(err, raft.ErrCompacted) {
				return err
			}
		}
	}
	return nil
}

// coalesce merges each run of consecutive record changes to one zone into
// one change, so that a Ready's commits reach a zone's view as one write:
// one new version, whose trie paths shared by several commits are copied
// once, not once per commit. Readers then see the state after the run's
// last commit, a committed state, as before. A change's names hold each
// name's whole RRset after it, so that later names replace earlier ones and
// the merged list, applied in order, gives the same view. Other effects
// (transactions, reloads, deletions, members) end a run and stay as they
// are. Effects are not modified; merged ones are new.
func coalesce(effects []*fsm.Effect) []*fsm.Effect {
	if len(effects) < 2 {
		return effects
	}
	out := make([]*fsm.Effect, 0, len(effects))
	copied := false // out's last effect is a merged copy
	for _, e := range effects {
		last := len(out) - 1
		if last < 0 || !plainChange(e) || !plainChange(out[last]) || out[last].Zone != e.Zone {
			out = append(out, e)
			copied = false
			continue
		}
		if !copied {
			cp := *out[last]
			cp.Names = append([]zone.NameRecords(nil), cp.Names...)
			out[last] = &cp
			copied = true
		}
		m := out[last]
		m.Names = append(m.Names, e.Names...)
		if e.HasBase {
			m.Base, m.HasBase = e.Base, true
		}
	}
	return out
}

// plainChange reports whether e only changes records of a zone (OpChange).
func plainChange(e *fsm.Effect) bool {
	return e.Zone != "" && e.Tx == nil && e.Member == nil && e.Removed == 0 &&
		!e.Deleted && !e.Reload && !e.Seeded && !e.Keys
}

// applyEffect brings the views and the transport in line with an applied entry.
func (r *Replica) applyEffect(e *fsm.Effect) error {
	if err := r.applyView(e); err != nil {
		return err
	}
	if e.Seeded {
		r.noteSeeded(e.Zone) // once the view serves the zone
	}
	return nil
}

// applyView brings the views and the transport up to date with e.
func (r *Replica) applyView(e *fsm.Effect) error {
	if e.Tx != nil {
		// After the data of a commit is in the view (below): a reader
		// waiting for the lock then sees it.
		defer r.locks.apply(e.Tx)
	}
	switch {
	case e.Map != nil:
		r.shardMap.Store(e.Map)
	case e.Member != nil:
		if e.Member.ID != r.cfg.ID && e.Member.Raft != "" {
			r.tr.AddPeer(e.Member.ID, e.Member.Raft)
		}
	case e.Removed != 0:
		r.markRemoved(e.Removed)
		if e.Removed == r.cfg.ID {
			r.setRemoved()
		} else {
			r.tr.RemovePeer(e.Removed)
		}
	case e.Keys:
		r.keysVersion.Add(1)
	case e.Deleted:
		r.swapZone(e.Zone, nil)
		r.keysVersion.Add(1) // its keys went with it
	case e.Reload:
		return r.reloadZone(e.Zone)
	case e.Seeded: // a seed found the zone present: nothing to change
	default:
		if z := r.Zone(e.Zone); z != nil {
			z.Set(e.Names)
			if e.HasBase {
				z.SetSerialBase(e.Base)
			}
		}
	}
	return nil
}

func (r *Replica) notify(results map[uint64]applied) {
	if len(results) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, res := range results {
		if ch, ok := r.waiters[id]; ok {
			ch <- res
			delete(r.waiters, id)
		} else if l, ok := r.late[id]; ok {
			delete(r.late, id)
			if res.err == nil {
				go l.fn()
			}
		}
	}
}

func (r *Replica) failWaiters(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, ch := range r.waiters {
		ch <- applied{err: err}
		delete(r.waiters, id)
	}
}

// raftAdapter is the node as the transport sees it.
type raftAdapter Replica

func (a *raftAdapter) Process(ctx context.Context, m *pb.Message) error {
	if m.GetType() == pb.MessageType_MsgProp {
		return (*Replica)(a).stepProposal(ctx, m)
	}
	return a.node.Step(ctx, m)
}
func (a *raftAdapter) ReportUnreachable(id uint64) { a.node.ReportUnreachable(id) }
func (a *raftAdapter) ReportSnapshot(id uint64, s raft.SnapshotStatus) {
	if s == raft.SnapshotFinish {
		a.log.Infof("member %d: snapshot sent to member %d", a.cfg.ID, id)
	} else {
		a.log.Warningf("member %d: sending a snapshot to member %d failed; it is sent again", a.cfg.ID, id)
	}
	a.node.ReportSnapshot(id, s)
}

// confChangeText says what a configuration change does.
func confChangeText(t pb.ConfChangeType) string {
	switch t {
	case pb.ConfChangeAddNode:
		return "added voter"
	case pb.ConfChangeAddLearnerNode:
		return "added learner"
	case pb.ConfChangeRemoveNode:
		return "removed"
	case pb.ConfChangeUpdateNode:
		return "updated"
	}
	return t.String()
}

// setRemoved records that this member was removed from the group; the Ready
// loop then stops Raft. Peers refusing it say so too (transport.OnRemoved):
// a removed member may never see its removal committed, since the leader
// stops replicating to it once it applied the change.
func (r *Replica) setRemoved() {
	if r.removed.CompareAndSwap(false, true) {
		close(r.removedc)
	}
}

// markRemoved adds id to the ids the transport refuses.
func (r *Replica) markRemoved(id uint64) {
	old := *r.removedIDs.Load()
	next := make(map[uint64]bool, len(old)+1)
	for k := range old {
		next[k] = true
	}
	next[id] = true
	r.removedIDs.Store(&next)
}

func (r *Replica) isRemoved(id uint64) bool { return (*r.removedIDs.Load())[id] }
