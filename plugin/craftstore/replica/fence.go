package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// fenceRetry is how often Fence tries again while another transfer's fence
// holds the zone.
const fenceRetry = 20 * time.Millisecond

// Fence sets fence id on zone: until Unfence (or FenceTTL), no transaction
// prepares in the zone on this shard. While another transfer's fence holds
// the zone it waits, until ctx ends (then ErrBusy).
func (r *Replica) Fence(ctx context.Context, zone string, id txn.ID) error {
	for {
		_, err := r.propose(ctx, &fsm.Command{Op: fsm.OpTxFence, Zone: zone, Tx: id, Time: txTime()})
		if !errors.Is(err, ErrBusy) {
			return err
		}
		select {
		case <-time.After(fenceRetry): // the other transfer's fence goes
		case <-ctx.Done():
			return err
		}
	}
}

// Unfence removes fence id of zone and reports whether it still held (see
// applyTxUnfence). Removing a fence that is gone is harmless. cut, when not
// nil, is recorded as the cut of zone serial (the router's, JSON) if the
// fence still held.
func (r *Replica) Unfence(ctx context.Context, zone string, id txn.ID, serial uint32, cut []byte) (bool, error) {
	var meta []byte
	if cut != nil {
		meta = append(binary.BigEndian.AppendUint32(nil, serial), cut...)
	}
	res, err := r.propose(ctx, &fsm.Command{Op: fsm.OpTxUnfence, Zone: zone, Tx: id, Time: txTime(), Meta: meta})
	return res.Held, err
}

// staleForTransfer is fsm.StaleTransfer for the router's epoch ctx
// carries (WithEpoch), nil without one.
func staleForTransfer(ctx context.Context, g *bolt.Bucket) error {
	epoch, ok := ctx.Value(epochKey{}).(uint64)
	if !ok {
		return nil
	}
	return fsm.StaleTransfer(g, epoch)
}

// errPrepared says that a prepared part holds a name of the zone.
var errPrepared = errors.New("a fsm.PreparedPart part holds a name of the zone")

// TransferFenced is Transfer from a state that holds fence id of origin
// and in which no prepared part holds a name of origin: it waits for the
// parts prepared before the fence to finish, until ctx ends. It is an
// ErrBusy *Error when this member's state does not, or no longer, holds the
// fence, or ctx ended first. start is called with the state's serial and
// base before the first records; with a zero id, no fence is needed. With
// net, an incremental transfer is one difference (cuts.go).
func (r *Replica) TransferFenced(ctx context.Context, origin string, serial uint32, net bool, id txn.ID, start func(XfrStart) error, fn func([]dns.RR) error) error {
	for {
		changed := r.locks.wait()
		err := r.db.View(func(tx *bolt.Tx) error {
			g := fsm.Generation(tx)
			if id == (txn.ID{}) {
				return fsm.Transfer(g, origin, serial, net, start, fn)
			}
			if !fsm.HasFence(g, origin, id, time.Now().UnixNano()) {
				return Errorf(ErrBusy, "fence %s of zone %q is not held on this member", id, origin)
			}
			if err := staleForTransfer(ctx, g); err != nil {
				return err
			}
			if fsm.ZoneLocked(g, origin) {
				return errPrepared
			}
			return fsm.Transfer(g, origin, serial, net, start, fn)
		})
		if !errors.Is(err, errPrepared) {
			return err
		}
		select {
		case <-changed:
		case <-time.After(fenceRetry):
		case <-ctx.Done():
			return Errorf(ErrBusy, "transactions in progress held names of zone %q", origin)
		}
	}
}
