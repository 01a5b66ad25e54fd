package craftstore

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/coredns/plugin"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// apiConfig is what a member's API is built from, whole before it serves:
// the Corefile's api, token, timeout and limits (setup.go), and the checks
// it shares with the member's UPDATE path.
type apiConfig struct {
	listen    string // listen address (api)
	token     string // bearer token; "" only on loopback
	timeout   time.Duration
	maxZone   int      // records of a zone (max_zone_records): imports, and what changes add; 0: no limit
	maxChange int      // records one change adds and deletes (max_change_records); 0: no limit
	maxZones  int      // zones the member holds (max_zones); 0: no limit
	zones     []string // the server block's zones: a zone outside them is not created; nil: any
	// checkUpdate makes the state-independent checks of an UPDATE
	// (Craftstore.checkUpdate) for the transaction parts routers send;
	// nil: such parts are refused.
	checkUpdate func(origin, key string, prereq, updates []dns.RR) (int, uint16, string)
	// sec is the member's online signing (GET /v1/zones/{zone}/ds); nil
	// without dnssec.
	sec *signing
}

// apiConfig is c's member API's configuration.
func (c *Craftstore) apiConfig() apiConfig {
	cfg := apiConfig{listen: c.cfg.api, token: c.cfg.token, timeout: c.cfg.timeout, maxZone: c.cfg.maxZone,
		maxChange: c.cfg.maxChange, maxZones: c.cfg.maxZones, checkUpdate: c.checkUpdate}
	if !slices.Contains(c.Zones, ".") {
		cfg.zones = c.Zones
	}
	return cfg
}

// apiServer is the HTTP JSON API of one member (README.md, "HTTP API";
// docs/design.md has the contract craftroute serves too).
type apiServer struct {
	apiConfig
	srv    *http.Server
	ln     net.Listener
	rep    *replica.Replica
	leases *leases
}

// startAPI serves the API of member rep, configured by cfg, which it keeps
// as it is.
func startAPI(cfg apiConfig, rep *replica.Replica, ls *leases) (*apiServer, error) {
	a := &apiServer{apiConfig: cfg, rep: rep, leases: ls}
	mux := http.NewServeMux()
	zoneapi.Handlers{ListZones: a.listZones, PutZone: a.putZone, GetZone: a.getZone, DeleteZone: a.deleteZone,
		ChangeRecords: a.changeRecords, GetRecords: a.getRecords}.Register(mux)
	a.registerPolicies(mux)
	mux.HandleFunc("POST /v1/zones/{zone}/axfr", httpapi.Body(httpapi.JSON, a.axfrZone))
	mux.HandleFunc("GET /v1/zones/{zone}/xfr", a.xfr)
	mux.HandleFunc("GET /v1/zones/{zone}/filter", a.nameFilter)
	mux.HandleFunc("GET /v1/zones/{zone}/ds", a.zoneDS)
	mux.HandleFunc("GET /v1/zones/{zone}/keys", a.zoneKeys)
	mux.HandleFunc("POST /v1/zones/{zone}/xfr", httpapi.Body(httpapi.JSON, a.xfr))
	mux.HandleFunc("DELETE /v1/zones/{zone}/xfr/{id}", httpapi.Body(httpapi.JSON, a.unfence))
	mux.HandleFunc("GET /v1/zones/{zone}/xfr/cuts/{serial}", a.xfrCut)
	mux.HandleFunc("GET /v1/cluster", a.cluster)
	mux.HandleFunc("GET /v1/health", a.health)
	mux.HandleFunc("POST /v1/cluster/members", httpapi.Body(httpapi.JSON, a.addMember))
	mux.HandleFunc("DELETE /v1/cluster/members/{id}", a.removeMember)
	mux.HandleFunc("POST /v1/txn/{id}/prepare", httpapi.Body(httpapi.JSON, a.txPrepare))
	mux.HandleFunc("POST /v1/txn/{id}/decide", httpapi.Body(httpapi.JSON, a.txDecide))
	mux.HandleFunc("GET /v1/txn/{id}", a.txStatus)
	mux.HandleFunc("PUT "+txn.StagePattern, a.stageZone)
	mux.HandleFunc("GET "+shardmap.MapPath, a.shardMap)
	mux.HandleFunc("GET "+shardmap.PartitionsPath, a.exportPartitions)
	mux.HandleFunc("POST /v1/txn/{id}/commit", httpapi.Body(httpapi.JSON, a.txFinish))
	mux.HandleFunc("POST /v1/txn/{id}/abort", httpapi.Body(httpapi.JSON, a.txFinish))
	a.srv = httpapi.Server(cfg.listen, cfg.token, httpapi.Auth("craftstore", cfg.token, a.fenced(httpapi.CleanPaths(mux))))
	ln, err := httpapi.Listen(cfg.listen)
	if err != nil {
		return nil, err
	}
	a.ln = ln
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Errorf("api on %s: %v", ln.Addr(), err)
		}
	}()
	return a, nil
}

func (a *apiServer) addr() string { return a.ln.Addr().String() }

func (a *apiServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.srv.Shutdown(ctx)
}

// fail answers err with the HTTP status of its kind (replica.Error), 413
// for a body over the limit, or 500.
func fail(w http.ResponseWriter, err error) {
	if errors.Is(err, replica.ErrStaleMap) {
		// Refused when applied: the router's map is older than the
		// placement (fence.go). The middleware set the member's epoch.
		epoch, _ := strconv.ParseUint(w.Header().Get(shardmap.EpochHeader), 10, 64)
		writeStale(w, err.Error(), epoch)
		return
	}
	var rerr *replica.Error
	if status, msg, ok := zoneapi.Status(err); ok {
		httpapi.WriteError(w, status, msg)
		return
	}
	switch {
	case errors.As(err, &rerr):
		httpapi.WriteError(w, httpStatus(rerr), rerr.Msg)
	default:
		httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
	}
}

// httpStatus is the HTTP status that answers an error of err's kind.
func httpStatus(err error) int {
	if status, _, ok := zoneapi.Status(err); ok {
		return status
	}
	switch {
	case errors.Is(err, replica.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, replica.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, replica.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, replica.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, replica.ErrUnavailable), errors.Is(err, replica.ErrBusy):
		return http.StatusServiceUnavailable
	case errors.Is(err, replica.ErrUpstream):
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

func badRequest(format string, a ...any) error {
	return replica.Errorf(replica.ErrInvalid, format, a...)
}

// existingZone is zoneapi.ZoneParam for a zone that must exist.
func (a *apiServer) existingZone(r *http.Request) (string, error) {
	z, err := zoneapi.ZoneParam(r)
	if err != nil {
		return "", err
	}
	if a.rep.Zone(z) == nil {
		// A zone created a moment ago through another member or router
		// may not be applied here yet: catch up with the group (ReadIndex)
		// before saying it does not exist.
		ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
		defer cancel()
		if err := a.rep.Fresh(ctx); err != nil {
			return "", err
		}
		if a.rep.Zone(z) == nil {
			return "", replica.Errorf(replica.ErrNotFound, "zone %q not found", z)
		}
	}
	return z, nil
}

func (a *apiServer) listZones(w http.ResponseWriter, r *http.Request) {
	// Every write acknowledged before the request is in the list, on a
	// follower too (craftroute sums the shards' records from it right
	// after an import): catch up with the group first (ReadIndex).
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.rep.Fresh(ctx); err != nil {
		fail(w, err)
		return
	}
	out := []zoneapi.ZoneInfo{}
	for _, o := range a.rep.Zones() {
		z := a.rep.Zone(o)
		if z == nil {
			continue
		}
		info := zoneapi.ZoneInfo{Zone: o, Records: z.Records()}
		if soa := z.SOA(); soa != nil {
			info.Serial = soa.Serial
		}
		out = append(out, info)
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// admit refuses a zone import the member may not take (403): a zone
// outside the server block's zones, or a new zone past max_zones.
func (a *apiServer) admit(origin string) error {
	if len(a.zones) > 0 && plugin.Zones(a.zones).Matches(origin) == "" {
		return zoneapi.Errorf(http.StatusForbidden, "zone %q is not in this member's server block (%s): nothing was written", origin, strings.Join(a.zones, " "))
	}
	if a.maxZones > 0 && a.rep.Zone(origin) == nil && len(a.rep.Zones()) >= a.maxZones {
		return zoneapi.Errorf(http.StatusForbidden, "this member holds %d zones, as many as max_zones allows: zone %q was not created", a.maxZones, origin)
	}
	return nil
}

func (a *apiServer) putZone(w http.ResponseWriter, r *http.Request) {
	origin, text, ok := a.zoneText(w, r)
	if !ok {
		return
	}
	im := a.rep.NewImport(origin, false, a.timeout)
	defer im.Abort()
	if err := a.feedText(r.Context(), im, origin, text); err != nil {
		fail(w, err)
		return
	}
	a.commitImport(w, r, im, origin)
}

// zoneText reads the zone text a request's body holds (at most
// zoneapi.MaxZoneBody bytes); it answers the error itself when there is
// one.
func (a *apiServer) zoneText(w http.ResponseWriter, r *http.Request) (origin, text string, ok bool) {
	origin, body, err := zoneapi.ReadZone(w, r)
	if err == nil {
		err = a.admit(origin)
	}
	if err != nil {
		fail(w, err)
		return "", "", false
	}
	return origin, string(body), true
}

// feedText parses zone text into import im record by record (the import
// checks them, chunk by chunk); a parse error is the client's (400).
func (a *apiServer) feedText(ctx context.Context, im *replica.Import, origin, text string) error {
	return importError(zoneapi.StreamZoneText(origin, text, a.maxZone, func(rr dns.RR) error { return im.Add(ctx, rr) }))
}

// importError is err, an import's, as the API answers it: the import's
// and the contract's errors as they are, any other (the zone file
// parser's) a bad request.
func importError(err error) error {
	var rerr *replica.Error
	if _, _, ok := zoneapi.Status(err); err != nil && !ok && !errors.As(err, &rerr) {
		return badRequest("%v", err)
	}
	return err
}

// stageZone answers PUT /v1/stage/{zone}: the zone's text, checked as
// for PUT /v1/zones/{zone}, staged for a shard map part to commit
// (craftroute's migration in key mode "zone" clones a zone it moves so):
// queries do not see it, another import of the zone supersedes it. The
// answer is txn.Staged.
func (a *apiServer) stageZone(w http.ResponseWriter, r *http.Request) {
	origin, text, ok := a.zoneText(w, r)
	if !ok {
		return
	}
	im := a.rep.NewImport(origin, false, a.timeout)
	defer im.Abort()
	err := a.feedText(r.Context(), im, origin, text)
	var id uint64
	if err == nil {
		id, err = im.Stage(r.Context())
	}
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, txn.Staged{Zone: origin, Import: id, Records: im.Records(), Serial: im.Serial()})
}

// commitImport replaces (or creates) zone origin with the records added
// to im, tells the routers, and answers with the zone's new serial and
// size. It returns whether the import committed.
func (a *apiServer) commitImport(w http.ResponseWriter, r *http.Request, im *replica.Import, origin string) (replica.Result, bool) {
	res, err := im.Commit(a.late(r.Context(), origin, shardproto.ZonePut))
	if err != nil {
		fail(w, err)
		return res, false
	}
	noticeChange(r.Context(), a.leases, a.rep, origin, shardproto.ZonePut)
	httpapi.WriteJSON(w, http.StatusOK, zoneapi.ZoneInfo{Zone: origin, Serial: res.Serial, Records: res.Records})
	return res, true
}

func (a *apiServer) getZone(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	keep, err := partitionFilter(r)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/dns")
	bw := bufio.NewWriter(w)
	started := false
	err = a.rep.ExportWhere(origin, keep, func(rr dns.RR) error {
		started = true
		return writeZone(bw, rr)
	})
	if err != nil && !started {
		fail(w, err)
		return
	}
	bw.Flush()
}

func (a *apiServer) deleteZone(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.rep.DeleteZone(a.late(ctx, origin, shardproto.ZoneDeleted), origin); err != nil {
		fail(w, err)
		return
	}
	noticeChange(r.Context(), a.leases, a.rep, origin, shardproto.ZoneDeleted)
	httpapi.WriteJSON(w, http.StatusOK, map[string]string{"zone": origin})
}

func (a *apiServer) getRecords(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	name, qtype, err := zoneapi.RecordsQuery(r, origin)
	if err != nil {
		fail(w, err)
		return
	}
	texts := []string{}
	for _, rr := range a.rep.Zone(origin).RRs(name, qtype) {
		texts = append(texts, rr.String())
	}
	httpapi.WriteJSON(w, http.StatusOK, zoneapi.Records{Zone: origin, Name: name, Records: texts})
}

// decodeBody decodes a JSON request body of at most zoneapi.MaxRecordsBody
// bytes into v (zoneapi.Decode).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return zoneapi.Decode(http.MaxBytesReader(w, r.Body, zoneapi.MaxRecordsBody), v)
}

func (a *apiServer) changeRecords(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	req, err := zoneapi.ReadChange(http.MaxBytesReader(w, r.Body, zoneapi.MaxRecordsBody))
	if err != nil {
		fail(w, err)
		return
	}
	add, del, names, err := a.parseChange(origin, req)
	if err == nil {
		err = refuseReserved(add, del)
	}
	if err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	serial, err := a.rep.Change(a.late(ctx, origin, shardproto.Records, names...), origin, add, del)
	if err != nil {
		fail(w, err)
		return
	}
	noticeChange(r.Context(), a.leases, a.rep, origin, shardproto.Records, names...)
	httpapi.WriteJSON(w, http.StatusOK, zoneapi.Changed{Zone: origin, Serial: serial})
}

// parseChange reads a record change of zone origin: its additions, its
// deletions and the names they touch. It refuses a change over
// max_change_records, and one whose additions would take the zone, as this
// member holds it, over max_zone_records.
func (a *apiServer) parseChange(origin string, req zoneapi.Change) (add []dns.RR, del []replica.Deletion, names []string, err error) {
	if err := zoneapi.CheckChangeSize(req, a.maxChange); err != nil {
		return nil, nil, nil, err
	}
	if z := a.rep.Zone(origin); z != nil {
		if err := zoneapi.CheckGrowth(origin, z.Records(), len(req.Add), a.maxZone); err != nil {
			return nil, nil, nil, err
		}
	}
	add = make([]dns.RR, 0, len(req.Add))
	for i, text := range req.Add {
		rr, err := zoneapi.ParseRecord(origin, text)
		if err != nil {
			return nil, nil, nil, badRequest("add[%d]: %v", i, err)
		}
		add = append(add, rr)
	}
	del = make([]replica.Deletion, 0, len(req.Delete))
	for i, raw := range req.Delete {
		d, err := zoneapi.ParseDeletion(origin, raw)
		if err != nil {
			return nil, nil, nil, badRequest("delete[%d]: %v", i, err)
		}
		del = append(del, replica.Deletion(d))
	}
	names = make([]string, 0, len(add)+len(del))
	for _, rr := range add {
		names = append(names, rr.Header().Name)
	}
	for _, d := range del {
		if d.RR != nil {
			names = append(names, d.RR.Header().Name)
		} else {
			names = append(names, d.Name)
		}
	}
	return add, del, names, nil
}

func (a *apiServer) cluster(w http.ResponseWriter, r *http.Request) {
	st, err := a.rep.Status()
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
}

// health answers 200 while the member's storage works and 503 with the
// error while it fails (the member retries and heals by itself). CoreDNS's
// health plugin reports only that the process runs; probe this for the
// storage.
func (a *apiServer) health(w http.ResponseWriter, r *http.Request) {
	if err := a.rep.StorageError(); err != nil {
		httpapi.WriteError(w, http.StatusServiceUnavailable, "storage fails: "+err.Error())
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]bool{"healthy": true, "ready": a.rep.Ready()})
}

func (a *apiServer) addMember(w http.ResponseWriter, r *http.Request) {
	var m replica.Member
	if err := decodeBody(w, r, &m); err != nil {
		fail(w, err)
		return
	}
	if m.ID == 0 {
		fail(w, badRequest("id must be a positive integer"))
		return
	}
	if _, _, err := net.SplitHostPort(m.Raft); m.Raft != "" && err != nil {
		fail(w, badRequest("raft address %q: %v", m.Raft, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.rep.AddMember(ctx, m); err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, m)
}

func (a *apiServer) removeMember(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		fail(w, badRequest("member id %q must be a positive integer", r.PathValue("id")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.rep.RemoveMember(ctx, id); err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]uint64{"id": id})
}

// late returns ctx with the change notice to send if the write times out
// (the client gets 503: outcome unknown) and is applied later after all
// (replica.WithLate), so that the routers learn of it then.
func (a *apiServer) late(ctx context.Context, zone string, c shardproto.Change, names ...string) context.Context {
	return lateNotice(ctx, a.leases, a.rep, zone, c, names...)
}

// refuseReserved refuses a client's change of the records that hold
// request-routing policies (zoneapi.RefuseReserved).
func refuseReserved(add []dns.RR, del []replica.Deletion) error {
	dels := make([]zoneapi.Deletion, len(del))
	for i, d := range del {
		dels[i] = zoneapi.Deletion(d)
	}
	return zoneapi.RefuseReserved(add, dels)
}
