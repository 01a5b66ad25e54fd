package craftstore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// Body size limits of the HTTP API.
const (
	maxZoneBody    = 256 << 20 // a zone file
	maxRecordsBody = 4 << 20   // a record change or a member change
)

// apiServer is the HTTP JSON API of one member (README.md, "HTTP API";
// docs/design.md has the contract craftroute serves too).
type apiServer struct {
	srv     *http.Server
	ln      net.Listener
	rep     *replica.Replica
	token   string
	timeout time.Duration
}

func startAPI(addr, token string, timeout time.Duration, rep *replica.Replica) (*apiServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	a := &apiServer{ln: ln, rep: rep, token: token, timeout: timeout}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/zones", a.listZones)
	mux.HandleFunc("PUT /v1/zones/{zone}", a.putZone)
	mux.HandleFunc("GET /v1/zones/{zone}", a.getZone)
	mux.HandleFunc("DELETE /v1/zones/{zone}", a.deleteZone)
	mux.HandleFunc("POST /v1/zones/{zone}/axfr", a.axfrZone)
	mux.HandleFunc("POST /v1/zones/{zone}/records", a.changeRecords)
	mux.HandleFunc("GET /v1/zones/{zone}/records", a.getRecords)
	mux.HandleFunc("GET /v1/cluster", a.cluster)
	mux.HandleFunc("GET /v1/health", a.health)
	mux.HandleFunc("POST /v1/cluster/members", a.addMember)
	mux.HandleFunc("DELETE /v1/cluster/members/{id}", a.removeMember)
	a.srv = &http.Server{Handler: httpapi.Auth("craftstore", a.token, mux), ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(ln)
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
	var rerr *replica.Error
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &rerr):
		httpapi.WriteError(w, httpStatus(rerr), rerr.Msg)
	case errors.As(err, &tooBig):
		httpapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit))
	default:
		httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
	}
}

// httpStatus is the HTTP status that answers an error of err's kind.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, replica.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, replica.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, replica.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, replica.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, replica.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, replica.ErrUpstream):
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

func badRequest(format string, a ...any) error {
	return replica.Errorf(replica.ErrInvalid, format, a...)
}

// zoneParam returns the canonical origin named in the path.
func zoneParam(r *http.Request) (string, error) {
	z := r.PathValue("zone")
	if _, ok := dns.IsDomainName(z); !ok || z == "" {
		return "", badRequest("%q is not a domain name", z)
	}
	return dns.CanonicalName(z), nil
}

// existingZone is zoneParam for a zone that must exist.
func (a *apiServer) existingZone(r *http.Request) (string, error) {
	z, err := zoneParam(r)
	if err != nil {
		return "", err
	}
	if a.rep.Zone(z) == nil {
		return "", replica.Errorf(replica.ErrNotFound, "zone %q not found", z)
	}
	return z, nil
}

type zoneInfo struct {
	Zone    string `json:"zone"`
	Serial  uint32 `json:"serial"`
	Records int    `json:"records"`
}

func (a *apiServer) listZones(w http.ResponseWriter, r *http.Request) {
	out := []zoneInfo{}
	for _, o := range a.rep.Zones() {
		z := a.rep.Zone(o)
		if z == nil {
			continue
		}
		info := zoneInfo{Zone: o, Records: z.Records()}
		if soa := z.SOA(); soa != nil {
			info.Serial = soa.Serial
		}
		out = append(out, info)
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

func (a *apiServer) putZone(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxZoneBody))
	if err != nil {
		fail(w, err)
		return
	}
	rrs, err := parseZone(origin, string(body))
	if err != nil {
		fail(w, badRequest("%v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), importTimeout(a.timeout, len(rrs)))
	defer cancel()
	res, err := a.rep.PutZone(ctx, origin, rrs, false)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, zoneInfo{Zone: origin, Serial: res.Serial, Records: res.Records})
}

func (a *apiServer) getZone(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/dns")
	bw := bufio.NewWriter(w)
	started := false
	err = a.rep.Export(origin, func(rr dns.RR) error {
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
	if err := a.rep.DeleteZone(ctx, origin); err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]string{"zone": origin})
}

func (a *apiServer) getRecords(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		fail(w, badRequest("the name parameter is required"))
		return
	}
	if name, err = absName(origin, name); err != nil {
		fail(w, err)
		return
	}
	var qtype uint16
	if t := r.URL.Query().Get("type"); t != "" {
		var ok bool
		if qtype, ok = dns.StringToType[strings.ToUpper(t)]; !ok {
			fail(w, badRequest("unknown type %q", t))
			return
		}
	}
	texts := []string{}
	for _, rr := range a.rep.Zone(origin).RRs(name, qtype) {
		texts = append(texts, rr.String())
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"zone": origin, "name": name, "records": texts})
}

// absName makes an API name absolute: a name inside the zone as is (with or
// without the final dot), anything else without a final dot relative to it.
func absName(origin, name string) (string, error) {
	if _, ok := dns.IsDomainName(name); !ok {
		return "", badRequest("%q is not a domain name", name)
	}
	n := dns.CanonicalName(name)
	if !dns.IsSubDomain(origin, n) && !strings.HasSuffix(name, ".") && name != "@" {
		n = dns.CanonicalName(name + "." + origin)
	}
	if name == "@" {
		n = origin
	}
	if !dns.IsSubDomain(origin, n) {
		return "", badRequest("name %q is outside zone %q", name, origin)
	}
	return n, nil
}

// decodeBody decodes a JSON request body of at most maxRecordsBody bytes
// into v, refusing unknown fields: a *replica.Error (400) for a bad body, an
// *http.MaxBytesError (413) for one over the limit.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRecordsBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return badRequest("body: %v", err)
	}
	return nil
}

// changeRequest is the body of POST /v1/zones/{zone}/records.
type changeRequest struct {
	Add    []string          `json:"add"`
	Delete []json.RawMessage `json:"delete"`
}

func (a *apiServer) changeRecords(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	var req changeRequest
	if err := decodeBody(w, r, &req); err != nil {
		fail(w, err)
		return
	}
	if len(req.Add) == 0 && len(req.Delete) == 0 {
		fail(w, badRequest("nothing to add or delete"))
		return
	}
	add := make([]dns.RR, 0, len(req.Add))
	for i, text := range req.Add {
		rr, err := parseRR(origin, text)
		if err != nil {
			fail(w, badRequest("add[%d]: %v", i, err))
			return
		}
		add = append(add, rr)
	}
	del := make([]replica.Deletion, 0, len(req.Delete))
	for i, raw := range req.Delete {
		d, err := parseDeletion(origin, raw)
		if err != nil {
			fail(w, badRequest("delete[%d]: %v", i, err))
			return
		}
		del = append(del, d)
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	serial, err := a.rep.Change(ctx, origin, add, del)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"zone": origin, "serial": serial})
}

// parseDeletion reads "RR text", {"name","type"} or {"name"}.
func parseDeletion(origin string, raw json.RawMessage) (replica.Deletion, error) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		rr, err := parseRR(origin, text)
		return replica.Deletion{RR: rr}, err
	}
	var sel struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &sel); err != nil || sel.Name == "" {
		return replica.Deletion{}, errors.New(`want "RR text", {"name","type"} or {"name"}`)
	}
	name, err := absName(origin, sel.Name)
	if err != nil {
		return replica.Deletion{}, err
	}
	d := replica.Deletion{Name: name}
	if sel.Type != "" {
		t, ok := dns.StringToType[strings.ToUpper(sel.Type)]
		if !ok {
			return replica.Deletion{}, fmt.Errorf("unknown type %q", sel.Type)
		}
		d.Type = t
	}
	return d, nil
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
	if _, _, err := net.SplitHostPort(m.Raft); err != nil {
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
