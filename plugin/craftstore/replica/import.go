package replica

import (
	"context"
	"time"

	"github.com/craftdns/craftdns/internal/zonerules"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// Seeded reports whether a seed import of zone committed in the group, as
// far as this member has applied it and its view serves the result (the
// view of a zone is rebuilt after the transaction that imported it).
func (r *Replica) Seeded(zone string) bool { return (*r.seeded.Load())[zone] }

// noteSeeded adds zone to the seeded zones of the view.
func (r *Replica) noteSeeded(zone string) {
	next := map[string]bool{zone: true}
	for z := range *r.seeded.Load() {
		next[z] = true
	}
	r.seeded.Store(&next)
}

// Import is a whole-zone import fed record by record, as a zone file is
// parsed or a transfer arrives (craftstore's PUT, AXFR in and seed, and a
// migration's staged copy): memory holds one chunk of records, not the
// zone. Each chunk is checked against what the import staged before it
// (fsm.CheckImportChunk, on this member's own state, which applied every
// chunk the Import proposed, since a proposal returns once it is applied
// here) and proposed; Stage and Commit check first what only the whole
// zone shows (the apex, no name below a DNAME), reading the staged names a
// piece at a time in short read transactions. The checks are CheckZone's,
// so a zone is refused as the whole-zone check would refuse it
// (ErrInvalid), and nothing is written: an import that does not stage or
// commit is dropped (Abort), and the zone stays as it was.
type Import struct {
	r      *Replica
	zone   string
	absent bool
	per    time.Duration // each proposal's timeout; 0: the caller's context alone

	id      uint64 // 0 until the first chunk is proposed
	chunk   []dns.RR
	records int    // records added
	serial  uint32 // the serial of the SOA added
	done    bool   // staged for a caller or committed: not dropped
}

// stagedPiece is how many staged names one read transaction of the final
// checks reads.
const stagedPiece = 65536

// NewImport begins an import of zone, with absent set a seed's (it
// commits only when the zone does not exist: Result.Skipped), each of its
// proposals bounded by per (0: none but the contexts the calls take). The
// caller adds the records, then commits (Commit) or stages (Stage), and
// calls Abort in every case (a no-op after either).
func (r *Replica) NewImport(zone string, absent bool, per time.Duration) *Import {
	return &Import{r: r, zone: zone, absent: absent, per: per, chunk: make([]dns.RR, 0, importChunk)}
}

// Records returns how many records were added.
func (im *Import) Records() int { return im.records }

// Serial returns the serial of the SOA added, 0 before one was.
func (im *Import) Serial() uint32 { return im.serial }

// Add adds rr to the import; a full chunk is checked and proposed.
func (im *Import) Add(ctx context.Context, rr dns.RR) error {
	if soa, ok := rr.(*dns.SOA); ok {
		im.serial = soa.Serial
	}
	im.chunk = append(im.chunk, rr)
	im.records++
	if len(im.chunk) < importChunk {
		return nil
	}
	return im.flush(ctx)
}

// proposeCtx returns ctx bounded by the import's timeout per proposal.
func (im *Import) proposeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if im.per <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, im.per)
}

// flush checks and proposes the chunk, beginning the import first.
func (im *Import) flush(ctx context.Context) error {
	if len(im.chunk) == 0 {
		return nil
	}
	check := func(b *bolt.Bucket) error { return fsm.CheckImportChunk(b, im.zone, im.chunk) }
	if im.id == 0 {
		// The first chunk is checked before anything is written: a
		// zone refused there leaves no import to drop.
		if err := ruleError(check(nil)); err != nil {
			return err
		}
		id := im.r.nextID.Add(1) // import id: unique per proposer like proposal ids
		pctx, cancel := im.proposeCtx(ctx)
		_, err := im.r.propose(pctx, &fsm.Command{Op: fsm.OpImportBegin, Zone: im.zone, Import: id, Absent: im.absent})
		cancel()
		if err != nil {
			return err
		}
		im.id = id
	} else if err := im.staged(check); err != nil {
		return err
	}
	pctx, cancel := im.proposeCtx(ctx)
	_, err := im.r.propose(pctx, &fsm.Command{Op: fsm.OpImportChunk, Zone: im.zone, Import: im.id, Add: im.chunk})
	cancel()
	clear(im.chunk)
	im.chunk = im.chunk[:0]
	return err
}

// staged runs check on the import's staging bucket in a read transaction
// of this member's state; a zone rule's error is ErrInvalid, and an import
// superseded by another is ErrConflict.
func (im *Import) staged(check func(b *bolt.Bucket) error) error {
	var ruled error
	err := im.r.db.View(func(tx *bolt.Tx) error {
		b := fsm.StagedImport(fsm.Generation(tx), im.zone, im.id)
		if b == nil {
			return Errorf(ErrConflict, "import of zone %q was superseded by another import", im.zone)
		}
		ruled = check(b)
		return nil
	})
	if err != nil {
		return err
	}
	return ruleError(ruled)
}

// ruleError is a check's error as the import's: a zone rule's is
// ErrInvalid, the replica's own as it is.
func ruleError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*Error); ok {
		return err
	}
	return Errorf(ErrInvalid, "%v", err)
}

// Stage proposes the last chunk and checks the whole staged zone; the
// import then stays staged (not dropped by Abort) for a shard map part to
// commit (MapPart.Imports), superseded by another import of the zone. It
// returns the import's ID.
func (im *Import) Stage(ctx context.Context) (uint64, error) {
	if im.id == 0 {
		// A zone of one chunk, checked whole before anything is
		// written (CheckZone's checks, the whole zone's included).
		if err := ruleError(zonerules.CheckZone(im.zone, im.chunk)); err != nil {
			return 0, err
		}
	}
	if err := im.flush(ctx); err != nil {
		return 0, err
	}
	if err := im.staged(func(b *bolt.Bucket) error { return fsm.CheckStagedApex(b, im.zone) }); err != nil {
		return 0, err
	}
	var from, owner []byte
	for first := true; first || from != nil; first = false {
		if err := ctx.Err(); err != nil {
			return 0, Errorf(ErrUnavailable, "import of zone %q: %v", im.zone, err)
		}
		err := im.staged(func(b *bolt.Bucket) (err error) {
			from, owner, err = fsm.CheckStagedDNAMEs(b, from, owner, stagedPiece)
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	im.done = true
	return im.id, nil
}

// Commit stages the import (Stage) and replaces (or creates) the zone
// with it.
func (im *Import) Commit(ctx context.Context) (Result, error) {
	if _, err := im.Stage(ctx); err != nil {
		return Result{}, err
	}
	im.done = false // dropped when the commit fails
	pctx, cancel := im.proposeCtx(ctx)
	defer cancel()
	res, err := im.r.propose(pctx, &fsm.Command{Op: fsm.OpImportCommit, Zone: im.zone, Import: im.id})
	if err == nil {
		im.done = true
	}
	return res, err
}

// abortTimeout bounds Abort's proposals when the import has no timeout
// per proposal.
const abortTimeout = 10 * time.Second

// Abort drops the import's staged records unless it staged for a caller
// or committed: it proposes an empty import of the zone, which supersedes
// this one (OpImportBegin drops the zone's unfinished import), and that
// import's commit, which its apex check refuses and which then drops it:
// nothing of either is left, with the state machine's ops as every
// member applies them. An import another one superseded is left alone.
func (im *Import) Abort() {
	if im.id == 0 || im.done {
		return
	}
	im.done = true
	if im.staged(func(*bolt.Bucket) error { return nil }) != nil {
		return // superseded, or this member cannot read its state
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(im.per, abortTimeout))
	defer cancel()
	id := im.r.nextID.Add(1)
	if _, err := im.r.propose(ctx, &fsm.Command{Op: fsm.OpImportBegin, Zone: im.zone, Import: id}); err != nil {
		im.r.log.Warningf("zone %s: could not drop a failed import (the next import of the zone will): %v", im.zone, err)
		return
	}
	if _, err := im.r.propose(ctx, &fsm.Command{Op: fsm.OpImportCommit, Zone: im.zone, Import: id}); err == nil {
		im.r.log.Errorf("zone %s: the empty import that drops a failed one committed", im.zone)
	}
}
