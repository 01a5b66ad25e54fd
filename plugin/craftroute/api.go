package craftroute

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// The router's HTTP API serves craftstore's record and zone paths
// (docs/design.md, "HTTP API") over the shards' APIs, placing zones and
// records as the key mode says (split.go), and GET /v1/shards.
//
// A Corefile reload starts the new instance before the old one stops, so
// the listener is shared per address with the instances that name it; the
// newest serves (as craftstore's registry.go does for members).
var (
	apiMu        sync.Mutex
	apiListeners = map[string]*apiListener{} // listen address → listener
)

// apiListener is one listening address and the instances sharing it.
type apiListener struct {
	key   string // registry key, "" when not shared (port 0)
	srv   *http.Server
	ln    net.Listener
	users []*apiServer // newest last
	cur   atomic.Pointer[apiServer]
}

func (l *apiListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.cur.Load().handler.ServeHTTP(w, r)
}

// apiServer is the API of one Craftroute.
type apiServer struct {
	*shardClient
	token   string
	handler http.Handler
	l       *apiListener
}

// startAPI serves the router's API on c.cfg.api. A listener that is not
// loopback needs a token.
func (c *Craftroute) startAPI() error {
	if c.cfg.token == "" && !loopback(c.cfg.api) {
		return fmt.Errorf("craftroute: api on %q is not loopback: it needs a token", c.cfg.api)
	}
	a := &apiServer{shardClient: newShardClient(c), token: c.cfg.token}
	mux := http.NewServeMux()
	zoneapi.Handlers{ListZones: a.listZones, PutZone: a.putZone, GetZone: a.getZone, DeleteZone: a.deleteZone,
		ChangeRecords: a.changeRecords, GetRecords: a.getRecords}.Register(mux)
	a.registerPolicies(mux)
	mux.HandleFunc("GET /v1/shards", a.shards)
	mux.HandleFunc("GET /v1/zones/{zone}/ds", a.zoneDS)
	mux.HandleFunc("PUT /v1/shards/{name}", httpapi.Body(httpapi.JSON, a.putShard))
	mux.HandleFunc("POST /v1/shards", httpapi.Body(httpapi.JSON, a.addShard))
	mux.HandleFunc("DELETE /v1/shards/{name}", a.removeShard)
	a.handler = httpapi.Auth("craftroute", a.token, httpapi.CleanPaths(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What the request sends the shards says the map it is routed by
		// (fence.go).
		mux.ServeHTTP(w, r.WithContext(c.withRouteEpoch(r.Context())))
	})))

	apiMu.Lock()
	defer apiMu.Unlock()
	key := c.cfg.api
	if _, port, err := net.SplitHostPort(key); err == nil && port == "0" {
		key = "" // tests: a port of its own each time
	}
	l := apiListeners[key]
	if key == "" || l == nil {
		ln, err := httpapi.Listen(c.cfg.api)
		if err != nil {
			return fmt.Errorf("craftroute: api: %w", err)
		}
		l = &apiListener{key: key, ln: ln}
		l.srv = httpapi.Server(c.cfg.api, c.cfg.token, l)
		if key != "" {
			apiListeners[key] = l
		}
		l.cur.Store(a)
		go func() {
			if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Errorf("api on %s: %v", ln.Addr(), err)
			}
		}()
	}
	a.l = l
	l.users = append(l.users, a)
	l.cur.Store(a)
	c.api = a
	return nil
}

// stopAPI stops c's API; the listener closes with its last instance.
func (c *Craftroute) stopAPI() {
	apiMu.Lock()
	a := c.api
	if a == nil {
		apiMu.Unlock()
		return
	}
	c.api = nil
	l := a.l
	l.users = slices.DeleteFunc(l.users, func(x *apiServer) bool { return x == a })
	if len(l.users) > 0 {
		l.cur.Store(l.users[len(l.users)-1])
		apiMu.Unlock()
		a.close()
		return
	}
	if l.key != "" && apiListeners[l.key] == l {
		delete(apiListeners, l.key)
	}
	apiMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l.srv.Shutdown(ctx)
	a.close()
}

// apiAddr returns the address c's API listens on, "" if none.
func (c *Craftroute) apiAddr() string {
	apiMu.Lock()
	defer apiMu.Unlock()
	if a := c.api; a != nil {
		return a.l.ln.Addr().String()
	}
	return ""
}

// fail answers err with the status it carries (zoneapi.Error), 413 for a
// body over the limit, 404 for a zone a shard does not hold, or 502: the
// router itself only fails at reaching the shards.
func fail(w http.ResponseWriter, err error) {
	if status, msg, ok := zoneapi.Status(err); ok {
		httpapi.WriteError(w, status, msg)
		return
	}
	switch {
	case errors.Is(err, errZoneAbsent):
		httpapi.WriteError(w, http.StatusNotFound, err.Error())
	default:
		httpapi.WriteError(w, http.StatusBadGateway, err.Error())
	}
}

// shardView is a shard in GET /v1/shards.
type shardView struct {
	Name    string       `json:"name"`
	Members []memberView `json:"members"`
	API     []string     `json:"api"`
	// Records is how many records the shard holds over its zones (the
	// apex and delegations, on every shard in key mode "name", count on
	// each), nil with RecordsError when its API did not answer.
	Records      *int   `json:"records"`
	RecordsError string `json:"records_error,omitempty"`
	// Partitions is how many of the map's partitions it owns.
	Partitions int `json:"partitions"`
}

type memberView struct {
	Addr string `json:"addr"`
	Down bool   `json:"down"`
}

// countWait bounds how long GET /v1/shards waits for the shards' record
// counts.
const countWait = 2 * time.Second

func (a *apiServer) shards(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	rt := a.c.routes()
	out := struct {
		// Epoch is the shard map's, 0 while the router routes by its
		// Corefile (no agreed map read yet).
		Epoch  uint64      `json:"epoch"`
		Key    string      `json:"key"`
		Shards []shardView `json:"shards"`
		// Migrating is the shard being added or removed, while it is.
		Migrating *migrationView `json:"migrating,omitempty"`
		// With ?name=N: N and the shard that holds it.
		Name  string `json:"name,omitempty"`
		Owner string `json:"owner,omitempty"`
	}{Epoch: rt.epoch(), Key: rt.key, Shards: []shardView{}, Migrating: a.c.migrationOf(rt.m)}
	owned := map[string]int{}
	if rt.ring != nil {
		for _, o := range rt.ring.Owners() {
			owned[o]++
		}
	}
	if name := r.URL.Query().Get("name"); name != "" {
		if _, ok := dns.IsDomainName(name); !ok {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("name %q is not a domain name", name))
			return
		}
		out.Name = dnsname.Lower(dns.Fqdn(name))
		if s := a.c.shardFor(out.Name); s != nil {
			out.Owner = s.Name
		}
	}
	var (
		lists [][]zoneapi.ZoneInfo
		errs  []error
	)
	if a.c.haveShardAPIs() {
		// The view answers at once: a shard that does not answer its
		// record count in countWait has none in it.
		ctx, cancel := context.WithTimeout(r.Context(), countWait)
		lists, errs = a.zoneListsOf(ctx, rt.shards)
		cancel()
	}
	for i, s := range rt.shards {
		sv := shardView{Name: s.Name, Members: []memberView{}, API: s.APIs(), Partitions: owned[s.Name]}
		switch {
		case lists == nil:
			sv.RecordsError = "the router has no shard API (shard_api)"
		case errs[i] != nil:
			sv.RecordsError = errs[i].Error()
		default:
			n := 0
			for _, z := range lists[i] {
				n += z.Records
			}
			sv.Records = &n
		}
		if sv.API == nil {
			sv.API = []string{}
		}
		for _, m := range s.Members {
			sv.Members = append(sv.Members, memberView{Addr: m.Addr, Down: m.Down(now)})
		}
		out.Shards = append(out.Shards, sv)
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}
