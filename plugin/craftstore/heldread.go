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
	"github.com/craftdns/craftdns/plugin/craftstore/zone"
)

// Reads past transactions (package internal/txn, "Atomic visibility"). A
// query about a name that a prepared transaction part holds, or that such a
// name can change (an ancestor, a descendant, a covering wildcard:
// replica.TxHolders), does not wait for the part's outcome: the member asks
// the transaction's coordinator for its decision, one round trip to the
// members of the coordinator's group (GET /v1/txn/{id}, txStatus): each
// answers from its own state, and a decision one applied, or what a
// majority says (none in their logs, or the same decision logged in the
// term they are in: txn.FromMajority), will do, so the read needs no
// leader there; only when no majority can tell (a decision on some logs
// only, a change of members) does it read the decision again from a state
// a member confirmed with its leader:
//
//   - committed: the member answers from the state after the part, a
//     preview of its commit over the member's state (written nowhere:
//     replica.TxPreview), marked for routers as below, and finishes the
//     part meanwhile, as a participant's recovery does (one Raft entry,
//     shared by the queries that meet the part at once): the answer waits
//     neither for that entry nor for a leader of the member's group;
//   - aborted: it answers at once from the state before the part, which is
//     the state after it, and finishes the part meanwhile;
//   - nothing decided: it answers from the state before the part. The read
//     comes before the commit, which the coordinator can only record after
//     the decision was read, and every part applies only after it: no
//     reader sees one part of the transaction and not another. A router
//     must not cache such an answer (the commit may come at any moment, and
//     the router learns of it from the commit's notice alone), so a routed
//     answer carries shardproto's held mark;
//   - the coordinator cannot say (no majority of its group answers in
//     time, and no member confirmed with a leader): the query waits for the
//     part's outcome as
//     before, and a router's query is answered Held (SERVFAIL, Not Ready)
//     after txn.RoutedWait so that the router asks again.

// errStillHeld: parts kept coming and going while a query read past them.
var errStillHeld = errors.New("transactions kept holding the name")

// heldReads finishes the parts that queries found decided, once each.
type heldReads struct {
	mu        sync.Mutex
	finishing map[txn.ID]bool // parts being finished
	// decided keeps the decisions read for parts still prepared here (a
	// decision is final), with a committed part's preview (its names stay
	// locked until it is finished), so that the queries that meet a part
	// until it is applied ask its coordinator, and preview it, once;
	// dropped when the part is finished, and all of it past maxDecided.
	decided map[txn.ID]decidedPart
}

// decidedPart is a decision read, and a committed part's preview of
// each zone it changes (a shard map's part moves names of several).
type decidedPart struct {
	o       txn.Outcome
	preview map[string][]zone.NameRecords // a zone's: nil until made
}

// maxDecided bounds heldReads.decided (parts another way finished, as a
// participant's recovery, are not dropped one by one).
const maxDecided = 4096

// known returns what was read of transaction id's part, if anything.
func (h *heldReads) known(id txn.ID) (decidedPart, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.decided[id]
	return d, ok
}

// remember keeps d for transaction id's part.
func (h *heldReads) remember(id txn.ID, d decidedPart) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.decided == nil || len(h.decided) >= maxDecided {
		h.decided = map[txn.ID]decidedPart{}
	}
	h.decided[id] = d
}

// rememberPreview keeps the preview of zone origin for transaction id's part,
// committed (outcome o), beside what was read of it.
func (h *heldReads) rememberPreview(id txn.ID, o txn.Outcome, origin string, names []zone.NameRecords) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.decided[id]
	d.o = o
	if d.preview == nil {
		d.preview = map[string][]zone.NameRecords{}
	}
	d.preview[origin] = names
	if h.decided == nil || len(h.decided) >= maxDecided {
		h.decided = map[txn.ID]decidedPart{}
	}
	h.decided[id] = d
}

// heldRead is how a query read past the parts that held its name.
type heldRead struct {
	undecided bool // past parts whose outcome is not decided: the held mark
	decided   bool // past parts whose outcome is decided
	// preview is what committed parts not applied yet change: the answer
	// comes from the zone with it (zone.Zone.With).
	preview []zone.NameRecords
}

// readHeld makes a query about qname in zone, while transactions hold
// names of the member, safe to answer: it reads past the parts that hold
// the name (readPast), or waits for their outcome when their coordinator
// cannot say, so that no reader sees part of a transaction (package
// internal/txn, "Atomic visibility"). A router's query waits less
// (txn.RoutedWait), and the router asks again. ok is false when the query
// must be answered Held.
func (c *Craftstore) readHeld(ctx context.Context, rep *replica.Replica, zone, qname string, routed bool) (hr heldRead, ok bool) {
	wait := txReadWait
	if routed {
		wait = txn.RoutedWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	rctx, rcancel := context.WithTimeout(wctx, txn.RoutedWait)
	hr, err := c.readPast(rctx, rep, c.leases.Load(), zone, qname)
	rcancel()
	if err != nil {
		heldReadCount.WithLabelValues(c.member(), "waited").Inc()
		if err := rep.TxWait(wctx, zone, qname); err != nil {
			heldReadCount.WithLabelValues(c.member(), "held").Inc()
			return heldRead{}, false
		}
		return heldRead{}, true
	}
	switch {
	case hr.undecided:
		heldReadCount.WithLabelValues(c.member(), "before").Inc()
	case hr.decided:
		heldReadCount.WithLabelValues(c.member(), "after").Inc()
	}
	return hr, true
}

// readPast resolves the prepared parts that hold qname in zone, as above,
// within ctx, or returns an error when the query must wait for them
// instead. A decided part is finished in the background: an aborted one
// changes nothing, a committed one is previewed (replica.TxPreview), so the
// answer does not wait for the member's group to apply it.
func (c *Craftstore) readPast(ctx context.Context, rep *replica.Replica, ls *leases, zone, qname string) (hr heldRead, err error) {
	seen := map[txn.ID]bool{} // decided parts read past (or previewed)
	for range 3 {
		ids, _ := rep.TxHolders(zone, qname)
		hr.undecided = false
		again := false
		for _, id := range ids {
			if seen[id] {
				continue
			}
			d, ok := c.held.known(id)
			o := d.o
			var err error
			if !ok {
				if o, ok, err = decision(ctx, rep, id, c.cfg.token); err == nil && ok && o != "" {
					c.held.remember(id, decidedPart{o: o})
				}
			}
			switch {
			case err != nil:
				return heldRead{}, err
			case !ok: // finished meanwhile
				again = true
			case o == "":
				hr.undecided = true
			case o == txn.Abort:
				seen[id], hr.decided = true, true
				c.held.start(rep, ls, id, o, c.cfg.timeout)
			default:
				c.held.start(rep, ls, id, o, c.cfg.timeout)
				names := d.preview[zone]
				if names == nil {
					if names, err = rep.TxPreview(id, zone); err == nil && names != nil {
						c.held.rememberPreview(id, o, zone, names)
					}
				}
				switch {
				case err != nil:
					return heldRead{}, fmt.Errorf("transaction %s: preview: %w", id, err)
				case names == nil: // applied meanwhile
					again = true
				default:
					seen[id], hr.decided = true, true
					hr.preview = append(hr.preview, names...)
				}
			}
		}
		if !again {
			return hr, nil
		}
	}
	return heldRead{}, errStillHeld
}

// start starts finishing transaction id's part with outcome o, in the
// background, unless a query did already.
func (h *heldReads) start(rep *replica.Replica, ls *leases, id txn.ID, o txn.Outcome, timeout time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finishing == nil {
		h.finishing = map[txn.ID]bool{}
	}
	if !h.finishing[id] {
		h.finishing[id] = true
		go func() {
			// Not cut short by the query that started it.
			fctx, cancel := context.WithTimeout(context.Background(), timeout)
			if _, err := finishTx(fctx, rep, ls, id, o); err != nil {
				log.Warningf("transaction %s: %s its part for a reader: %v", id, o, err)
			}
			cancel()
			h.mu.Lock()
			delete(h.finishing, id)
			delete(h.decided, id)
			h.mu.Unlock()
		}()
	}
}

// decision reads the decision for transaction id from the members of its
// coordinator's group (ok false: the part is no longer prepared here):
// from their own states first, then, when no majority of them could vouch
// for "none", from a state confirmed with their leader.
func decision(ctx context.Context, rep *replica.Replica, id txn.ID, token string) (o txn.Outcome, ok bool, err error) {
	raw, ok := rep.TxCoordinator(id)
	if !ok {
		return "", false, nil
	}
	var meta txn.Meta
	if err := json.Unmarshal(raw, &meta); err != nil || len(meta.Coordinator.APIs) == 0 {
		return "", true, fmt.Errorf("transaction %s: no coordinator address", id)
	}
	o, err = readDecision(ctx, meta.Coordinator.APIs, id, token, true)
	if err != nil && ctx.Err() == nil {
		o, err = readDecision(ctx, meta.Coordinator.APIs, id, token, false)
	}
	if err != nil {
		return "", true, fmt.Errorf("transaction %s: coordinator %s: %w", id, meta.Coordinator.Shard, err)
	}
	return o, true, nil
}

// errNoMajority: the members' own states that answered do not show that
// nothing was decided.
var errNoMajority = errors.New("no majority of its members can vouch that nothing was decided")

// readDecision asks every member at apis at once for transaction id's
// decision: local, each from its own state (txn.LocalRead: a decision one
// applied, or what a majority says, txn.FromMajority); else confirmed
// with their leader, when the first answer will do. A member down or cut
// off costs no time.
func readDecision(ctx context.Context, apis []string, id txn.ID, token string, local bool) (txn.Outcome, error) {
	path := txn.StatusPath(id)
	if local {
		path += "?" + txn.LocalRead
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		d   txn.Decision
		err error
	}
	answers := make(chan answer, len(apis))
	for _, base := range apis {
		go func() {
			d, err := coordinatorCall(actx, http.MethodGet, base+path, token, nil)
			answers <- answer{d, err}
		}()
	}
	var (
		errs   []error
		locals []txn.Local
	)
	for range apis {
		a := <-answers
		switch {
		case a.err != nil:
			errs = append(errs, a.err)
		case a.d.Outcome != "" || a.d.Local == nil:
			return a.d.Outcome, nil // applied (final), or a confirmed read
		default:
			locals = append(locals, *a.d.Local)
			if o, ok := txn.FromMajority(locals); ok {
				return o, nil
			}
		}
	}
	if len(errs) == 0 {
		return "", errNoMajority
	}
	return "", errors.Join(errs...)
}

// coordinatorClient asks coordinators for decisions: connections kept
// between calls, no proxy (members reach each other directly).
var coordinatorClient = func() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: tr}
}()

// coordinatorCall sends a decision's read (GET, no body) or a decision
// (POST, a txn.Decide) to url on a coordinator member and returns its
// answer: the outcome commit, abort, or "" (none recorded).
func coordinatorCall(ctx context.Context, method, url, token string, body []byte) (txn.Decision, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return txn.Decision{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := coordinatorClient.Do(req)
	if err != nil {
		return txn.Decision{}, err
	}
	defer resp.Body.Close()
	var d txn.Decision
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&d) != nil {
		return txn.Decision{}, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	if d.Outcome != "" && d.Outcome != txn.Commit && d.Outcome != txn.Abort {
		return txn.Decision{}, fmt.Errorf("%s: outcome %q", url, d.Outcome)
	}
	return d, nil
}

// txStatus answers a decision's read (GET /v1/txn/{id}) on a coordinator
// member: the outcome its group recorded, "" while none. A decision this
// member applied is final (the first one recorded stands), so it answers
// at once, even while its group elects a leader. A local read
// (txn.LocalRead) is answered at once from the member's own state
// (replica.TxLocal); otherwise "none" is answered only once the member
// confirmed with its leader that its state is current (replica.Fresh): a
// decision recorded before the read began is in it.
func (a *apiServer) txStatus(w http.ResponseWriter, r *http.Request) {
	id, err := txID(r)
	if err != nil {
		fail(w, err)
		return
	}
	if r.URL.RawQuery == txn.LocalRead {
		l, err := a.rep.TxLocal(id)
		switch {
		case err != nil:
			fail(w, err)
		case l.Outcome != "":
			httpapi.WriteJSON(w, http.StatusOK, txn.Decision{Outcome: l.Outcome})
		default:
			httpapi.WriteJSON(w, http.StatusOK, txn.Decision{Local: &txn.Local{
				Member: a.rep.ID(), Voters: l.Voters, Term: l.Term, Logged: l.Logged, Unsure: l.Unsure}})
		}
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
