package craftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// A member's side of transactions that span shards (package internal/txn):
// the routers prepare, decide and finish them through these paths, and the
// member finishes the parts a router left prepared (resolvePrepared).

func txID(r *http.Request) (txn.ID, error) {
	id, err := txn.ParseID(r.PathValue("id"))
	if err != nil {
		return id, zoneapi.BadRequest("%v", err)
	}
	return id, nil
}

// txPrepare evaluates and locks this shard's part of a transaction. A part
// that fails is a no vote (200 with the reason); a member that cannot
// decide (no quorum) answers 503 like any write.
func (a *apiServer) txPrepare(w http.ResponseWriter, r *http.Request) {
	id, err := txID(r)
	if err != nil {
		fail(w, err)
		return
	}
	var p txn.Prepare
	if err := decodeBody(w, r, &p); err != nil {
		fail(w, err)
		return
	}
	meta, _ := json.Marshal(txn.Meta{Coordinator: p.Coordinator, Participants: p.Participants})
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if p.Map != nil {
		if p.Zone != "" || p.Change != nil || p.Update != nil || p.Keys != nil {
			fail(w, zoneapi.BadRequest("a shard map's part holds the map alone"))
			return
		}
		moves, err := a.parseMoves(p.Moves)
		if err != nil {
			fail(w, err)
			return
		}
		m, err := json.Marshal(p.Map)
		if err == nil {
			mp := replica.MapPart{Map: m, Shard: p.Shard, Hold: p.Hold, Moves: moves, Drop: p.Drop}
			for _, im := range p.Imports {
				mp.Imports = append(mp.Imports, replica.Staged{Zone: dnsname.Lower(dns.Fqdn(im.Zone)), Import: im.Import})
			}
			err = a.rep.TxPrepareMap(ctx, id, mp, meta)
		}
		v := vote(dns.RcodeSuccess, err)
		a.staleVote(&v, err)
		if v.Yes {
			// The names moved here are locked from the prepare's index
			// on: the routers must ask members that applied it, or a
			// member behind it would answer without them while the
			// shard handing them over previews their deletion.
			for _, mv := range moves {
				a.lockNotice(r.Context(), mv.Zone, mv.Names())
			}
		}
		httpapi.WriteJSON(w, http.StatusOK, v)
		return
	}
	origin := dns.CanonicalName(p.Zone)
	if a.rep.Zone(origin) == nil {
		fail(w, replica.Errorf(replica.ErrNotFound, "zone %q not found", origin))
		return
	}
	switch {
	case p.Keys != nil && p.Change == nil && p.Update == nil:
		if _, err := dnssec.ParseKeySet(p.Keys.Set); err != nil {
			fail(w, zoneapi.BadRequest("%v", err))
			return
		}
		err := a.rep.TxPrepareKeys(ctx, id, origin, p.Keys.Set, p.Keys.Absent, meta)
		v := vote(dns.RcodeSuccess, err)
		a.staleVote(&v, err)
		httpapi.WriteJSON(w, http.StatusOK, v)
	case p.Change != nil && p.Update == nil && p.Keys == nil:
		add, del, names, err := a.parseChange(origin, *p.Change)
		if err == nil {
			err = a.rep.TxPrepareChange(ctx, id, origin, add, del, meta)
		}
		v := vote(dns.RcodeSuccess, err)
		a.staleVote(&v, err)
		if v.Yes {
			a.lockNotice(r.Context(), origin, names)
		}
		httpapi.WriteJSON(w, http.StatusOK, v)
	case p.Update != nil && p.Change == nil && p.Keys == nil:
		m := new(dns.Msg)
		if err := m.Unpack(p.Update); err != nil {
			fail(w, zoneapi.BadRequest("update: %v", err))
			return
		}
		if a.checkUpdate == nil {
			fail(w, zoneapi.Errorf(http.StatusForbidden, "updates are not enabled on this member"))
			return
		}
		if rcode, _, why := a.checkUpdate(origin, dns.CanonicalName(p.Key), m.Answer, m.Ns); rcode != dns.RcodeSuccess {
			httpapi.WriteJSON(w, http.StatusOK, txn.Vote{Rcode: rcode, Error: why})
			return
		}
		rcode, err := a.rep.TxPrepareUpdate(ctx, id, origin, m.Answer, m.Ns, meta)
		v := vote(rcode, err)
		a.staleVote(&v, err)
		if v.Yes {
			names := make([]string, 0, len(m.Answer)+len(m.Ns))
			for _, rr := range append(m.Answer[:len(m.Answer):len(m.Answer)], m.Ns...) {
				names = append(names, rr.Header().Name)
			}
			a.lockNotice(r.Context(), origin, names)
		}
		httpapi.WriteJSON(w, http.StatusOK, v)
	default:
		fail(w, zoneapi.BadRequest("a prepare holds an update, a change or a key set"))
	}
}

// parseMoves reads the moves of a map part: one record change per zone
// this member holds, each within max_change_records.
func (a *apiServer) parseMoves(in []txn.Move) ([]replica.Move, error) {
	seen := map[string]bool{}
	var out []replica.Move
	for i, mv := range in {
		origin := dns.CanonicalName(mv.Zone)
		switch {
		case mv.Zone == "":
			return nil, zoneapi.BadRequest("moves[%d]: no zone", i)
		case seen[origin]:
			return nil, zoneapi.BadRequest("moves[%d]: zone %q moves twice: one change per zone", i, origin)
		case a.rep.Zone(origin) == nil:
			return nil, replica.Errorf(replica.ErrNotFound, "moves[%d]: zone %q not found", i, origin)
		}
		seen[origin] = true
		add, del, _, err := a.parseChange(origin, mv.Change)
		if err != nil {
			return nil, fmt.Errorf("moves[%d] (zone %q): %w", i, origin, err)
		}
		out = append(out, replica.Move{Zone: origin, Add: add, Del: del})
	}
	return out, nil
}

// shardMap answers GET /v1/map: the shard map this member applied last,
// read from a state confirmed current with its leader when it can be
// ("confirmed"), else its own (a router keeps the highest epoch it learns
// of); 404 before the first.
func (a *apiServer) shardMap(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	confirmed := a.rep.Fresh(ctx) == nil
	m := a.rep.ShardMap()
	if m == nil {
		fail(w, replica.Errorf(replica.ErrNotFound, "no shard map yet: a router seeds epoch 1 from its Corefile"))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, shardmap.Answer{Map: m, Confirmed: confirmed})
}

// lockNotice tells the routers, before the part's yes vote, that the names
// of a prepared part are about to change: they drop what their negative
// caches hold for them, so that while the part waits for its commit no
// router answers for them without asking this shard, where queries wait
// for the outcome (atomic visibility). The commit notifies them again.
func (a *apiServer) lockNotice(ctx context.Context, origin string, names []string) {
	noticeChange(ctx, a.leases, a.rep, origin, shardproto.Records, names...)
}

// vote is the answer to a prepare that got rcode and err from the replica.
func vote(rcode int, err error) txn.Vote {
	switch {
	case err == nil && rcode == dns.RcodeSuccess:
		return txn.Vote{Yes: true}
	case err == nil:
		return txn.Vote{Rcode: rcode, Error: "prerequisite failed: " + dns.RcodeToString[rcode]}
	case errors.Is(err, replica.ErrBusy):
		return txn.Vote{Busy: true, Error: err.Error()}
	}
	v := txn.Vote{Error: err.Error(), Status: httpStatus(err)}
	if rcode != dns.RcodeSuccess {
		v.Rcode = rcode
	} else {
		v.Rcode, _ = updateFailure(err)
	}
	return v
}

// txDecide records a decision on a coordinator member: the first one
// stands and comes back.
func (a *apiServer) txDecide(w http.ResponseWriter, r *http.Request) {
	id, err := txID(r)
	if err != nil {
		fail(w, err)
		return
	}
	var d txn.Decide
	if err := decodeBody(w, r, &d); err != nil {
		fail(w, err)
		return
	}
	if d.Outcome != txn.Commit && d.Outcome != txn.Abort {
		fail(w, zoneapi.BadRequest("outcome must be %q or %q", txn.Commit, txn.Abort))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	o, err := a.rep.TxDecide(ctx, id, d.Outcome)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, txn.Decision{Outcome: o})
}

// txFinish commits or aborts this shard's part (POST .../commit, .../abort).
func (a *apiServer) txFinish(w http.ResponseWriter, r *http.Request) {
	id, err := txID(r)
	if err != nil {
		fail(w, err)
		return
	}
	outcome := txn.Outcome(r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:])
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.timeout)
	defer cancel()
	f, err := finishTx(ctx, a.rep, a.leases, id, outcome)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, f)
}

// finishTx applies outcome to the part of transaction id on this shard
// and, for a commit, tells the routers of the change before it returns.
func finishTx(ctx context.Context, rep *replica.Replica, ls *leases, id txn.ID, outcome txn.Outcome) (txn.Finished, error) {
	if outcome == txn.Abort {
		return txn.Finished{Outcome: txn.Abort}, rep.TxAbort(ctx, id)
	}
	zone, names, ok := rep.TxPart(id)
	if ok {
		ctx = lateNotice(ctx, ls, rep, zone, shardproto.Records, names...)
	}
	serial, err := rep.TxCommit(ctx, id)
	if err != nil {
		return txn.Finished{}, err
	}
	if ok {
		noticeChange(ctx, ls, rep, zone, shardproto.Records, names...)
	}
	return txn.Finished{Outcome: txn.Commit, Serial: serial}, nil
}

// resolvePrepared finishes the transaction parts prepared on this member
// longer than txn.ResolveAfter ago: their router died or lost its
// messages. It asks the coordinator for the outcome, deciding abort if
// nothing was decided, then applies it. It runs on the leader.
func resolvePrepared(rep *replica.Replica, ls *leases, token string, timeout time.Duration) {
	parts, err := rep.TxPrepared(time.Now().Add(-txn.ResolveAfter))
	if err != nil {
		log.Warningf("transactions: %v", err)
		return
	}
	for _, p := range parts {
		var meta txn.Meta
		if err := json.Unmarshal(p.Meta, &meta); err != nil {
			log.Errorf("transaction %s: unreadable coordinator (%v): aborting its part", p.ID, err)
			meta = txn.Meta{}
		}
		outcome, err := askCoordinator(meta.Coordinator, p.ID, token, timeout)
		if err != nil {
			log.Warningf("transaction %s in %s prepared for %v: coordinator %s: %v", p.ID, p.Zone, time.Since(p.At).Round(time.Millisecond), meta.Coordinator.Shard, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, err = finishTx(ctx, rep, ls, p.ID, outcome)
		cancel()
		if err != nil {
			log.Warningf("transaction %s: %s its part: %v", p.ID, outcome, err)
			continue
		}
		log.Infof("transaction %s in %s: its router did not finish it; %s from coordinator %s", p.ID, p.Zone, outcome, meta.Coordinator.Shard)
	}
}

// askCoordinator asks a member of coordinator for the outcome of id,
// deciding abort if none was decided.
func askCoordinator(co txn.Coordinator, id txn.ID, token string, timeout time.Duration) (txn.Outcome, error) {
	if len(co.APIs) == 0 {
		return "", fmt.Errorf("no coordinator address")
	}
	body, _ := json.Marshal(txn.Decide{Outcome: txn.Abort})
	var errs []error
	for _, base := range co.APIs {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		o, err := postDecide(ctx, base+txn.DecidePath(id), token, body)
		cancel()
		if err == nil {
			return o, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

func postDecide(ctx context.Context, url, token string, body []byte) (txn.Outcome, error) {
	d, err := coordinatorCall(ctx, http.MethodPost, url, token, body)
	if err == nil && d.Outcome == "" {
		return "", fmt.Errorf("%s: no outcome", url)
	}
	return d.Outcome, err
}
