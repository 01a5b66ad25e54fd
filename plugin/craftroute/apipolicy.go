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
	if a.c.keyMode() != keyZone && name == origin && r.Method != http.MethodGet {
		fail(w, zoneapi.Errorf(http.StatusNotImplemented, "a policy at the apex of a zone split by name is not supported yet: every shard holds the apex"))
		return
	}
	a.routed(w, r, func(ctx context.Context, w http.ResponseWriter) {
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
	regions := new(policy.Regions)
	if err := policy.Decode(body, regions); err == nil {
		err = regions.Validate()
	}
	if err != nil {
		fail(w, zoneapi.BadRequest("%v", err))
		return
	}
	rr, err := policy.RegionsRecord(origin, regions)
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
