package fsm

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// The state machine of transactions that span shards (package
// internal/txn has the protocol and its invariants). All of it is
// replicated state in the generation bucket, so it survives restarts and
// travels in snapshots:
//
//	data.<n>/txprepared/<id>          -> the OpTxPrepare command (marshalled)
//	data.<n>/txlocks/<zone> 0 <name>  -> id: a name a prepared part holds
//	data.<n>/txdone/<id>              -> outcome (1 byte), time (8): a part finished here
//	data.<n>/txdecided/<id>           -> outcome (1 byte), time (8): a decision, on the coordinator
//	data.<n>/txexpiry/<time><kind><id> -> empty: when a txdone or txdecided entry goes
var (
	BucketTxPrepared = []byte("txprepared")
	BucketTxLocks    = []byte("txlocks")
	bucketTxDone     = []byte("txdone")
	bucketTxDecided  = []byte("txdecided")
	bucketTxExpiry   = []byte("txexpiry")
)

// Outcome bytes in the log and in bbolt.
const (
	OutcomeCommit byte = 1
	OutcomeAbort  byte = 2
)

func OutcomeOf(b byte) txn.Outcome {
	if b == OutcomeCommit {
		return txn.Commit
	}
	return txn.Abort
}

// Decided returns the decision recorded for transaction id on this shard as
// its coordinator, and whether there is one.
func Decided(g *bolt.Bucket, id []byte) (txn.Outcome, bool) {
	o, ok := getOutcome(g, bucketTxDecided, id)
	if !ok {
		return "", false
	}
	return OutcomeOf(o), true
}

// Touched returns the canonical names that write c (OpChange or OpUpdate)
// reads or writes: its additions and deletions, or its prerequisites and
// updates.
func Touched(c *Command) ([]string, error) {
	var names []string
	add := func(name string) { names = append(names, strings.ToLower(dns.Fqdn(name))) }
	switch c.Op {
	case OpChange:
		for _, rr := range c.Add {
			add(rr.Header().Name)
		}
		for _, d := range c.Del {
			if d.RR != nil {
				add(d.RR.Header().Name)
			} else {
				add(d.Name)
			}
		}
	case OpUpdate:
		m := new(dns.Msg)
		if err := m.Unpack(c.Update); err != nil {
			return nil, Errorf(ErrInvalid, "unpacking update: %v", err)
		}
		for _, rr := range append(m.Answer, m.Ns...) {
			add(rr.Header().Name)
		}
	case OpKeys:
		// A zone's key set names no name of the zone (partLocks).
		if c.Zone == "" {
			return nil, Errorf(ErrInvalid, "a key set part belongs to a zone")
		}
	case OpMapSet:
		if c.Zone != "" {
			return nil, Errorf(ErrInvalid, "a shard map part belongs to no zone")
		}
		names = []string{MapLock}
		for _, p := range c.Hold {
			names = append(names, holdName(p))
		}
	default:
		return nil, Errorf(ErrInvalid, "a transaction's part must be a change, an update, a shard map or a key set")
	}
	return names, nil
}

// LockRef is a name that a prepared part holds, in its zone: "" for a
// map part's own names (MapLock, its held partitions), which no query
// meets.
type LockRef struct{ Zone, Name string }

// dropLock is the name, among a map part's own (zone ""), that a part
// with Drop holds: its commit deletes names of every zone with names in
// the held partitions, so a transfer of any zone waits for it to finish
// (ZoneLocked), as for a part that holds a name of the zone, and it is
// not prepared while a transfer's fence holds (checkFences). No query and
// no write meets it.
const dropLock = "drop"

// maxMoves bounds the zones of a map part's moves.
const maxMoves = 4096

// partLocks returns the names that part, prepared for zone, holds: those
// it reads or writes (Touched), and for a map part those of its moves, in
// their zones.
func partLocks(zone string, part *Command) ([]LockRef, error) {
	names, err := Touched(part)
	if err != nil {
		return nil, err
	}
	if len(part.Moves) > maxMoves {
		return nil, Errorf(ErrInvalid, "a shard map part moves names of %d zones: at most %d", len(part.Moves), maxMoves)
	}
	refs := make([]LockRef, 0, len(names))
	for _, n := range names {
		refs = append(refs, LockRef{zone, n})
	}
	if part.Op == OpMapSet && part.Drop {
		refs = append(refs, LockRef{"", dropLock})
	}
	if part.Op == OpKeys {
		refs = append(refs, LockRef{"", keysLock(zone)})
	}
	if len(part.Imports) > maxMoves || len(part.Imports) > 0 && part.Op != OpMapSet {
		return nil, Errorf(ErrInvalid, "a shard map part commits at most %d staged zones", maxMoves)
	}
	for _, im := range part.Imports {
		// The apex of a zone the part brings: no other import of it
		// supersedes the staged one meanwhile (applyImportBegin).
		refs = append(refs, LockRef{im.Zone, im.Zone})
	}
	for _, mv := range part.Moves {
		if part.Op != OpMapSet || mv.Op != OpChange || mv.Zone == "" {
			return nil, Errorf(ErrInvalid, "moves are record changes of zones in a shard map part")
		}
		mn, err := Touched(mv)
		if err != nil {
			return nil, err
		}
		for _, n := range mn {
			refs = append(refs, LockRef{mv.Zone, n})
		}
	}
	return refs, nil
}

// namesIn returns the names of refs in zone.
func namesIn(refs []LockRef, zone string) []string {
	var names []string
	for _, r := range refs {
		if r.Zone == zone {
			names = append(names, r.Name)
		}
	}
	return names
}

func lockKey(zone, name string) []byte {
	return append(append([]byte(zone), 0), name...)
}

// lockedBy returns the transaction that holds name of zone, if any.
func lockedBy(g *bolt.Bucket, zone, name string) ([]byte, bool) {
	b := g.Bucket(BucketTxLocks)
	if b == nil {
		return nil, false
	}
	v := b.Get(lockKey(zone, name))
	return v, v != nil
}

// anyLocks reports whether some transaction holds names on this shard.
func anyLocks(g *bolt.Bucket) bool {
	b := g.Bucket(BucketTxLocks)
	if b == nil {
		return false
	}
	k, _ := b.Cursor().First()
	return k != nil
}

// checkUnlocked refuses write c with ErrBusy when a transaction holds a
// name it touches.
func checkUnlocked(g *bolt.Bucket, c *Command) error {
	if !anyLocks(g) {
		return nil
	}
	names, err := Touched(c)
	if err != nil {
		return err
	}
	if err := checkNames(g, c.Zone, names); err != nil {
		return err
	}
	return checkHolds(g, c.Zone, names)
}

// checkNames refuses with ErrBusy when a transaction holds one of names of
// zone.
func checkNames(g *bolt.Bucket, zone string, names []string) error {
	for _, n := range names {
		if by, ok := lockedBy(g, zone, n); ok {
			return Errorf(ErrBusy, "%s is locked by transaction %x in progress", n, by)
		}
	}
	return nil
}

// checkRefs refuses with ErrBusy when a transaction holds one of refs.
func checkRefs(g *bolt.Bucket, refs []LockRef) error {
	for _, r := range refs {
		if by, ok := lockedBy(g, r.Zone, r.Name); ok {
			return Errorf(ErrBusy, "%s is locked by transaction %x in progress", r.Name, by)
		}
	}
	return nil
}

// checkHeldLocks refuses with ErrBusy a map part that would hold
// partitions hold while another transaction's prepared part holds a name
// in one of them: that part's commit would change the partition after the
// hold began (the names a migration moves must stay as they were read).
func checkHeldLocks(g *bolt.Bucket, hold []uint32, partitions int) error {
	locks := g.Bucket(BucketTxLocks)
	if locks == nil || len(hold) == 0 {
		return nil
	}
	held := make(map[uint32]bool, len(hold))
	for _, p := range hold {
		held[p] = true
	}
	byZone := IndexedParts(g) == 0
	return locks.ForEach(func(k, v []byte) error {
		zone, name, ok := strings.Cut(string(k), "\x00")
		if !ok || zone == "" {
			return nil
		}
		key := name
		if byZone {
			key = zone // key mode "zone": the zone's partition places it
		}
		if p := uint32(shardmap.PartitionOf(key, partitions)); held[p] {
			return Errorf(ErrBusy, "%s (partition %d) is locked by transaction %x in progress", name, p, v)
		}
		return nil
	})
}

// txRecord is an outcome with its time, as txdone and txdecided hold it.
func txRecord(outcome byte, t int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{outcome}, uint64(t))
}

func getOutcome(g *bolt.Bucket, bucket []byte, id []byte) (byte, bool) {
	b := g.Bucket(bucket)
	if b == nil {
		return 0, false
	}
	v := b.Get(id)
	if len(v) < 1 {
		return 0, false
	}
	return v[0], true
}

// putOutcome records outcome for id in bucket (txdone or txdecided) and
// when it expires, then forgets what expired by c.Time.
func putOutcome(g *bolt.Bucket, bucket []byte, c *Command, outcome byte) error {
	b, err := g.CreateBucketIfNotExists(bucket)
	if err != nil {
		return err
	}
	if err := b.Put(c.Tx[:], txRecord(outcome, c.Time)); err != nil {
		return err
	}
	exp, err := g.CreateBucketIfNotExists(bucketTxExpiry)
	if err != nil {
		return err
	}
	until := c.Time + int64(txn.Retention)
	k := binary.BigEndian.AppendUint64(nil, uint64(until))
	k = append(append(k, bucket[2]), c.Tx[:]...) // 'd'one or 'd'ecided: the third letter tells them apart
	if err := exp.Put(k, nil); err != nil {
		return err
	}
	return expireTx(g, c.Time)
}

// expireTx forgets finished IDs and decisions whose time passed by now
// (the proposer's clock of the entry being applied: every member forgets
// the same ones).
func expireTx(g *bolt.Bucket, now int64) error {
	exp := g.Bucket(bucketTxExpiry)
	if exp == nil {
		return nil
	}
	cur := exp.Cursor()
	for k, _ := cur.First(); k != nil && len(k) == 8+1+16; k, _ = cur.First() {
		if int64(binary.BigEndian.Uint64(k)) > now {
			break
		}
		bucket := bucketTxDone
		if k[8] == bucketTxDecided[2] {
			bucket = bucketTxDecided
		}
		if b := g.Bucket(bucket); b != nil {
			if err := b.Delete(k[9:]); err != nil {
				return err
			}
		}
		if err := cur.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// applyTxPrepare evaluates a transaction's part against this shard's state
// and, when it passes, keeps it and locks its names. The vote is the
// result: Rcode for an UPDATE part, an error (ErrBusy when a name is
// locked by another transaction or the transaction was aborted already)
// for anything that fails.
func applyTxPrepare(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if o, ok := getOutcome(g, bucketTxDone, c.Tx[:]); ok {
		if o == OutcomeAbort {
			// A prepare repeated after a participant's recovery aborted the
			// transaction (its router was slower than txn.ResolveAfter, as
			// when the member it asked first died). The abort stands at the
			// coordinator, so nothing of it is written anywhere: the router
			// runs the request again under a new ID, as after a lock.
			return Result{}, nil, Errorf(ErrBusy, "transaction %x was aborted while its router retried: run it again under a new ID", c.Tx)
		}
		return Result{}, nil, nil // committed already: a repeated prepare
	}
	if p := g.Bucket(BucketTxPrepared); p != nil && p.Get(c.Tx[:]) != nil {
		return Result{}, nil, nil // a repeated prepare
	}
	part, err := Unmarshal(c.Part)
	if err != nil {
		return Result{}, nil, Errorf(ErrInvalid, "transaction part: %v", err)
	}
	if part.Zone != c.Zone {
		return Result{}, nil, Errorf(ErrInvalid, "transaction part for zone %q in a prepare for %q", part.Zone, c.Zone)
	}
	refs, err := partLocks(c.Zone, part)
	if err != nil {
		return Result{}, nil, err
	}
	if err := checkRefs(g, refs); err != nil {
		return Result{}, nil, err
	}
	if c.Zone != "" {
		if err := checkHolds(g, c.Zone, namesIn(refs, c.Zone)); err != nil {
			return Result{}, nil, err
		}
	}
	if part.Op == OpMapSet && part.Drop {
		if err := checkFences(g, c.Time); err != nil {
			return Result{}, nil, err
		}
	}
	if part.Op == OpMapSet && len(part.Hold) > 0 {
		m, err := ShardMap(g)
		if err != nil {
			return Result{}, nil, err
		}
		if m != nil {
			if err := checkHeldLocks(g, part.Hold, m.Partitions); err != nil {
				return Result{}, nil, err
			}
		}
	}
	zones := []string{c.Zone}
	for _, mv := range part.Moves {
		zones = append(zones, mv.Zone)
	}
	for _, im := range part.Imports {
		// The staged zone is the current import, and its commit cannot
		// be refused (applyImportCommit checks the apex): the part's
		// commit must not fail.
		b, absent, err := importOf(g, &Command{Zone: im.Zone, Import: im.Import})
		if err != nil {
			return Result{}, nil, err
		}
		apex, err := RRsAt(b, im.Zone)
		if err != nil {
			return Result{}, nil, err
		}
		if err := checkApex(im.Zone, apex); err != nil {
			return Result{}, nil, err
		}
		if absent {
			return Result{}, nil, Errorf(ErrInvalid, "zone %q is staged as a seed: a shard map part commits a zone staged to move", im.Zone)
		}
	}
	for _, z := range zones {
		if z == "" {
			continue
		}
		if err := checkFence(g, &Command{Zone: z, Time: c.Time}); err != nil {
			return Result{}, nil, err
		}
		if g.Bucket(bucketImportMeta).Get([]byte(z)) != nil && !part.imports(z) {
			return Result{}, nil, Errorf(ErrBusy, "zone %q is being imported", z)
		}
	}
	res, _, err := applyPart(g, part, applyOpts{dry: true})
	if err != nil || res.Rcode != dns.RcodeSuccess {
		return res, nil, err
	}
	p, err := g.CreateBucketIfNotExists(BucketTxPrepared)
	if err != nil {
		return Result{}, nil, err
	}
	rec, err := c.Marshal()
	if err != nil {
		return Result{}, nil, err
	}
	if err := p.Put(c.Tx[:], rec); err != nil {
		return Result{}, nil, err
	}
	locks, err := g.CreateBucketIfNotExists(BucketTxLocks)
	if err != nil {
		return Result{}, nil, err
	}
	for _, r := range refs {
		if err := locks.Put(lockKey(r.Zone, r.Name), c.Tx[:]); err != nil {
			return Result{}, nil, err
		}
	}
	return Result{Serial: res.Serial}, &Effect{Zone: c.Zone, Tx: &TxEffect{ID: c.Tx, Locks: refs, Prepared: true}}, nil
}

// applyPart applies a transaction's part, and the moves of a map part
// after it, as o says: a refusal of any is the part's. The effects of
// the moves are the part's effect's More.
func applyPart(g *bolt.Bucket, part *Command, o applyOpts) (Result, *Effect, error) {
	res, eff, err := applyWrite(g, part, o)
	if err != nil || res.Rcode != dns.RcodeSuccess {
		return res, eff, err
	}
	moves := part.Moves
	if part.Drop && !o.dry && IndexedParts(g) == 0 {
		// Key mode "zone": the zones of the held partitions go whole.
		dropped, err := dropHeldZones(g, part.Hold)
		if err != nil {
			return Result{}, nil, err
		}
		if eff == nil {
			eff = &Effect{}
		}
		eff.More = append(eff.More, dropped...)
	} else if part.Drop && !o.dry {
		// The held partitions' names, as the hold kept them since the
		// prepare. They are not locked meanwhile: a reader of this shard
		// sees them until the commit applies here (and a router routing
		// by the map after it is fenced: the shard no longer owns them);
		// their new owner's part locks them.
		if moves, err = dropHeld(g, part.Hold); err != nil {
			return Result{}, nil, err
		}
	}
	for _, im := range part.Imports {
		if o.dry {
			break // checked by the prepare: the staged import is current
		}
		ires, ieff, err := applyImportCommit(g, &Command{Op: OpImportCommit, Zone: im.Zone, Import: im.Import})
		if err != nil {
			// The staged zone passed each chunk's checks and its apex
			// was there at prepare, locked since: a broken store.
			return ires, nil, err
		}
		if eff == nil {
			eff = &Effect{}
		}
		eff.More = append(eff.More, ieff)
	}
	mo := o
	mo.verbatim = true
	for _, mv := range moves {
		if o.dry && part.imports(mv.Zone) {
			// A change to a zone the part brings, which exists once
			// its staged import commits: what changed on the shard it
			// comes from since it was cloned, exactly.
			continue
		}
		mres, meff, err := applyWrite(g, mv, mo)
		if err != nil || mres.Rcode != dns.RcodeSuccess {
			return mres, nil, err
		}
		if meff != nil {
			if eff == nil {
				eff = &Effect{}
			}
			eff.More = append(eff.More, meff)
		}
	}
	return res, eff, nil
}

// imports reports whether map part c commits a staged import of zone.
func (c *Command) imports(zone string) bool {
	return slices.ContainsFunc(c.Imports, func(im Staged) bool { return im.Zone == zone })
}

// dropHeldZones deletes, in key mode "zone", the zones whose origins are
// in partitions (a map part's Drop: the shard hands them over whole).
func dropHeldZones(g *bolt.Bucket, partitions []uint32) ([]*Effect, error) {
	m, err := ShardMap(g)
	if err != nil || m == nil {
		return nil, err
	}
	held := map[int]bool{}
	for _, p := range partitions {
		held[int(p)] = true
	}
	var zones []string
	if err := g.Bucket(BucketZones).ForEachBucket(func(k []byte) error {
		if held[shardmap.PartitionOf(string(k), m.Partitions)] {
			zones = append(zones, string(k))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out []*Effect
	for _, z := range zones {
		eff, err := deleteZone(g, z)
		if err != nil {
			return nil, err
		}
		out = append(out, eff)
	}
	return out, nil
}

// PreparedPart returns the prepare command of transaction id on this shard,
// its own copy: it may be kept after g's transaction ends.
func PreparedPart(g *bolt.Bucket, id []byte) (*Command, error) {
	p := g.Bucket(BucketTxPrepared)
	if p == nil {
		return nil, nil
	}
	v := p.Get(id)
	if v == nil {
		return nil, nil
	}
	// Its byte fields (Part, Meta) are slices of what it is read from:
	// copied, they outlive the transaction g belongs to.
	return Unmarshal(bytes.Clone(v))
}

// unlock drops prepared part c and its locks, and records that it finished
// with outcome.
func unlock(g *bolt.Bucket, c *Command, finish *Command, outcome byte) ([]LockRef, error) {
	part, err := Unmarshal(c.Part)
	if err != nil {
		return nil, err
	}
	refs, err := partLocks(c.Zone, part)
	if err != nil {
		return nil, err
	}
	if locks := g.Bucket(BucketTxLocks); locks != nil {
		for _, r := range refs {
			if by, ok := lockedBy(g, r.Zone, r.Name); ok && bytes.Equal(by, c.Tx[:]) {
				if err := locks.Delete(lockKey(r.Zone, r.Name)); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := g.Bucket(BucketTxPrepared).Delete(c.Tx[:]); err != nil {
		return nil, err
	}
	return refs, putOutcome(g, bucketTxDone, finish, outcome)
}

// applyTxCommit applies a prepared part: its names are still locked, so it
// writes what its prepare evaluated (the prerequisites are not evaluated
// again), with the serial bump of any change.
func applyTxCommit(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if o, ok := getOutcome(g, bucketTxDone, c.Tx[:]); ok {
		if o == OutcomeAbort {
			return Result{}, nil, Errorf(ErrConflict, "transaction %x was aborted here", c.Tx)
		}
		return Result{Outcome: OutcomeCommit}, nil, nil // a repeated commit
	}
	prep, err := PreparedPart(g, c.Tx[:])
	if err != nil {
		return Result{}, nil, err
	}
	if prep == nil {
		return Result{}, nil, Errorf(ErrNotFound, "transaction %x is not prepared here", c.Tx)
	}
	part, err := Unmarshal(prep.Part)
	if err != nil {
		return Result{}, nil, err
	}
	res, eff, werr := applyPart(g, part, applyOpts{skipPrereqs: true})
	// The part passed at prepare and its names stayed locked: it cannot
	// fail now but for a broken store. Either way the locks go.
	refs, err := unlock(g, prep, c, OutcomeCommit)
	if err != nil {
		return Result{}, nil, err
	}
	if werr != nil {
		return Result{}, nil, werr
	}
	if eff == nil {
		eff = &Effect{Zone: prep.Zone}
	}
	eff.Tx = &TxEffect{ID: c.Tx, Locks: refs}
	res.Outcome = OutcomeCommit
	return res, eff, nil
}

// PreviewPart applies the prepared part of transaction id to g as its
// commit would, and returns the names of zone origin it changes with their
// records after it (nil, nil when none is prepared): the names it
// touches, which stay locked until it is finished, so the preview holds
// until then; the apex only when the part touches it (not for the serial
// bump of every change, which other writes move on). A map part's
// preview is that of its move in zone origin (none without one). It writes g:
// the caller runs it in a transaction it rolls back. A reader answers
// from the preview of a part whose commit is decided but not applied yet.
func PreviewPart(g *bolt.Bucket, id []byte, origin string) ([]zone.NameRecords, error) {
	prep, err := PreparedPart(g, id)
	if err != nil || prep == nil {
		return nil, err
	}
	part, err := Unmarshal(prep.Part)
	if err != nil {
		return nil, err
	}
	if part.Op != OpMapSet {
		return previewChange(g, prep.Zone, part, applyOpts{skipPrereqs: true})
	}
	for _, mv := range part.Moves {
		if mv.Zone == origin {
			return previewChange(g, origin, mv, applyOpts{skipPrereqs: true, verbatim: true})
		}
	}
	return []zone.NameRecords{}, nil // no record changes in zone
}

// previewChange applies part, a change of zone origin, to g as o says
// and returns the names it touches with their records after it.
func previewChange(g *bolt.Bucket, origin string, part *Command, o applyOpts) ([]zone.NameRecords, error) {
	touched, err := Touched(part)
	if err != nil {
		return nil, err
	}
	_, eff, err := applyWrite(g, part, o)
	if err != nil || eff == nil {
		return nil, err
	}
	names := make([]zone.NameRecords, 0, len(eff.Names))
	for _, n := range eff.Names {
		if key := strings.ToLower(dns.Fqdn(n.Name)); key != origin || slices.Contains(touched, key) {
			names = append(names, n)
		}
	}
	return names, nil
}

// applyTxAbort drops a prepared part, or notes that transaction id is
// aborted so that a prepare arriving late is refused.
func applyTxAbort(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if o, ok := getOutcome(g, bucketTxDone, c.Tx[:]); ok {
		if o == OutcomeCommit {
			return Result{}, nil, Errorf(ErrConflict, "transaction %x was committed here", c.Tx)
		}
		return Result{Outcome: OutcomeAbort}, nil, nil
	}
	prep, err := PreparedPart(g, c.Tx[:])
	if err != nil {
		return Result{}, nil, err
	}
	if prep == nil {
		return Result{Outcome: OutcomeAbort}, nil, putOutcome(g, bucketTxDone, c, OutcomeAbort)
	}
	refs, err := unlock(g, prep, c, OutcomeAbort)
	if err != nil {
		return Result{}, nil, err
	}
	return Result{Outcome: OutcomeAbort}, &Effect{Zone: prep.Zone, Tx: &TxEffect{ID: c.Tx, Locks: refs}}, nil
}

// applyTxDecide records the coordinator's decision for a transaction: the
// first one recorded stands, and is the result.
func applyTxDecide(g *bolt.Bucket, c *Command) (Result, *Effect, error) {
	if o, ok := getOutcome(g, bucketTxDecided, c.Tx[:]); ok {
		return Result{Outcome: o}, nil, nil
	}
	if c.Outcome != OutcomeCommit && c.Outcome != OutcomeAbort {
		return Result{}, nil, Errorf(ErrInvalid, "unknown outcome %d", c.Outcome)
	}
	return Result{Outcome: c.Outcome}, nil, putOutcome(g, bucketTxDecided, c, c.Outcome)
}

// TxEffect is what a transaction entry changes in the member's lock view.
type TxEffect struct {
	ID       [16]byte
	Locks    []LockRef
	Prepared bool // locked (prepare) or unlocked (commit, abort)
}
