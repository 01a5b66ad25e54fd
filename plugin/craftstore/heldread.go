package craftstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
)

// Reads past transactions (package internal/txn, "Atomic visibility"). A
// query about a name that a prepared transaction part holds, or that such a
// name can change (an ancestor, a descendant, a covering wildcard:
// replica.TxHolders), does not wait for the part's outcome: the member asks
// the transaction's coordinator for its decision, one round trip to a
// member of the coordinator's group, which reads it from a state confirmed
// current with its leader (GET /v1/txn/{id}, txStatus):
//
//   - committed or aborted: the member finishes the part itself, as a
//     participant's recovery does (one Raft entry, shared by the queries
//     that meet the part at once), and answers from the state after it;
//   - nothing decided: it answers from the state before the part. The read
//     comes before the commit, which the coordinator can only record after
//     the decision was read, and every part applies only after it: no
//     reader sees one part of the transaction and not another. A router
//     must not cache such an answer (the commit may come at any moment, and
//     the router learns of it from the commit's notice alone), so a routed
//     answer carries shardproto's held mark;
//   - the coordinator cannot say (its group has no quorum, or none of its
//     members answers in time): the query waits for the part's outcome as
//     before, and a router's query is answered Held (SERVFAIL, Not Ready)
//     after txn.RoutedWait so that the router asks again.

// errStillHeld: parts kept coming and going while a query read past them.
var errStillHeld = errors.New("transactions kept holding the name")

// heldReads finishes the parts that queries found decided, once each.
type heldReads struct {
	mu        sync.Mutex
	finishing map[txn.ID]chan struct{} // parts being finished → closed when done
}

// readHeld makes a query about qname in zone, while transactions hold
// names of the member, safe to answer: it reads past the parts that hold
// the name (readPast), or waits for their outcome when their coordinator
// cannot say, so that no reader sees part of a transaction (package
// internal/txn, "Atomic visibility"). A router's query waits less
// (txn.RoutedWait), and the router asks again. ok is false when the query
// must be answered Held; readPast says the answer reads past undecided
// parts (the held mark).
func (c *Craftstore) readHeld(ctx context.Context, rep *replica.Replica, zone, qname string, routed bool) (readPast, ok bool) {
	wait := txReadWait
	if routed {
		wait = txn.RoutedWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	rctx, rcancel := context.WithTimeout(wctx, txn.RoutedWait)
	readPast, finished, err := c.readPast(rctx, rep, c.leases.Load(), zone, qname)
	rcancel()
	if err != nil {
		heldReadCount.WithLabelValues(c.member(), "waited").Inc()
		if err := rep.TxWait(wctx, zone, qname); err != nil {
			heldReadCount.WithLabelValues(c.member(), "held").Inc()
			return false, false
		}
		return false, true
	}
	switch {
	case readPast:
		heldReadCount.WithLabelValues(c.member(), "before").Inc()
	case finished:
		heldReadCount.WithLabelValues(c.member(), "after").Inc()
	}
	return readPast, true
}

// readPast resolves the prepared parts that hold qname in zone, as above,
// within ctx. It returns whether the answer reads past parts whose outcome
// is not decided (the held mark) and whether it finished decided parts
// first, or an error when the query must wait for them instead.
func (c *Craftstore) readPast(ctx context.Context, rep *replica.Replica, ls *leases, zone, qname string) (undecided, finished bool, err error) {
	for range 3 {
		ids, _ := rep.TxHolders(zone, qname)
		if len(ids) == 0 {
			return undecided, finished, nil
		}
		undecided = false
		round := false
		for _, id := range ids {
			o, ok, err := decision(ctx, rep, id, c.cfg.token)
			switch {
			case err != nil:
				return false, false, err
			case !ok: // finished meanwhile
				round = true
			case o == "":
				undecided = true
			default:
				if err := c.held.finish(ctx, rep, ls, id, o, c.cfg.timeout); err != nil {
					return false, false, err
				}
				round, finished = true, true
			}
		}
		if !round {
			return undecided, finished, nil
		}
	}
	return false, false, errStillHeld
}

// finish finishes transaction id's part with outcome o, or waits for the
// query that is doing it already, until ctx ends.
func (h *heldReads) finish(ctx context.Context, rep *replica.Replica, ls *leases, id txn.ID, o txn.Outcome, timeout time.Duration) error {
	h.mu.Lock()
	if h.finishing == nil {
		h.finishing = map[txn.ID]chan struct{}{}
	}
	done, ok := h.finishing[id]
	if !ok {
		done = make(chan struct{})
		h.finishing[id] = done
		go func() {
			// Not cut short by the first query's end: the others wait for it.
			fctx, cancel := context.WithTimeout(context.Background(), timeout)
			if _, err := finishTx(fctx, rep, ls, id, o); err != nil {
				log.Warningf("transaction %s: %s its part for a reader: %v", id, o, err)
			}
			cancel()
			h.mu.Lock()
			delete(h.finishing, id)
			h.mu.Unlock()
			close(done)
		}()
	}
	h.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decision reads the decision for transaction id from the members of its
// coordinator's group, the first that answers (ok false: the part is no
// longer prepared here).
func decision(ctx context.Context, rep *replica.Replica, id txn.ID, token string) (o txn.Outcome, ok bool, err error) {
	raw, ok := rep.TxCoordinator(id)
	if !ok {
		return "", false, nil
	}
	var meta txn.Meta
	if err := json.Unmarshal(raw, &meta); err != nil || len(meta.Coordinator.APIs) == 0 {
		return "", true, fmt.Errorf("transaction %s: no coordinator address", id)
	}
	// Every member of the coordinator's group at once: the first answer
	// will do (each is a read of the group's current state), and a member
	// that is down or cut off costs no time.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		o   txn.Outcome
		err error
	}
	answers := make(chan answer, len(meta.Coordinator.APIs))
	for _, base := range meta.Coordinator.APIs {
		go func() {
			o, err := getDecision(actx, base+txn.StatusPath(id), token)
			answers <- answer{o, err}
		}()
	}
	var errs []error
	for range meta.Coordinator.APIs {
		a := <-answers
		if a.err == nil {
			return a.o, true, nil
		}
		errs = append(errs, a.err)
	}
	return "", true, fmt.Errorf("transaction %s: coordinator %s: %w", id, meta.Coordinator.Shard, errors.Join(errs...))
}

// coordinatorClient asks coordinators for decisions: connections kept
// between calls, no proxy (members reach each other directly).
var coordinatorClient = func() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: tr}
}()

// getDecision reads the decision at url (a coordinator member's
// txn.StatusPath): "" while none.
func getDecision(ctx context.Context, url, token string) (txn.Outcome, error) {
	return coordinatorCall(ctx, http.MethodGet, url, token, nil)
}

// coordinatorCall sends a decision's read (GET, no body) or a decision
// (POST, a txn.Decide) to url on a coordinator member and returns the
// outcome its answer carries: commit, abort, or "" (none recorded).
func coordinatorCall(ctx context.Context, method, url, token string, body []byte) (txn.Outcome, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := coordinatorClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var d txn.Decision
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&d) != nil {
		return "", fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	if d.Outcome != "" && d.Outcome != txn.Commit && d.Outcome != txn.Abort {
		return "", fmt.Errorf("%s: outcome %q", url, d.Outcome)
	}
	return d.Outcome, nil
}

// txStatus answers a decision's read (GET /v1/txn/{id}) on a coordinator
// member: the outcome its group recorded, "" while none. A decision this
// member applied is final (the first one recorded stands), so it answers
// at once, even while its group elects a leader; "none" is answered only
// once the member confirmed with its leader that its state is current
// (replica.Fresh): a decision recorded before the read began is in it.
func (a *apiServer) txStatus(w http.ResponseWriter, r *http.Request) {
	id, err := txID(r)
	if err != nil {
		fail(w, err)
		return
	}
	if o, err := a.rep.TxDecided(id); err == nil && o != "" {
		httpapi.WriteJSON(w, http.StatusOK, txn.Decision{Outcome: o})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.rep.Fresh(ctx); err != nil {
		fail(w, err)
		return
	}
	o, err := a.rep.TxDecided(id)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, txn.Decision{Outcome: o})
}
