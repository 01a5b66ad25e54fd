package replica

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrLoneVoter is HandOff's error in a group whose only voter is this
// member: there is no one to hand to, and no election to wait for.
var ErrLoneVoter = errors.New("the member is the group's only voter")

// HandOff passes leadership to another voter before this member stops, so
// that the group does not wait an election timeout for a new leader (etcd's
// server does the same on shutdown). It does nothing unless this member
// leads a group with another voter that is in touch. It picks the voter
// whose log is furthest along (raft then sends it MsgTimeoutNow at once) and
// waits until another member leads or timeout passes; it returns the new
// leader's id, or an error when leadership did not move (the member then
// stops as before and the group elects a leader on its own).
//
// While raft transfers leadership it drops proposals: local ones are
// retried by proposeWait, and proposals forwarded by followers are retried
// by the transport's inbox (raftAdapter.Process), so no write is lost or
// left waiting for its timeout.
//
// A group of one voter has no one to hand to: ErrLoneVoter.
func (r *Replica) HandOff(timeout time.Duration) (uint64, error) {
	select {
	case <-r.donec:
		return 0, errors.New("member is stopped")
	default:
	}
	st := r.node.Status()
	if st.RaftState != raft.StateLeader {
		return 0, errors.New("member is not the leader")
	}
	if ids := st.Config.Voters.IDs(); len(ids) == 1 {
		return 0, ErrLoneVoter
	}
	to := transferee(st)
	if to == 0 {
		return 0, errors.New("no other voter is in touch")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r.log.Infof("member %d hands leadership of term %d to member %d", r.cfg.ID, st.GetTerm(), to)
	r.node.TransferLeadership(ctx, r.cfg.ID, to)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		if lead := r.leader.Load(); lead != 0 && lead != r.cfg.ID {
			return lead, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, errors.New("leadership did not move in time")
		case <-r.donec:
			return 0, errors.New("member stopped")
		}
		if n%10 == 0 {
			// raft gives a transfer up after an election timeout (the
			// transferee did not catch up and campaign in time, on a busy
			// machine): while this member still leads, ask again.
			if st := r.node.Status(); st.RaftState == raft.StateLeader && st.LeadTransferee == 0 {
				if to := transferee(st); to != 0 {
					r.node.TransferLeadership(ctx, r.cfg.ID, to)
				}
			}
		}
	}
}

// transferee is the voter other than the leader that has the longest log
// and was recently active, or 0. Ties go to the lowest id, so the choice is
// the same whoever asks.
func transferee(st raft.Status) uint64 {
	var best uint64
	var bestMatch uint64
	for id, pr := range st.Progress {
		// Progress tracks voters and learners only.
		if id == st.ID || pr.IsLearner || !pr.RecentActive {
			continue
		}
		if best == 0 || pr.Match > bestMatch || pr.Match == bestMatch && id < best {
			best, bestMatch = id, pr.Match
		}
	}
	return best
}

// proposalRetry is how often a dropped proposal is offered to raft again.
const proposalRetry = 5 * time.Millisecond

// stepProposal hands a proposal forwarded by a follower (MsgProp) to raft
// and, unlike Node.Step, learns whether raft dropped it: during a leadership
// transfer, or while this member knows no leader, raft drops proposals, and
// the follower's client would wait for its timeout. A dropped proposal was
// not appended anywhere, so offering it again cannot apply it twice; it is
// retried until ctx ends (the transport's bound for a forwarded message),
// and in the order its entries came.
func (r *Replica) stepProposal(ctx context.Context, m *pb.Message) error {
	for _, e := range m.GetEntries() {
		for {
			err := r.proposeEntry(ctx, e)
			if !errors.Is(err, raft.ErrProposalDropped) {
				if err != nil {
					return err
				}
				break
			}
			select {
			case <-time.After(proposalRetry):
			case <-ctx.Done():
				return ctx.Err()
			case <-r.donec:
				return err
			}
		}
	}
	return nil
}

// proposeEntry proposes one entry of a forwarded MsgProp as raft's Node
// would have made it: a normal entry from its data, a configuration change
// from the change it holds.
func (r *Replica) proposeEntry(ctx context.Context, e *pb.Entry) error {
	switch e.GetType() {
	case pb.EntryType_EntryConfChange:
		cc := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return err
		}
		return r.node.ProposeConfChange(ctx, cc)
	case pb.EntryType_EntryConfChangeV2:
		cc := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return err
		}
		return r.node.ProposeConfChange(ctx, cc)
	default:
		return r.node.Propose(ctx, e.GetData())
	}
}
