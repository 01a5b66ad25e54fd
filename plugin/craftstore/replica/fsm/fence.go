package fsm

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/craftdns/craftdns/internal/shardmap"

	bolt "go.etcd.io/bbolt"
)

// Transfer fences give a router one consistent snapshot of a zone that
// spans shards (craftroute's xfr.go). A fence is replicated state in the
// generation bucket:
//
//	data.<n>/txfences/<zone> 0 <id> -> until (8 bytes, Unix ns, big-endian)
//
// While a fence holds (until its time, by the proposer's clock of the entry
// being applied) a prepare in the zone is refused with ErrBusy, and another
// fence of the zone too, and a map part that drops names when it commits
// (a migration's old owner: any fence refuses it). A transfer under a fence
// is read from a state that holds the fence and in which no prepared part
// holds a name of the zone or drops names (TransferFenced waits for the
// parts prepared before the fence to finish). A router that holds fences on every shard at once, and reads
// each shard so, reads states cut at one point of every transaction's
// history: a transaction committed in one shard's state was prepared on
// every participant before its fence (a prepare after it would have been
// refused, and the decision comes after every prepare), so its parts had
// finished, as commits, in every state read.
var bucketTxFences = []byte("txfences")

// FenceTTL bounds a fence whose router never removed it (it died): the
// shard's transactions resume after it.
const FenceTTL = 5 * time.Second

func fenceKey(zone string, id [16]byte) []byte {
	return append(append([]byte(zone), 0), id[:]...)
}

// fenced reports whether a fence of zone other than except holds at now,
// and forgets the fences of zone that ran out by then.
func fenced(g *bolt.Bucket, zone string, now int64, except ...[16]byte) (bool, error) {
	b := g.Bucket(bucketTxFences)
	if b == nil {
		return false, nil
	}
	prefix := append([]byte(zone), 0)
	var expired [][]byte
	held := false
	cur := b.Cursor()
	for k, v := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
		if len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > now {
			if len(except) == 0 || !bytes.Equal(k[len(prefix):], except[0][:]) {
				held = true
			}
			continue
		}
		expired = append(expired, append([]byte(nil), k...))
	}
	for _, k := range expired { // not while walking the cursor
		if err := b.Delete(k); err != nil {
			return false, err
		}
	}
	return held, nil
}

// StaleTransfer refuses, with ErrStaleMap, a router's transfer read from
// state g when the router's map (at epoch) is older than the last change
// of the shards in g. The member judges the request by its own placement
// before it sets the fence, and a member behind its group can pass a
// router that does not know a shard added since: the state the fence is
// applied in may then hold the hand-over of names to that shard, which
// that router would not read (its transfer would miss them). Judged on
// the state read, it cannot. A router that knows the shards reads each of
// them; moves between them since its epoch do not matter to a transfer.
func StaleTransfer(g *bolt.Bucket, epoch uint64) error {
	p, err := Placement(g)
	if err != nil || p.FenceWrite(epoch) != shardmap.Fenced {
		return err
	}
	return Errorf(ErrStaleMap, "%s", p.FencedText(epoch))
}

// ZoneLocked reports whether a prepared part holds a name of zone, or
// drops names when it commits (a migration's old owner: dropLock).
func ZoneLocked(g *bolt.Bucket, zone string) bool {
	b := g.Bucket(BucketTxLocks)
	if b == nil {
		return false
	}
	if b.Get(lockKey("", dropLock)) != nil && IndexedParts(g) > 0 {
		// Key mode "name": the drop deletes names of every zone, which a
		// transfer across the shards must not see on both or neither.
		// In key mode "zone" a zone is on one shard, whole until the
		// drop deletes it: its transfers need not wait.
		return true
	}
	prefix := append([]byte(zone), 0)
	k, _ := b.Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// applyTxFence sets fence c.Tx on zone c.Zone until c.Time + FenceTTL,
// unless another fence holds the zone (ErrBusy).
func applyTxFence(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if g.Bucket(BucketZones).Bucket([]byte(c.Zone)) == nil {
		return Result{}, nil, Errorf(ErrNotFound, "zone %q not found", c.Zone)
	}
	other, err := fenced(g, c.Zone, c.Time, c.Tx)
	if err != nil {
		return Result{}, nil, err
	}
	if other {
		// One transfer's cut at a time: cuts then follow each other on
		// every shard, and a zone serial stands for one of them.
		return Result{}, nil, Errorf(ErrBusy, "zone %q is being transferred", c.Zone)
	}
	b, err := g.CreateBucketIfNotExists(bucketTxFences)
	if err != nil {
		return Result{}, nil, err
	}
	until := binary.BigEndian.AppendUint64(nil, uint64(c.Time+int64(FenceTTL)))
	return Result{}, nil, b.Put(fenceKey(c.Zone, c.Tx), until)
}

// applyTxUnfence removes fence c.Tx of zone c.Zone (and any that ran out)
// and records the cut the router read under it: c.Meta, when set, is the
// zone serial (4 bytes) and the cut (cuts.go). Result.Held says whether the
// fence still held: it is gone once a prepare or another fence found it
// run out (fenced deletes it then), and then a prepare may have slipped in
// while the router was still setting the other shards' fences, so the
// router's cut is not one (and is not recorded).
func applyTxUnfence(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	held := false
	if b := g.Bucket(bucketTxFences); b != nil {
		held = b.Get(fenceKey(c.Zone, c.Tx)) != nil
		if err := b.Delete(fenceKey(c.Zone, c.Tx)); err != nil {
			return Result{}, nil, err
		}
		if held && len(c.Meta) > 4 && g.Bucket(BucketZones).Bucket([]byte(c.Zone)) != nil {
			if err := putCut(g, c.Zone, binary.BigEndian.Uint32(c.Meta), c.Meta[4:]); err != nil {
				return Result{}, nil, err
			}
		}
	}
	_, err := fenced(g, c.Zone, c.Time)
	return Result{Held: held}, nil, err
}

// checkFence refuses a prepare in zone with ErrBusy while a fence holds.
func checkFence(g *bolt.Bucket, c *Command) error {
	held, err := fenced(g, c.Zone, c.Time)
	if err != nil {
		return err
	}
	if held {
		return Errorf(ErrBusy, "zone %q is being transferred", c.Zone)
	}
	return nil
}

// checkFences refuses with ErrBusy while a fence of any zone holds at now
// (a prepare that drops names of whichever zones the held partitions
// have: dropLock).
func checkFences(g *bolt.Bucket, now int64) error {
	b := g.Bucket(bucketTxFences)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		if len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > now {
			zone, _, _ := bytes.Cut(k, []byte{0})
			return Errorf(ErrBusy, "zone %q is being transferred", zone)
		}
		return nil
	})
}

// HasFence reports whether fence id of zone is set in g and has not run
// out at now (Unix ns; the reader's clock: the state machine reads none).
func HasFence(g *bolt.Bucket, zone string, id [16]byte, now int64) bool {
	b := g.Bucket(bucketTxFences)
	if b == nil {
		return false
	}
	v := b.Get(fenceKey(zone, id))
	return len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > now
}

// XfrStart is the state a transfer stream was read from.
type XfrStart struct {
	Serial uint32 // the zone's serial on this shard
	Base   uint32 // its serial base (serialbase.go); Serial when none is kept
}
