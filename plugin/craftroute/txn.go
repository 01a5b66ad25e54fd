package craftroute

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/txn"
)

// The router drives transactions that span shards (package internal/txn):
// it prepares every part, has the coordinator decide, and finishes the
// parts. A participant finishes its part on its own when the router cannot
// (it dies, or a message is lost), so the router never needs to remember a
// transaction.

// txBusyBackoff bounds the pause before a transaction that met a lock is
// tried again with a new ID.
const txBusyBackoff = 20 * time.Millisecond

// txResult is how a transaction ended.
type txResult struct {
	committed bool
	// failed is the shard whose vote was no (or that could not vote), and
	// vote its answer; nil with committed false: the outcome is not known
	// (the decision could not be recorded or read).
	failed *Shard
	vote   txn.Vote
	err    error             // why the outcome is unknown, or a shard failed to vote
	serial map[*Shard]uint32 // committed: each shard's serial after its part
	// late lists the shards that did not confirm their commit in time: they
	// apply it on their own, and hold its names locked until then.
	late []*Shard
}

// runTx runs one transaction over parts (shard → its part of zone, without
// coordinator and participants) until it commits, a part votes no, or ctx
// ends. A part that meets a name locked by another transaction makes it
// start again, after a pause, with a new ID: conflicting transactions run
// one after the other. So does a part that a participant's recovery
// aborted while this router retried its prepare (busy too): the abort
// stands everywhere, so running the request again writes it once.
func (sc *shardClient) runTx(ctx context.Context, zone string, parts map[*Shard]txn.Prepare) txResult {
	return sc.runTxStaged(ctx, zone, parts, nil, nil)
}

// runTxStaged is runTx whose parts of the shards first are prepared
// before the others, and fill, once they voted yes, completes the others'
// parts (a migration's batch: the shard that hands names over holds them
// first, and what they hold then is read and given to the shard that
// takes them). An error from fill aborts the transaction; errBatchTooBig
// says so without trying again.
func (sc *shardClient) runTxStaged(ctx context.Context, zone string, parts map[*Shard]txn.Prepare, first []*Shard, fill func(context.Context, map[*Shard]txn.Prepare) error) txResult {
	shards := make([]*Shard, 0, len(parts))
	for s := range parts {
		shards = append(shards, s)
	}
	shards = byName(shards)
	co := shards[0]
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = s.Name
	}
	for attempt := 0; ; attempt++ {
		res, busy := sc.tryTx(ctx, zone, shards, co, names, parts, first, fill)
		if !busy {
			return res
		}
		txBusy.Inc()
		pause := time.Duration(rand.Int64N(int64(txBusyBackoff) << min(attempt, 4)))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			res.err = fmt.Errorf("names stayed locked by other transactions: %w", ctx.Err())
			return res
		}
	}
}

// prepareParts prepares the parts of shards (indexes into all) of
// transaction id concurrently, filling votes and errs.
func (sc *shardClient) prepareParts(ctx context.Context, id txn.ID, zone string, all []*Shard, which []int, co *Shard, names []string, parts map[*Shard]txn.Prepare, votes []txn.Vote, errs []error) {
	var wg sync.WaitGroup
	for _, i := range which {
		s := all[i]
		p := parts[s]
		p.Zone, p.Participants = zone, names
		p.Coordinator = txn.Coordinator{Shard: co.Name, APIs: co.APIs()}
		body, _ := json.Marshal(p)
		wg.Go(func() {
			rep, err := sc.do(ctx, s, http.MethodPost, txn.PreparePath(id), "", body, "application/json")
			switch {
			case err != nil:
				errs[i] = err
			case rep.status != http.StatusOK:
				errs[i] = rep.err(s)
			case json.Unmarshal(rep.body, &votes[i]) != nil:
				errs[i] = fmt.Errorf("shard %s: unreadable vote", s.Name)
			case votes[i].StaleMap != 0:
				f := &errFenced{shard: s.Name, epoch: votes[i].StaleMap, msg: votes[i].Error}
				noteFenced(ctx, f)
				errs[i] = f
			}
		})
	}
	wg.Wait()
}

// tryTx runs the transaction once with a new ID; busy is set when it was
// aborted because a part met a lock.
func (sc *shardClient) tryTx(ctx context.Context, zone string, shards []*Shard, co *Shard, names []string, parts map[*Shard]txn.Prepare, first []*Shard, fill func(context.Context, map[*Shard]txn.Prepare) error) (res txResult, busy bool) {
	id := txn.NewID()
	votes := make([]txn.Vote, len(shards))
	errs := make([]error, len(shards))
	var early, late []int
	for i, s := range shards {
		if slices.Contains(first, s) {
			early = append(early, i)
		} else {
			late = append(late, i)
		}
	}
	if len(early) > 0 {
		sc.prepareParts(ctx, id, zone, shards, early, co, names, parts, votes, errs)
		ok := true
		for _, i := range early {
			ok = ok && errs[i] == nil && votes[i].Yes
		}
		if ok && fill != nil {
			filled := maps.Clone(parts)
			if err := fill(ctx, filled); err != nil {
				sc.finishTx(ctx, id, shards, txn.Abort)
				txOutcomes.WithLabelValues("abort").Inc()
				return txResult{err: err}, false
			}
			parts = filled
		}
		if !ok {
			late = nil // not prepared: the abort below releases the early parts
		}
	}
	sc.prepareParts(ctx, id, zone, shards, late, co, names, parts, votes, errs)
	yes := true
	for i, s := range shards {
		switch {
		case !slices.Contains(early, i) && !slices.Contains(late, i):
			yes = false // not asked
		case errs[i] != nil:
			yes = false
			if res.failed == nil {
				res.failed, res.err = s, errs[i]
			}
		case votes[i].Busy:
			yes, busy = false, true
		case !votes[i].Yes:
			yes = false
			if res.failed == nil || res.err != nil {
				res.failed, res.vote, res.err = s, votes[i], nil
			}
		}
	}
	if busy && res.failed == nil {
		sc.finishTx(ctx, id, shards, txn.Abort)
		return res, true
	}
	busy = false
	outcome := txn.Abort
	if yes {
		outcome = txn.Commit
	}
	decided, err := sc.decideTx(ctx, co, id, outcome)
	if err != nil {
		if outcome == txn.Abort {
			// Nothing can commit without a yes from every part: the parts
			// that prepared abort on their own if this abort is lost.
			sc.finishTx(ctx, id, shards, txn.Abort)
			txOutcomes.WithLabelValues("abort").Inc()
			return res, false
		}
		txOutcomes.WithLabelValues("unknown").Inc()
		return txResult{err: fmt.Errorf("transaction %s: the coordinator %s did not record the decision (%v): the parts apply whatever it records, or abort", id, co.Name, err)}, false
	}
	if decided == txn.Abort {
		sc.finishTx(ctx, id, shards, txn.Abort)
		txOutcomes.WithLabelValues("abort").Inc()
		if yes {
			// A participant's recovery decided first: this router was slow
			// (a member it asked died). Nothing of it was written: run it
			// again under a new ID.
			return res, true
		}
		return res, false
	}
	res = txResult{committed: true, serial: map[*Shard]uint32{}}
	for i, f := range sc.finishTx(ctx, id, shards, txn.Commit) {
		if f == nil {
			res.late = append(res.late, shards[i])
			continue
		}
		res.serial[shards[i]] = f.Serial
	}
	txOutcomes.WithLabelValues("commit").Inc()
	return res, false
}

// decideTx asks coordinator co to record outcome for id and returns the
// outcome recorded.
func (sc *shardClient) decideTx(ctx context.Context, co *Shard, id txn.ID, outcome txn.Outcome) (txn.Outcome, error) {
	body, _ := json.Marshal(txn.Decide{Outcome: outcome})
	rep, err := sc.do(ctx, co, http.MethodPost, txn.DecidePath(id), "", body, "application/json")
	if err != nil {
		return "", err
	}
	if rep.status != http.StatusOK {
		return "", rep.err(co)
	}
	var d txn.Decision
	if json.Unmarshal(rep.body, &d) != nil || (d.Outcome != txn.Commit && d.Outcome != txn.Abort) {
		return "", fmt.Errorf("shard %s: unreadable decision", co.Name)
	}
	return d.Outcome, nil
}

// finishTx tells every shard the outcome of id, concurrently, and returns
// what each confirmed (nil: not confirmed; the shard finishes on its own).
// A commit is sent until confirmed or ctx ends: the client is answered once
// every part applied it, as far as possible.
func (sc *shardClient) finishTx(ctx context.Context, id txn.ID, shards []*Shard, outcome txn.Outcome) []*txn.Finished {
	out := make([]*txn.Finished, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() {
			for try := 0; ; try++ {
				rep, err := sc.do(ctx, s, http.MethodPost, txn.FinishPath(id, outcome), "", nil, "")
				if err == nil && rep.status == http.StatusOK {
					var f txn.Finished
					if json.Unmarshal(rep.body, &f) == nil {
						out[i] = &f
					}
					return
				}
				if err == nil && rep.status < 500 {
					log.Warningf("transaction %s: %s on shard %s: %v", id, outcome, s.Name, rep.err(s))
					return
				}
				if outcome == txn.Abort || ctx.Err() != nil {
					return
				}
				select {
				case <-time.After(50 * time.Millisecond << min(try, 4)):
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	return out
}
