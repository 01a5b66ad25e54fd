package replica

import (
	"context"
	"time"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// txTime is the proposer's clock for a transaction entry.
func txTime() int64 { return time.Now().UnixNano() }

// TxPrepareChange proposes part of transaction id: an API record change of
// zone (as Change). meta is the coordinator and participants (JSON, kept
// for the recovery). A nil error is a yes vote; ErrBusy means a name is
// locked by another transaction, or that this transaction was aborted
// already: either way its router runs it again under a new ID.
func (r *Replica) TxPrepareChange(ctx context.Context, id txn.ID, zone string, add []dns.RR, del []Deletion, meta []byte) error {
	part, err := (&fsm.Command{Op: fsm.OpChange, Zone: zone, Add: add, Del: del}).Marshal()
	if err != nil {
		return Errorf(ErrInvalid, "%v", err)
	}
	_, err = r.propose(ctx, &fsm.Command{Op: fsm.OpTxPrepare, Zone: zone, Tx: id, Time: txTime(), Part: part, Meta: meta})
	return err
}

// TxPrepareUpdate proposes part of transaction id: an RFC 2136 UPDATE of
// zone (as Update). The vote is yes when the rcode is NOERROR and err nil.
func (r *Replica) TxPrepareUpdate(ctx context.Context, id txn.ID, zone string, prereq, updates []dns.RR, meta []byte) (int, error) {
	packed, err := txn.PackUpdate(prereq, updates)
	if err != nil {
		return dns.RcodeFormatError, Errorf(ErrInvalid, "packing update: %v", err)
	}
	part, err := (&fsm.Command{Op: fsm.OpUpdate, Zone: zone, Update: packed}).Marshal()
	if err != nil {
		return dns.RcodeFormatError, Errorf(ErrInvalid, "%v", err)
	}
	res, err := r.propose(ctx, &fsm.Command{Op: fsm.OpTxPrepare, Zone: zone, Tx: id, Time: txTime(), Part: part, Meta: meta})
	return res.Rcode, err
}

// TxPrepareKeys proposes part of transaction id: zone's key set keys
// (fsm.OpKeys; with absent only where the zone has none).
func (r *Replica) TxPrepareKeys(ctx context.Context, id txn.ID, zone string, keys []byte, absent bool, meta []byte) error {
	part, err := (&fsm.Command{Op: fsm.OpKeys, Zone: zone, Keys: keys, Absent: absent}).Marshal()
	if err != nil {
		return Errorf(ErrInvalid, "%v", err)
	}
	_, err = r.propose(ctx, &fsm.Command{Op: fsm.OpTxPrepare, Zone: zone, Tx: id, Time: txTime(), Part: part, Meta: meta})
	return err
}

// MapPart is a shard's part of a change of the shard map.
type MapPart struct {
	Map   []byte   // the map at its next epoch, shardmap.Map as JSON
	Shard string   // the map's shard this one is, "" when it is none of them
	Hold  []uint32 // partitions whose writes wait while the part is prepared
	Moves []Move   // record changes that move names with the map, one per zone
	Drop  bool     // delete, at commit, what only the held partitions' owner holds
	// Imports are staged zones (Import.Stage) the part commits before its
	// moves (key mode "zone": the zones a batch moves here).
	Imports []Staged
}

// TxPrepareMap proposes part p of transaction id: the deployment's shard
// map at the next epoch, one part on every shard; while it is prepared,
// writes to the names of the partitions p holds wait (ErrBusy, which
// proposeUnlocked waits out); its moves and drop are prepared and
// committed with it (fsm.Command.Moves, Drop).
// meta is as for TxPrepareChange. The vote is refused with ErrConflict when
// the shard is not at the epoch before m's, ErrInvalid when m is not a
// valid map, ErrBusy while another map change is prepared.
func (r *Replica) TxPrepareMap(ctx context.Context, id txn.ID, p MapPart, meta []byte) error {
	c := &fsm.Command{Op: fsm.OpMapSet, Map: p.Map, Shard: p.Shard, Hold: p.Hold, Drop: p.Drop, Imports: p.Imports}
	for _, mv := range p.Moves {
		c.Moves = append(c.Moves, &fsm.Command{Op: fsm.OpChange, Zone: mv.Zone, Add: mv.Add, Del: mv.Del})
	}
	part, err := c.Marshal()
	if err != nil {
		return Errorf(ErrInvalid, "%v", err)
	}
	_, err = r.propose(ctx, &fsm.Command{Op: fsm.OpTxPrepare, Tx: id, Time: txTime(), Part: part, Meta: meta})
	return err
}

// Move is one zone's record change that a map part carries (a
// migration's batch, fsm.Command.Moves).
type Move struct {
	Zone string
	Add  []dns.RR
	Del  []Deletion
}

// Names returns the names mv touches.
func (mv Move) Names() []string {
	names := make([]string, 0, len(mv.Add)+len(mv.Del))
	for _, rr := range mv.Add {
		names = append(names, rr.Header().Name)
	}
	for _, d := range mv.Del {
		if d.RR != nil {
			names = append(names, d.RR.Header().Name)
		} else {
			names = append(names, d.Name)
		}
	}
	return names
}

// ShardMap returns the shard map this member applied last, nil before the
// first. It must not be changed.
func (r *Replica) ShardMap() *shardmap.Map {
	if p := r.shardMap.Load(); p != nil {
		return p.Map
	}
	return nil
}

// Placement returns this member's place in the shard map it applied last
// (its shard, and since when names are placed as they are), nil before
// the first map. Members fence routers by it (shardmap.Place.Fence).
func (r *Replica) Placement() *shardmap.Place { return r.shardMap.Load() }

// loadShardMap reads the shard map from the current generation.
func (r *Replica) loadShardMap() error {
	return r.db.View(func(tx *bolt.Tx) error {
		p, err := fsm.Placement(fsm.Generation(tx))
		if err == nil {
			r.shardMap.Store(p)
		}
		return err
	})
}

// TxCommit applies the prepared part of transaction id and returns the
// zone's serial after it. Repeating it is harmless.
func (r *Replica) TxCommit(ctx context.Context, id txn.ID) (uint32, error) {
	res, err := r.propose(ctx, &fsm.Command{Op: fsm.OpTxCommit, Tx: id, Time: txTime()})
	return res.Serial, err
}

// TxAbort drops the prepared part of transaction id, or notes the abort
// for a prepare still to come. Repeating it is harmless.
func (r *Replica) TxAbort(ctx context.Context, id txn.ID) error {
	_, err := r.propose(ctx, &fsm.Command{Op: fsm.OpTxAbort, Tx: id, Time: txTime()})
	return err
}

// TxDecide records outcome for transaction id on the coordinator unless
// one is recorded, and returns the recorded one.
func (r *Replica) TxDecide(ctx context.Context, id txn.ID, outcome txn.Outcome) (txn.Outcome, error) {
	b := fsm.OutcomeAbort
	if outcome == txn.Commit {
		b = fsm.OutcomeCommit
	}
	res, err := r.propose(ctx, &fsm.Command{Op: fsm.OpTxDecide, Tx: id, Time: txTime(), Outcome: b})
	if err != nil {
		return "", err
	}
	return fsm.OutcomeOf(res.Outcome), nil
}

// PreparedTx is a transaction's part prepared on this member.
type PreparedTx struct {
	ID   txn.ID
	Zone string
	Meta []byte    // as given to the prepare
	At   time.Time // when this member applied the prepare (its clock)
}

// TxPrepared returns the transaction parts prepared on this member that it
// applied before older.
func (r *Replica) TxPrepared(older time.Time) ([]PreparedTx, error) {
	ats := r.locks.preparedBefore(older)
	if len(ats) == 0 {
		return nil, nil
	}
	var out []PreparedTx
	err := r.db.View(func(tx *bolt.Tx) error {
		for id, at := range ats {
			c, err := fsm.PreparedPart(fsm.Generation(tx), id[:])
			if err != nil {
				return err
			}
			if c != nil {
				out = append(out, PreparedTx{ID: id, Zone: c.Zone, Meta: c.Meta, At: at})
			}
		}
		return nil
	})
	return out, err
}

// TxPart returns the zone and the names of the part of transaction id
// prepared on this member; ok is false when none is.
func (r *Replica) TxPart(id txn.ID) (zone string, names []string, ok bool) {
	r.db.View(func(tx *bolt.Tx) error {
		c, err := fsm.PreparedPart(fsm.Generation(tx), id[:])
		if err != nil || c == nil {
			return err
		}
		part, err := fsm.Unmarshal(c.Part)
		if err != nil {
			return err
		}
		if names, err = fsm.Touched(part); err == nil {
			zone, ok = c.Zone, true
		}
		return nil
	})
	return zone, names, ok
}
