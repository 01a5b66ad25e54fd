package craftroute

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// The policy paths of the API (internal/policy) through the router. A
// name's policy lives with its name: the request goes to the shard that
// owns the name (key mode "name") or its zone (key mode "zone"), whose
// member checks and writes it. A region table lives at the apex, which in
// key mode "name" every shard holds: a new table is written to every
// shard in one transaction.

func (a *apiServer) registerPolicies(mux *http.ServeMux) {
	mux.HandleFunc("PUT "+zoneapi.PolicyPattern, httpapi.Body(httpapi.JSON, a.policy))
	mux.HandleFunc("GET "+zoneapi.PolicyPattern, a.policy)
	mux.HandleFunc("DELETE "+zoneapi.PolicyPattern, a.policy)
	mux.HandleFunc("PUT "+zoneapi.RegionsPattern, httpapi.Body(httpapi.JSON, a.putRegions))
	mux.HandleFunc("GET "+zoneapi.RegionsPattern, a.getRegions)
}

func policyPath(origin, name string, t uint16) string {
	return zonePath(origin) + "/policies/" + url.PathEscape(name) + "/" + dns.TypeToString[t]
}

func regionsPath(origin string) string { return zonePath(origin) + "/regions" }

// policy sends a policy request to the shard of its name.
func (a *apiServer) policy(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	name, t, err := zoneapi.PolicyParams(r, origin)
	if err != nil {
		fail(w, err)
		return
	}
	var body []byte
	if r.Method == http.MethodPut {
		if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, zoneapi.MaxRecordsBody)); err != nil {
			fail(w, err)
			return
		}
	}
	a.routed(w, r, func(ctx context.Context, w http.ResponseWriter) {
		if a.c.keyMode() != keyZone && name == origin && r.Method != http.MethodGet {
			a.apexPolicy(ctx, w, r.Method, origin, t, body)
			return
		}
		s := a.c.shardFor(name)
		if a.c.keyMode() == keyZone {
			s = a.c.zoneShard(origin)
		}
		a.proxy(ctx, w, s, r.Method, policyPath(origin, name, t), "", body, httpapi.JSON)
	})
}

// routed runs send, which routes one request by the router's map, again
// with a newer map when a shard fenced it (fence.go), as record changes
// are.
func (a *apiServer) routed(w http.ResponseWriter, r *http.Request, send func(context.Context, http.ResponseWriter)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), shardCallTimeout)
	defer cancel()
	for try := 0; ; try++ {
		mctx, mark := withFenceMark(a.c.withRouteEpoch(ctx))
		rec := newAPIRecorder()
		send(mctx, rec)
		if f := mark.fenced(); try < fenceRetries && f != nil && a.c.refreshMap(ctx, f) {
			continue
		}
		rec.copyTo(w)
		return
	}
}

func (a *apiServer) putRegions(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, zoneapi.MaxRecordsBody))
	if err != nil {
		fail(w, err)
		return
	}
	rr, err := policy.ParseRegions(origin, body)
	if err != nil {
		fail(w, zoneapi.BadRequest("%v", err))
		return
	}
	a.routed(w, r, func(ctx context.Context, w http.ResponseWriter) {
		shards := a.c.shards()
		if a.c.keyMode() == keyZone || len(shards) == 1 {
			s := shards[0]
			if a.c.keyMode() == keyZone {
				s = a.c.zoneShard(origin)
			}
			a.proxy(ctx, w, s, http.MethodPut, regionsPath(origin), "", body, httpapi.JSON)
			return
		}
		// Every shard holds the apex: one transaction replaces the table
		// on all of them.
		del, _ := json.Marshal(map[string]string{"name": origin, "type": fmt.Sprintf("TYPE%d", policy.TypeRegions)})
		parts := map[*Shard]*zoneapi.Change{}
		for _, s := range shards {
			parts[s] = &zoneapi.Change{Add: []string{rr.String()}, Delete: []json.RawMessage{del}}
		}
		status, rep := a.applyTx(ctx, origin, parts)
		httpapi.WriteJSON(w, status, rep)
	})
}

func (a *apiServer) getRegions(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	s := a.c.shardFor(origin)
	if a.c.keyMode() == keyZone {
		s = a.c.zoneShard(origin)
	}
	a.proxy(r.Context(), w, s, http.MethodGet, regionsPath(origin), "", nil, "")
}

// apexPolicy writes (PUT, with body) or deletes the policy for t at the
// apex of zone origin in key mode "name", where every shard holds the apex:
// the apex's policy RRset, read from one shard, is written anew on every
// shard in one transaction, with the policy's records. Two such writes at
// once for different types of one apex: the last one's RRset stands.
func (a *apiServer) apexPolicy(ctx context.Context, w http.ResponseWriter, method, origin string, t uint16, body []byte) {
	s := a.c.shardFor(origin)
	policies, err := a.apexRecords(ctx, s, origin, policy.TypePolicy)
	if err != nil {
		fail(w, err)
		return
	}
	old := policy.Find(policies, t)
	change := &zoneapi.Change{}
	deleteType := func(rt uint16) {
		d, _ := json.Marshal(map[string]string{"name": origin, "type": fmt.Sprintf("TYPE%d", rt)})
		change.Delete = append(change.Delete, d)
	}
	deleteType(policy.TypePolicy)
	for _, rr := range policies {
		if rr != old {
			change.Add = append(change.Add, rr.String())
		}
	}
	health, err := a.apexRecords(ctx, s, origin, policy.TypeHealth)
	if err != nil {
		fail(w, err)
		return
	}
	if h := policy.FindHealth(health, t); h != nil {
		d, _ := json.Marshal(h.String())
		change.Delete = append(change.Delete, d)
	}
	switch method {
	case http.MethodDelete:
		if old == nil {
			fail(w, zoneapi.Errorf(http.StatusNotFound, "%s has no %s policy", origin, dns.TypeToString[t]))
			return
		}
	case http.MethodPut:
		p := new(policy.Policy)
		if err := policy.Decode(body, p); err != nil {
			fail(w, zoneapi.BadRequest("%v", err))
			return
		}
		var regions *policy.Regions
		if rrs, err := a.apexRecords(ctx, s, origin, policy.TypeRegions); err != nil {
			fail(w, err)
			return
		} else if len(rrs) > 0 {
			regions, _ = policy.ReadRegions(rrs[0])
		}
		if err := p.Validate(t, regions); err != nil {
			fail(w, zoneapi.BadRequest("%v", err))
			return
		}
		if p.Check != nil {
			// Each shard's leader would commit the health of its own copy
			// of the apex, which a member refuses for names every shard
			// holds.
			fail(w, zoneapi.BadRequest("a policy at the apex of a zone split by name cannot have a health check (every shard holds the apex); use status up or down, or a name below the apex"))
			return
		}
		prr, err := policy.Record(origin, t, p)
		if err != nil {
			fail(w, zoneapi.BadRequest("%v", err))
			return
		}
		deleteType(t)
		change.Add = append(change.Add, prr.String())
		for _, rr := range p.Defaults(origin, t) {
			change.Add = append(change.Add, rr.String())
		}
	}
	parts := map[*Shard]*zoneapi.Change{}
	for _, sh := range a.c.shards() {
		parts[sh] = change
	}
	status, rep := a.applyTx(ctx, origin, parts)
	httpapi.WriteJSON(w, status, rep)
}

// apexRecords reads the apex's records of type t from a member of shard s.
func (a *apiServer) apexRecords(ctx context.Context, s *Shard, origin string, t uint16) ([]dns.RR, error) {
	q := url.Values{"name": {origin}, "type": {fmt.Sprintf("TYPE%d", t)}}
	rep, err := a.do(ctx, s, http.MethodGet, recordsPath(origin), q.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	if rep.status != http.StatusOK {
		return nil, rep.err(s)
	}
	var recs zoneapi.Records
	if err := json.Unmarshal(rep.body, &recs); err != nil {
		return nil, zoneapi.Errorf(http.StatusBadGateway, "shard %s: records: %v", s.Name, err)
	}
	var out []dns.RR
	for _, text := range recs.Records {
		rr, err := dns.NewRR(text)
		if err != nil || rr == nil {
			return nil, zoneapi.Errorf(http.StatusBadGateway, "shard %s: record %q: %v", s.Name, text, err)
		}
		out = append(out, rr)
	}
	return out, nil
}
