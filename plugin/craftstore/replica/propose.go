package replica

import (
	"context"
	"errors"
	"time"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrNoQuorum is returned when a proposal is not committed and applied in
// time: there is no leader, or no majority acknowledged it. The write may
// still commit later; it was not acknowledged.
var ErrNoQuorum = &Error{Kind: ErrUnavailable,
	Msg: "not committed in time: no leader or no quorum (the change may still be applied later)"}

// propose submits c and waits until it is committed and applied here.
func (r *Replica) propose(ctx context.Context, c *fsm.Command) (Result, error) {
	c.ID = r.nextID.Add(1)
	if e, ok := ctx.Value(epochKey{}).(uint64); ok && c.Epoch == 0 {
		c.Epoch = e
	}
	if c.Epoch == 0 && (c.Op == fsm.OpChange || c.Op == fsm.OpUpdate) {
		// A client's write to this member, no router's (fsm/unrouted.go).
		if err := r.db.View(func(tx *bolt.Tx) error {
			var err error
			c.Epoch, err = fsm.CheckUnrouted(fsm.Generation(tx), c)
			return err
		}); err != nil {
			return Result{}, err
		}
	}
	data, err := c.Marshal()
	if err != nil {
		return Result{}, Errorf(ErrInvalid, "%v", err)
	}
	return r.proposeWait(ctx, c.ID, func(ctx context.Context) error { return r.node.Propose(ctx, data) })
}

// proposeWait registers a waiter for id, submits with retries while raft
// drops proposals (no leader known yet), and waits for the apply.
func (r *Replica) proposeWait(ctx context.Context, id uint64, submit func(context.Context) error) (res Result, err error) {
	if o := r.cfg.Observer; o != nil {
		defer func() { o.Proposed(err) }()
	}
	if r.removed.Load() {
		return Result{}, Errorf(ErrNotReady, "member was removed from the group")
	}
	if err := r.StorageError(); err != nil {
		return Result{}, Errorf(ErrNotReady, "member's storage fails (%v): write to another member", err)
	}
	if r.leaderless.Load() {
		// Cut off from its group (or the group has no majority): rather
		// than after the write timeout, say so now, so that a client (or
		// craftroute's API) tries another member.
		return Result{}, Errorf(ErrNotReady, "member has known no leader for %v or more: write to another member",
			time.Duration(staleTicks)*r.cfg.Tick)
	}
	ch := make(chan applied, 1)
	r.mu.Lock()
	if r.draining {
		r.refusedAt = time.Now()
		r.mu.Unlock()
		return Result{}, errStopping
	}
	r.waiters[id] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
	}()

	for {
		err := submit(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, raft.ErrProposalDropped) {
			return Result{}, ErrNoQuorum
		}
		select {
		case <-time.After(proposalRetry):
		case <-ctx.Done():
			return Result{}, ErrNoQuorum
		case <-r.donec:
			return Result{}, errStopping // raft dropped it: nothing was proposed
		}
	}
	select {
	case a := <-ch:
		return a.res, a.err
	case <-ctx.Done():
		if a, ok := r.giveUp(ctx, id, ch); ok {
			return a.res, a.err // applied just as ctx ended
		}
		return Result{}, ErrNoQuorum
	}
}

// errStopping refuses a write that a stopping member did not propose.
var errStopping = Errorf(ErrNotReady, "member is shutting down: nothing was written; write to another member")

// Drain makes the member refuse new writes (ErrNotReady: nothing is
// proposed, so a client or router takes them to another member) and waits
// up to timeout until the writes in flight on it were applied or gave up.
// It returns how many were still waiting. A member that stops calls it
// after handing off its leadership (HandOff) and before Close, which fails
// the writes still waiting without knowing their outcome.
func (r *Replica) Drain(timeout time.Duration) int {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		n := len(r.waiters)
		r.mu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-tick.C:
		case <-deadline:
			return n
		case <-r.donec:
			return n
		}
	}
}

// Quiet waits, after Drain, until no write was refused for quiet (and at
// least quiet) and told reports that the member's clients know it is
// stopping, or max passed: the lame-duck time of a stopping member.
// Its DNS server closes only after the member is closed, and an UPDATE
// whose connection it accepted but had not read then is cut off without
// an answer, which its sender must take as an unknown outcome. Refusing
// writes (Not Ready) for a while first tells craftroute to send them to
// another member.
func (r *Replica) Quiet(quiet, max time.Duration, told func() bool) {
	start := time.Now()
	for {
		r.mu.Lock()
		last := r.refusedAt
		r.mu.Unlock()
		now := time.Now()
		if now.Sub(start) >= max || now.Sub(start) >= quiet && now.Sub(last) >= quiet && told() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lateKey is the context key of a function to run if a proposal whose
// caller gave up (ErrNoQuorum) is applied later after all (WithLate).
type lateKey struct{}

// WithLate returns ctx carrying fn: when a proposal made with it is not
// applied before ctx ends (the caller gets ErrNoQuorum: the outcome is
// unknown) but is applied later on this member, fn runs then, in a
// goroutine of its own, once the change is in the member's views. The
// member forgets it after lateFor.
func WithLate(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, lateKey{}, fn)
}

// lateFor is how long a proposal whose caller gave up is watched for.
const lateFor = time.Minute

// late is a proposal whose caller gave up.
type late struct {
	fn    func()
	until time.Time
}

// giveUp ends the wait for proposal id: it removes the waiter and, unless
// the result arrived meanwhile (then returned with ok), records ctx's late
// function, all under r.mu, so that notify finds one or the other.
func (r *Replica) giveUp(ctx context.Context, id uint64, ch chan applied) (applied, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiters, id)
	select {
	case a := <-ch:
		return a, true
	default:
	}
	fn, ok := ctx.Value(lateKey{}).(func())
	if !ok {
		return applied{}, false
	}
	now := time.Now()
	for k, l := range r.late {
		if now.After(l.until) {
			delete(r.late, k)
		}
	}
	r.late[id] = late{fn, now.Add(lateFor)}
	return applied{}, false
}

// Change applies one atomic change to zone: deletions, then additions. It
// returns the zone's new SOA serial.
func (r *Replica) Change(ctx context.Context, zone string, add []dns.RR, del []Deletion) (uint32, error) {
	res, err := r.proposeUnlocked(ctx, &fsm.Command{Op: fsm.OpChange, Zone: zone, Add: add, Del: del})
	return res.Serial, err
}

// proposeUnlocked proposes write c, again each time a transaction finishes
// while a name c touches is locked by one (ErrBusy), until ctx ends: writes
// that conflict with a transaction run after it.
func (r *Replica) proposeUnlocked(ctx context.Context, c *fsm.Command) (Result, error) {
	for {
		changed := r.locks.wait()
		res, err := r.propose(ctx, c)
		if !errors.Is(err, ErrBusy) {
			return res, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return res, err
		}
	}
}

// DeleteZone removes a zone from every member.
func (r *Replica) DeleteZone(ctx context.Context, zone string) error {
	_, err := r.propose(ctx, &fsm.Command{Op: fsm.OpDeleteZone, Zone: zone})
	return err
}

// importChunk is how many records go in one import entry; entries stay well
// under the transport's frame limit and raft's MaxSizePerMsg batching.
const importChunk = 4096

// PutZone creates or replaces zone with rrs, a zone in hand, checked as
// an Import checks them (the API, AXFR in and seeds feed an Import as they
// read). With absent set, an existing zone is left alone and
// Result.Skipped is set.
func (r *Replica) PutZone(ctx context.Context, zone string, rrs []dns.RR, absent bool) (Result, error) {
	im := r.NewImport(zone, absent, 0)
	defer im.Abort()
	for _, rr := range rrs {
		if err := im.Add(ctx, rr); err != nil {
			return Result{}, err
		}
	}
	return im.Commit(ctx)
}

// AdvertiseSelf records this member's DNS and API addresses in the members
// table when they differ from what it holds.
func (r *Replica) AdvertiseSelf(ctx context.Context, dnsAddr, apiAddr string) error {
	st, err := r.Status()
	if err != nil {
		return err
	}
	for _, m := range st.Members {
		if m.ID == r.cfg.ID {
			if m.DNS == dnsAddr && m.API == apiAddr {
				return nil
			}
			m.DNS, m.API = dnsAddr, apiAddr
			_, err := r.propose(ctx, &fsm.Command{Op: fsm.OpMemberInfo, Member: m})
			return err
		}
	}
	return nil
}

// AddMember adds m to the group, as a voter or, with m.Learner, as a
// learner: a member that receives the log but neither votes nor counts for
// a majority, so that adding it costs the group no availability while it
// catches up. A learner given again without Learner is promoted to voter,
// a voter given with Learner is demoted (it leaves the majority but keeps
// its id, its data and the log: promoted again, it catches up from where
// it was). A member added anew then starts with join and catches up. The
// same member in the same role is a conflict (ErrConflict), as is demoting
// the last voter.
func (r *Replica) AddMember(ctx context.Context, m Member) error {
	t := pb.ConfChangeAddNode
	if m.Learner {
		t = pb.ConfChangeAddLearnerNode
	}
	return r.confChange(ctx, t, m)
}

// RemoveMember removes a member from the group; its id is never used
// again. Removing the last voter is a conflict (ErrConflict).
func (r *Replica) RemoveMember(ctx context.Context, id uint64) error {
	return r.confChange(ctx, pb.ConfChangeRemoveNode, Member{ID: id})
}

func (r *Replica) confChange(ctx context.Context, t pb.ConfChangeType, m Member) error {
	st, err := r.Status()
	if err != nil {
		return err
	}
	var have *Member
	voters := 0
	for i, x := range st.Members {
		if x.ID == m.ID {
			have = &st.Members[i]
		}
		if !x.Learner {
			voters++
		}
	}
	switch {
	case t != pb.ConfChangeRemoveNode && have != nil && have.Learner == m.Learner:
		role := "a voter"
		if have.Learner {
			role = "a learner"
		}
		return Errorf(ErrConflict, "member %d already exists, as %s", m.ID, role)
	case t == pb.ConfChangeRemoveNode && have == nil:
		return Errorf(ErrNotFound, "member %d not found", m.ID)
	case t != pb.ConfChangeAddNode && have != nil && !have.Learner && voters == 1:
		return Errorf(ErrConflict, "member %d is the group's last voter", m.ID)
	case have == nil && t != pb.ConfChangeRemoveNode && m.Raft == "":
		return Errorf(ErrInvalid, "member %d is new: its raft address is needed", m.ID)
	case have == nil && r.isRemoved(m.ID):
		return Errorf(ErrConflict, "member %d was removed from the group: ids are never used again", m.ID)
	}
	if have != nil && t != pb.ConfChangeRemoveNode {
		// A promotion or demotion: the member keeps its addresses.
		learner := m.Learner
		if m.Raft == "" {
			m = *have
		}
		m.Learner = learner
	}
	ctxData, err := marshalMember(m)
	if err != nil {
		return err
	}
	id := r.nextID.Add(1)
	cc := &pb.ConfChange{Type: t.Enum(), NodeId: proto.Uint64(m.ID), Context: ctxData, Id: proto.Uint64(id)}
	_, err = r.proposeWait(ctx, id, func(ctx context.Context) error { return r.node.ProposeConfChange(ctx, cc) })
	return err
}

// epochKey is the context key of the shard map epoch a router routed a
// write by (WithEpoch).
type epochKey struct{}

// WithEpoch returns ctx carrying epoch, the shard map epoch of the router
// that sent the write proposed under it: the write is refused with
// ErrStaleMap, when it is applied, if names are placed differently since
// (fsm.Command's Epoch). 0 leaves ctx as it is.
func WithEpoch(ctx context.Context, epoch uint64) context.Context {
	if epoch == 0 {
		return ctx
	}
	return context.WithValue(ctx, epochKey{}, epoch)
}
