package craftroute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/httpapi/apitest"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

const shardToken = "shard-secret"

// fakeAPI is one shard as the router sees it through craftstore's HTTP API
// and partition-mode DNS: zones in memory, every request recorded.
type fakeAPI struct {
	name string
	srv  *httptest.Server

	mu       sync.Mutex
	zones    map[string][]dns.RR
	reqs     []fakeReq
	fail     map[string]int // method → status to answer with
	prepared map[txn.ID]txn.Prepare
	decided  map[txn.ID]txn.Outcome
	// recovered is how many transactions the coordinator finds aborted
	// already when the router asks it to decide: a participant's recovery
	// decided first.
	recovered int
}

type fakeReq struct {
	method, path, body string
}

func newFakeAPI(t *testing.T, name string) *fakeAPI {
	f := &fakeAPI{name: name, zones: map[string][]dns.RR{}, fail: map[string]int{},
		prepared: map[txn.ID]txn.Prepare{}, decided: map[txn.ID]txn.Outcome{}}
	mux := http.NewServeMux()
	zoneapi.Handlers{ListZones: f.list, PutZone: f.put, GetZone: f.get, DeleteZone: f.del,
		ChangeRecords: f.change, GetRecords: f.records}.Register(mux)
	mux.HandleFunc("POST /v1/txn/{id}/{step}", httpapi.Body(httpapi.JSON, f.txStep))
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		f.mu.Lock()
		f.reqs = append(f.reqs, fakeReq{r.Method, r.URL.Path, string(body)})
		status := f.fail[r.Method]
		f.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+shardToken {
			httpapi.WriteError(w, http.StatusUnauthorized, "shard token missing")
			return
		}
		if status != 0 {
			httpapi.WriteError(w, status, "injected failure")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) setFail(method string, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = status
}

func (f *fakeAPI) requests(method string) []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeReq
	for _, r := range f.reqs {
		if method == "" || r.method == method {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeAPI) zone(origin string) []dns.RR {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.zones[origin])
}

func soaOf(rrs []dns.RR) *dns.SOA {
	for _, rr := range rrs {
		if s, ok := rr.(*dns.SOA); ok {
			return s
		}
	}
	return nil
}

func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []zoneapi.ZoneInfo{}
	for o, rrs := range f.zones {
		out = append(out, zoneapi.ZoneInfo{Zone: o, Serial: soaOf(rrs).Serial, Records: len(rrs)})
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

func (f *fakeAPI) put(w http.ResponseWriter, r *http.Request) {
	origin := dns.CanonicalName(r.PathValue("zone"))
	body, _ := io.ReadAll(r.Body)
	rrs, err := zoneapi.ParseZone(origin, string(body))
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	f.mu.Lock()
	f.zones[origin] = rrs
	f.mu.Unlock()
	httpapi.WriteJSON(w, http.StatusOK, zoneapi.ZoneInfo{Zone: origin, Serial: soaOf(rrs).Serial, Records: len(rrs)})
}

func (f *fakeAPI) get(w http.ResponseWriter, r *http.Request) {
	rrs := f.zone(dns.CanonicalName(r.PathValue("zone")))
	if rrs == nil {
		httpapi.WriteError(w, http.StatusNotFound, "zone not found")
		return
	}
	w.Header().Set("Content-Type", "text/dns")
	w.Write(zoneText(rrs))
}

func (f *fakeAPI) del(w http.ResponseWriter, r *http.Request) {
	origin := dns.CanonicalName(r.PathValue("zone"))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.zones[origin] == nil {
		httpapi.WriteError(w, http.StatusNotFound, "zone not found")
		return
	}
	delete(f.zones, origin)
	httpapi.WriteJSON(w, http.StatusOK, map[string]string{"zone": origin})
}

func (f *fakeAPI) change(w http.ResponseWriter, r *http.Request) {
	origin := dns.CanonicalName(r.PathValue("zone"))
	var req zoneapi.Change
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	serial, status, err := f.apply(origin, req, false)
	if err != nil {
		httpapi.WriteError(w, status, err.Error())
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"zone": origin, "serial": serial})
}

// apply applies (or with dry only checks) a change to zone origin, under
// f.mu: the new serial, or the status and error that refuse it.
func (f *fakeAPI) apply(origin string, req zoneapi.Change, dry bool) (uint32, int, error) {
	rrs := slices.Clone(f.zones[origin])
	if rrs == nil {
		return 0, http.StatusNotFound, errors.New("zone not found")
	}
	for _, raw := range req.Delete {
		pl, err := deletionPlacement(origin, raw)
		if err != nil {
			return 0, http.StatusBadRequest, err
		}
		rrs = slices.DeleteFunc(rrs, func(rr dns.RR) bool {
			return dnsname.Lower(rr.Header().Name) == pl.name && (pl.rrtype == dns.TypeANY || pl.rrtype == rr.Header().Rrtype)
		})
	}
	for _, text := range req.Add {
		rr, err := zoneapi.ParseRecord(origin, text)
		if err != nil {
			return 0, http.StatusBadRequest, err
		}
		rrs = append(rrs, rr)
	}
	soa := dns.Copy(soaOf(rrs)).(*dns.SOA)
	soa.Serial++
	if dry {
		return soa.Serial, 0, nil
	}
	rrs = slices.DeleteFunc(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeSOA })
	f.zones[origin] = append([]dns.RR{soa}, rrs...)
	return soa.Serial, 0, nil
}

// txStep is craftstore's side of a transaction (prepare, decide, commit,
// abort), in memory.
func (f *fakeAPI) txStep(w http.ResponseWriter, r *http.Request) {
	id, err := txn.ParseID(r.PathValue("id"))
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.PathValue("step") {
	case "prepare":
		var p txn.Prepare
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Change == nil {
			httpapi.WriteError(w, http.StatusBadRequest, "bad prepare")
			return
		}
		if _, status, err := f.apply(dns.CanonicalName(p.Zone), *p.Change, true); err != nil {
			httpapi.WriteJSON(w, http.StatusOK, txn.Vote{Status: status, Error: err.Error()})
			return
		}
		f.prepared[id] = p
		httpapi.WriteJSON(w, http.StatusOK, txn.Vote{Yes: true})
	case "decide":
		var d txn.Decide
		json.NewDecoder(r.Body).Decode(&d)
		if _, ok := f.decided[id]; !ok {
			f.decided[id] = d.Outcome
			if f.recovered > 0 {
				f.recovered--
				f.decided[id] = txn.Abort
			}
		}
		httpapi.WriteJSON(w, http.StatusOK, txn.Decision{Outcome: f.decided[id]})
	case "commit":
		p, ok := f.prepared[id]
		if !ok {
			httpapi.WriteError(w, http.StatusNotFound, "not prepared")
			return
		}
		delete(f.prepared, id)
		serial, status, err := f.apply(dns.CanonicalName(p.Zone), *p.Change, false)
		if err != nil {
			httpapi.WriteError(w, status, err.Error())
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, txn.Finished{Outcome: txn.Commit, Serial: serial})
	case "abort":
		delete(f.prepared, id)
		httpapi.WriteJSON(w, http.StatusOK, txn.Finished{Outcome: txn.Abort})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeAPI) records(w http.ResponseWriter, r *http.Request) {
	origin := dns.CanonicalName(r.PathValue("zone"))
	name, _ := zoneapi.AbsName(origin, r.URL.Query().Get("name"))
	texts := []string{}
	for _, rr := range f.zone(origin) {
		if dnsname.Lower(rr.Header().Name) == name {
			texts = append(texts, rr.String())
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"zone": origin, "name": name, "records": texts})
}

// exchange answers a partition-mode query from the shard's current zones.
func (f *fakeAPI) exchange(req *dns.Msg) *dns.Msg {
	q := req.Question[0]
	qname := dnsname.Lower(q.Name)
	f.mu.Lock()
	origin := ""
	for o := range f.zones {
		if dns.IsSubDomain(o, qname) && len(o) > len(origin) {
			origin = o
		}
	}
	rrs := slices.Clone(f.zones[origin])
	f.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(req)
	m.SetEdns0(dns.DefaultMsgSize, false)
	if origin == "" {
		m.Rcode = dns.RcodeRefused
		shardproto.Attach(m, shardproto.Facts{Kind: shardproto.Final})
		return m
	}
	z := zone.New(origin)
	z.Load(rrs)
	shardproto.Attach(m, z.Partition(m, qname, q.Qtype))
	if serial, base, ok := z.Serial(); ok {
		shardproto.AttachSerial(m, origin, serial, base)
		shardproto.SignAnswer(m, testKey)
	}
	return m
}

// fakeFleet is the shards of a test router.
type fakeFleet map[string]*fakeAPI

func (ff fakeFleet) exchange(_ context.Context, s *Shard, req *dns.Msg) (*dns.Msg, error) {
	return ff[s.Name].exchange(req), nil
}

// apiMember is a member of shard whose API is at url (its DNS address is
// not used: the fake fleet answers queries).
func apiMember(shard, url string) *Member {
	m := newMember(shard, "127.0.0.1:1", 0, nil)
	m.API = url
	return m
}

// apiRouter starts the API of a router over n fake shards on loopback.
func apiRouter(t *testing.T, key string, n int, token string) (*Craftroute, fakeFleet, string) {
	t.Helper()
	c := splitRouter(t, key, n)
	c.cfg.api, c.cfg.token, c.cfg.shardToken = "127.0.0.1:0", token, shardToken
	ff := fakeFleet{}
	for _, s := range c.shards() {
		f := newFakeAPI(t, s.Name)
		ff[s.Name] = f
		s.Members = []*Member{apiMember(s.Name, f.srv.URL)}
	}
	c.ex = ff
	if err := c.startAPI(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stopAPI)
	return c, ff, "http://" + c.apiAddr()
}

func call(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	return apitest.Call(t, method, url, token, body)
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

func rrSet(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, rr := range rrs {
		out[i] = rrKey(rr)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func TestAPIZoneNameMode(t *testing.T) {
	c, ff, base := apiRouter(t, keyName, 3, "")
	status, body := call(t, "PUT", base+"/v1/zones/example.org", "", splitZone())
	if status != http.StatusOK {
		t.Fatalf("PUT: expected 200, got %d %s", status, body)
	}
	rep := decode[zoneReport](t, body)
	if rep.Zone != splitOrigin || rep.Serial != 1 || len(rep.Shards) != 3 {
		t.Errorf("PUT: unexpected report %s", body)
	}
	rrs, _ := zoneapi.ParseZone(splitOrigin, splitZone())
	if rep.Records != len(rrs) {
		t.Errorf("PUT: expected %d records, got %d", len(rrs), rep.Records)
	}
	for s, part := range c.split(splitOrigin, rrs) {
		if got, want := rrSet(ff[s.Name].zone(splitOrigin)), rrSet(part); !slices.Equal(got, want) {
			t.Errorf("shard %s holds %d records, expected its %d", s.Name, len(got), len(want))
		}
	}
	if c.zones.longest("www.example.org.") != splitOrigin {
		t.Errorf("expected the zone to be known after PUT")
	}

	status, body = call(t, "GET", base+"/v1/zones", "", "")
	list := decode[[]routedZone](t, body)
	if status != http.StatusOK || len(list) != 1 || list[0].Zone != splitOrigin || len(list[0].Shards) != 3 || list[0].Serial != 1 {
		t.Errorf("GET /v1/zones: unexpected %d %s", status, body)
	}

	status, body = call(t, "GET", base+"/v1/zones/example.org.", "", "")
	if status != http.StatusOK {
		t.Fatalf("GET zone: expected 200, got %d %s", status, body)
	}
	got, err := zoneapi.ParseZone(splitOrigin, string(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rrs) || !slices.Equal(rrSet(got), rrSet(rrs)) {
		t.Errorf("GET zone: expected the %d records put, got %d", len(rrs), len(got))
	}
	if _, ok := got[0].(*dns.SOA); !ok {
		t.Errorf("GET zone: expected the SOA first, got %s", got[0])
	}

	status, body = call(t, "GET", base+"/v1/zones/example.org./records?name=host5", "", "")
	if status != http.StatusOK || !strings.Contains(string(body), "198.51.100.5") {
		t.Errorf("GET records: unexpected %d %s", status, body)
	}

	status, body = call(t, "DELETE", base+"/v1/zones/example.org.", "", "")
	if status != http.StatusOK {
		t.Errorf("DELETE: expected 200, got %d %s", status, body)
	}
	for name, f := range ff {
		if f.zone(splitOrigin) != nil {
			t.Errorf("DELETE: zone still on shard %s", name)
		}
	}
	if status, body = call(t, "DELETE", base+"/v1/zones/example.org.", "", ""); status != http.StatusNotFound {
		t.Errorf("DELETE again: expected 404, got %d %s", status, body)
	}
	if status, body = call(t, "GET", base+"/v1/zones/example.org.", "", ""); status != http.StatusNotFound {
		t.Errorf("GET deleted zone: expected 404, got %d %s", status, body)
	}
}

func TestAPIPutBadZone(t *testing.T) {
	_, ff, base := apiRouter(t, keyName, 2, "")
	status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", "www 300 IN A 192.0.2.1\n")
	if status != http.StatusBadRequest || !strings.Contains(string(body), "no SOA") {
		t.Errorf("expected 400 for a zone without SOA, got %d %s", status, body)
	}
	for name, f := range ff {
		if n := len(f.requests("PUT")); n != 0 {
			t.Errorf("shard %s got %d PUTs for a bad zone", name, n)
		}
	}
}

// TestAPIPutOutsideZones: the router creates no zone it would not answer
// for (outside its server block's zones).
func TestAPIPutOutsideZones(t *testing.T) {
	_, ff, base := apiRouter(t, keyName, 2, "")
	status, body := call(t, "PUT", base+"/v1/zones/example.net.", "", strings.ReplaceAll(splitZone(), splitOrigin, "example.net."))
	if status != http.StatusForbidden || !strings.Contains(string(body), "server block") {
		t.Errorf("expected 403 for a zone outside the router's zones, got %d %s", status, body)
	}
	for name, f := range ff {
		if n := len(f.requests("PUT")); n != 0 {
			t.Errorf("shard %s got %d PUTs for a zone outside the router's", name, n)
		}
	}
}

func TestAPIPutPartialFailure(t *testing.T) {
	_, ff, base := apiRouter(t, keyName, 3, "")
	ff["s1"].setFail("PUT", http.StatusServiceUnavailable)
	status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone())
	if status != http.StatusBadGateway {
		t.Fatalf("expected 502, got %d %s", status, body)
	}
	rep := decode[zoneReport](t, body)
	if !strings.Contains(rep.Error, "s1") || !strings.Contains(rep.Error, "stay") {
		t.Errorf("expected an error naming s1 and saying the other parts stay, got %q", rep.Error)
	}
	for _, sr := range rep.Shards {
		want := statusCommitted
		if sr.Shard == "s1" {
			want = statusFailed
		}
		if sr.Status != want {
			t.Errorf("shard %s: expected %s, got %s", sr.Shard, want, sr.Status)
		}
	}
}

func TestAPIChangeNameMode(t *testing.T) {
	c, ff, base := apiRouter(t, keyName, 3, "")
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	// Two names on two different shards.
	a, b := "", ""
	for i := 0; i < 100 && b == ""; i++ {
		n := fmt.Sprintf("n%d.example.org.", i)
		switch {
		case a == "":
			a = n
		case c.shardFor(n) != c.shardFor(a):
			b = n
		}
	}
	sa, sb := c.shardFor(a), c.shardFor(b)

	// One name: the body goes as it is to its shard.
	one := `{"add":["` + a + ` 300 IN A 192.0.2.7"]}`
	status, body := call(t, "POST", base+"/v1/zones/example.org./records", "", one)
	if status != http.StatusOK {
		t.Fatalf("POST one: expected 200, got %d %s", status, body)
	}
	if got := ff[sa.Name].requests("POST"); len(got) != 1 || got[0].body != one {
		t.Errorf("POST one: expected the body as is on %s, got %v", sa.Name, got)
	}
	for name, f := range ff {
		if name != sa.Name && len(f.requests("POST")) != 0 {
			t.Errorf("POST one: shard %s got a part", name)
		}
	}

	// Two names and a glue record below the existing cut.
	two := `{"add":["` + a + ` 300 IN TXT \"x\"","` + b + ` 300 IN A 192.0.2.8","ns2.sub 300 IN A 192.0.2.9"],"delete":[{"name":"host1"}]}`
	status, body = call(t, "POST", base+"/v1/zones/example.org./records", "", two)
	if status != http.StatusOK {
		t.Fatalf("POST two: expected 200, got %d %s", status, body)
	}
	rep := decode[zoneReport](t, body)
	if len(rep.Shards) != 3 || rep.Serial == 0 {
		t.Errorf("POST two: expected a report of 3 shards and a serial, got %s", body)
	}
	if !slices.IsSortedFunc(rep.Shards, func(x, y shardReport) int { return strings.Compare(x.Shard, y.Shard) }) {
		t.Errorf("POST two: expected shards in name order, got %s", body)
	}
	has := func(s *Shard, name string) bool {
		return slices.ContainsFunc(ff[s.Name].zone(splitOrigin), func(rr dns.RR) bool { return dnsname.Lower(rr.Header().Name) == name })
	}
	for _, s := range c.shards() {
		if !has(s, "ns2.sub.example.org.") {
			t.Errorf("glue below the cut missing on shard %s", s.Name)
		}
		if has(s, b) != (s == sb) {
			t.Errorf("%s on shard %s: expected only on %s", b, s.Name, sb.Name)
		}
		if has(s, "host1.example.org.") {
			t.Errorf("host1 not deleted on shard %s", s.Name)
		}
	}
}

func TestAPIChangePartialFailure(t *testing.T) {
	_, ff, base := apiRouter(t, keyName, 3, "")
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	// An apex change goes to every shard, as one transaction; the second
	// shard in name order fails: nothing is written anywhere.
	ff["s1"].setFail("POST", http.StatusServiceUnavailable)
	status, body := call(t, "POST", base+"/v1/zones/example.org./records", "", `{"add":["@ 300 IN TXT \"more\""]}`)
	if status != http.StatusBadGateway {
		t.Fatalf("expected 502, got %d %s", status, body)
	}
	rep := decode[zoneReport](t, body)
	want := map[string]string{"s0": statusAborted, "s1": statusFailed, "s2": statusAborted}
	for _, sr := range rep.Shards {
		if sr.Status != want[sr.Shard] {
			t.Errorf("shard %s: expected %s, got %s", sr.Shard, want[sr.Shard], sr.Status)
		}
	}
	if !strings.Contains(rep.Error, "s1") || !strings.Contains(rep.Error, "nothing was written") {
		t.Errorf("expected the error to name the failed shard and say nothing was written, got %q", rep.Error)
	}
	for _, s := range []string{"s0", "s2"} {
		if slices.ContainsFunc(ff[s].zone("example.org."), func(rr dns.RR) bool { return strings.Contains(rr.String(), `"more"`) }) {
			t.Errorf("shard %s applied a part of an aborted change", s)
		}
	}
	ff["s1"].setFail("POST", 0)

	// A refusal by the first shard writes nothing and keeps its status.
	ff["s0"].setFail("POST", http.StatusBadRequest)
	status, body = call(t, "POST", base+"/v1/zones/example.org./records", "", `{"add":["@ 300 IN TXT \"more\""]}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "nothing was written") {
		t.Errorf("expected 400 with nothing written, got %d %s", status, body)
	}
}

// TestAPIChangeRecoveredFirst: a participant's recovery aborted the
// transaction before the router asked for its commit (the router was
// slow): the router runs the change again under a new ID, and the client
// sees it written once.
func TestAPIChangeRecoveredFirst(t *testing.T) {
	_, ff, base := apiRouter(t, keyName, 3, "")
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	ff["s0"].mu.Lock() // s0 coordinates: the first shard by name
	ff["s0"].recovered = 1
	ff["s0"].mu.Unlock()
	status, body := call(t, "POST", base+"/v1/zones/example.org./records", "", `{"add":["@ 300 IN TXT \"more\""]}`)
	if status != http.StatusOK {
		t.Fatalf("expected 200 after the change ran again, got %d %s", status, body)
	}
	decides := 0
	for _, r := range ff["s0"].requests("POST") {
		if strings.HasSuffix(r.path, "/decide") {
			decides++
		}
	}
	if decides != 2 {
		t.Errorf("expected two transactions (the recovered one, then a new ID), got %d decisions", decides)
	}
	for _, s := range []string{"s0", "s1", "s2"} {
		n := 0
		for _, rr := range ff[s].zone("example.org.") {
			if strings.Contains(rr.String(), `"more"`) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("shard %s holds the record %d times, expected once", s, n)
		}
	}
}

func TestAPIChangeBadRequests(t *testing.T) {
	_, _, base := apiRouter(t, keyName, 2, "")
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	for _, body := range []string{`{}`, `{"add":["www IN A"]}`, `{"nope":1}`, `{"delete":[{"type":"A"}]}`, `{"delete":[{"name":"www.example.net."}]}`} {
		if status, out := call(t, "POST", base+"/v1/zones/example.org./records", "", body); status != http.StatusBadRequest {
			t.Errorf("%s: expected 400, got %d %s", body, status, out)
		}
	}
	if status, out := call(t, "POST", base+"/v1/zones/example.net./records", "", `{"add":["www.example.net. 300 IN A 192.0.2.1"]}`); status != http.StatusNotFound {
		t.Errorf("change of an unknown zone: expected 404, got %d %s", status, out)
	}
}

// TestAPIContentType: the router refuses a body of the wrong type with 415
// before any shard sees it, and sends the shards the types they ask for
// (the fake shards refuse others as members do).
func TestAPIContentType(t *testing.T) {
	_, ff, base := apiRouter(t, keyName, 2, "")
	change := `{"add":["www 300 IN A 192.0.2.1"]}`
	for _, tc := range []struct{ method, path, ctype, body string }{
		{"PUT", "/v1/zones/example.org.", "", splitZone()},
		{"PUT", "/v1/zones/example.org.", "application/json", splitZone()},
		{"POST", "/v1/zones/example.org./records", "", change},
		{"POST", "/v1/zones/example.org./records", "text/dns", change},
	} {
		status, body := apitest.CallType(t, tc.method, base+tc.path, "", tc.ctype, tc.body)
		if status != http.StatusUnsupportedMediaType || !strings.Contains(string(body), "Content-Type") {
			t.Errorf("%s %s as %q: expected 415 with a JSON error, got %d %s", tc.method, tc.path, tc.ctype, status, body)
		}
	}
	for name, f := range ff {
		if got := f.requests(""); len(got) != 0 {
			t.Errorf("expected no request on shard %s, got %v", name, got)
		}
	}
	if status, body := apitest.CallType(t, "PUT", base+"/v1/zones/example.org.", "", "text/dns", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	if status, body := apitest.CallType(t, "POST", base+"/v1/zones/example.org./records", "", "application/json", `{"add":["www 300 IN A 192.0.2.1","mail 300 IN A 192.0.2.2","ftp 300 IN A 192.0.2.3"]}`); status != http.StatusOK {
		t.Errorf("POST over the shards: %d %s", status, body)
	}
}

// TestAPIMaxChangeRecords: in key mode name the router refuses a change
// over max_change_records with 413 before any shard sees it.
func TestAPIMaxChangeRecords(t *testing.T) {
	c, ff, base := apiRouter(t, keyName, 2, "")
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	c.cfg.maxChange = 2
	before := len(ff["s0"].requests("")) + len(ff["s1"].requests(""))
	status, body := call(t, "POST", base+"/v1/zones/example.org./records", "", `{"add":["a 300 IN A 192.0.2.1","b 300 IN A 192.0.2.1"],"delete":[{"name":"www"}]}`)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "max_change_records") {
		t.Errorf("expected 413 naming max_change_records, got %d %s", status, body)
	}
	if after := len(ff["s0"].requests("")) + len(ff["s1"].requests("")); after != before {
		t.Errorf("expected no shard request for a refused change, got %d more", after-before)
	}
	if status, body := call(t, "POST", base+"/v1/zones/example.org./records", "", `{"add":["a 300 IN A 192.0.2.1","b 300 IN A 192.0.2.1"]}`); status != http.StatusOK {
		t.Errorf("a change at the limit: %d %s", status, body)
	}
}

func TestAPIZoneMode(t *testing.T) {
	c, ff, base := apiRouter(t, keyZone, 3, "")
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	s := c.zoneShard(splitOrigin)
	for name, f := range ff {
		if held := f.zone(splitOrigin) != nil; held != (name == s.Name) {
			t.Errorf("shard %s holds the zone: %v, expected only on %s", name, held, s.Name)
		}
	}
	if c.shardFor("host1.example.org.") != s {
		t.Errorf("expected the zone's names keyed to its shard")
	}
	body := `{"add":["a.b.c 300 IN A 192.0.2.1","x 300 IN A 192.0.2.2"]}`
	if status, out := call(t, "POST", base+"/v1/zones/example.org./records", "", body); status != http.StatusOK {
		t.Errorf("POST: expected 200, got %d %s", status, out)
	}
	if got := ff[s.Name].requests("POST"); len(got) != 1 || got[0].body != body {
		t.Errorf("POST: expected the body as is on %s, got %v", s.Name, got)
	}
	if status, out := call(t, "GET", base+"/v1/zones/example.org.", "", ""); status != http.StatusOK || !strings.Contains(string(out), "a.b.c.example.org.") {
		t.Errorf("GET zone: unexpected %d %s", status, out)
	}
	if status, out := call(t, "DELETE", base+"/v1/zones/example.org.", "", ""); status != http.StatusOK {
		t.Errorf("DELETE: expected 200, got %d %s", status, out)
	}
	if c.zones.longest("host1.example.org.") != splitOrigin {
		t.Errorf("expected the server block's zone to stay known")
	}
}

func TestAPIToken(t *testing.T) {
	_, _, base := apiRouter(t, keyName, 2, "router-secret")
	if status, _ := call(t, "GET", base+"/v1/zones", "", ""); status != http.StatusUnauthorized {
		t.Errorf("expected 401 without a token, got %d", status)
	}
	if status, _ := call(t, "GET", base+"/v1/zones", "wrong", ""); status != http.StatusUnauthorized {
		t.Errorf("expected 401 with a wrong token, got %d", status)
	}
	if status, body := call(t, "GET", base+"/v1/zones", "router-secret", ""); status != http.StatusOK {
		t.Errorf("expected 200 with the token, got %d %s", status, body)
	}

	c := splitRouter(t, keyName, 1)
	c.cfg.api = "192.0.2.1:8053"
	if err := c.startAPI(); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("expected a non-loopback API without token refused, got %v", err)
	}
}

func TestAPIFailover(t *testing.T) {
	c, ff, base := apiRouter(t, keyName, 2, "")
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for _, s := range c.shards() {
		// The dead one first: the other is down for a moment.
		s.Members = []*Member{apiMember(s.Name, dead.URL), apiMember(s.Name, ff[s.Name].srv.URL)}
		s.Members[1].Failed(time.Now(), time.Minute)
	}
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT through a dead API: expected 200, got %d %s", status, body)
	}
	for _, s := range c.shards() {
		s.Members = []*Member{apiMember(s.Name, dead.URL)}
	}
	if status, body := call(t, "GET", base+"/v1/zones", "", ""); status != http.StatusBadGateway {
		t.Errorf("expected 502 when no API answers, got %d %s", status, body)
	}
}

func TestAPIShards(t *testing.T) {
	c, _, base := apiRouter(t, keyZone, 2, "")
	c.shards()[0].Members = []*Member{newMember("s0", "127.0.0.1:1", 0, nil)}
	c.shards()[0].Members[0].Failed(time.Now(), time.Minute)
	status, body := call(t, "GET", base+"/v1/shards", "", "")
	if status != http.StatusOK {
		t.Fatalf("expected 200, got %d %s", status, body)
	}
	view := decode[struct {
		Key    string      `json:"key"`
		Shards []shardView `json:"shards"`
	}](t, body)
	if view.Key != keyZone || len(view.Shards) != 2 || len(view.Shards[0].Members) != 1 || !view.Shards[0].Members[0].Down {
		t.Errorf("unexpected view %s", body)
	}
}

// TestAPINewCutOverNames: in key mode name, a delegation made by a record
// change over names that exist is refused (they live on their own shards);
// one over nothing, or below an existing cut, is placed on every shard.
func TestAPINewCutOverNames(t *testing.T) {
	_, ff, base := apiRouter(t, keyName, 3, "")
	if status, body := call(t, "PUT", base+"/v1/zones/example.org.", "", splitZone()); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, body)
	}
	posts := func() int { // parts sent: changes, or prepares of a transaction
		n := 0
		for _, f := range ff {
			for _, r := range f.requests("POST") {
				if strings.HasSuffix(r.path, "/records") || strings.HasSuffix(r.path, "/prepare") {
					n++
				}
			}
		}
		return n
	}
	if status, body := call(t, "POST", base+"/v1/zones/example.org./records", "",
		`{"add":["x.y.example.org. 300 IN A 192.0.2.1"]}`); status != http.StatusOK {
		t.Fatalf("POST x.y: %d %s", status, body)
	}
	before := posts()
	status, body := call(t, "POST", base+"/v1/zones/example.org./records", "", `{"add":["y 300 IN NS ns.elsewhere.net."]}`)
	if status != http.StatusConflict || !strings.Contains(string(body), "PUT") {
		t.Fatalf("cut over x.y: expected 409 naming PUT, got %d %s", status, body)
	}
	if posts() != before {
		t.Fatal("a refused change reached a shard")
	}
	status, body = call(t, "POST", base+"/v1/zones/example.org./records", "", `{"add":["fresh 300 IN NS ns.elsewhere.net."]}`)
	if status != http.StatusOK {
		t.Fatalf("cut over nothing: expected 200, got %d %s", status, body)
	}
	if posts() != before+3 {
		t.Errorf("cut over nothing: expected a part on each of 3 shards, got %d", posts()-before)
	}
}
