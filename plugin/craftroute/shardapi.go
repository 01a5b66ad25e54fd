package craftroute

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/internal/zonerules"
)

// shardClient calls the shards' HTTP APIs.
type shardClient struct {
	c      *Craftroute
	client *http.Client
}

func newShardClient(c *Craftroute) *shardClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // shards are reached directly
	tr.MaxIdleConnsPerHost = 16
	return &shardClient{c: c, client: &http.Client{Transport: tr}}
}

func (sc *shardClient) close() { sc.client.CloseIdleConnections() }

func zonePath(origin string) string    { return "/v1/zones/" + url.PathEscape(origin) }
func recordsPath(origin string) string { return zonePath(origin) + "/records" }

// open sends one request to the API of shard s: to its members in the order
// of their liveness, the next one on a connection error or a 5xx status (a
// member accepts writes whether it leads or not). It returns the first other
// answer, or the last 5xx one; the caller closes its body.
func (sc *shardClient) open(ctx context.Context, s *Shard, method, path, query string, body []byte, ctype string) (*http.Response, error) {
	var (
		resp    *http.Response
		last5xx *http.Response
		lastErr error
		tried   bool
		buf     [8]*Member
	)
	_, cerr := s.failover(ctx, buf[:0], func(_ int, m *Member) bool {
		if m.API == "" {
			return false
		}
		tried = true
		u := m.API + path
		if query != "" {
			u += "?" + query
		}
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, u, rd)
		if err != nil {
			lastErr = err
			return true
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if sc.c.cfg.shardToken != "" {
			req.Header.Set("Authorization", "Bearer "+sc.c.cfg.shardToken)
		}
		if e := sc.c.writeEpoch(ctx); e != 0 {
			req.Header.Set(shardmap.EpochHeader, strconv.FormatUint(e, 10))
		}
		r, err := sc.client.Do(req)
		switch {
		case err != nil:
			lastErr = err
			return false
		case r.StatusCode >= 500:
			if last5xx != nil {
				discard(last5xx)
			}
			last5xx = r
			return false
		}
		resp = r
		return true
	})
	switch {
	case resp != nil:
		if last5xx != nil {
			discard(last5xx)
		}
		return resp, nil
	case last5xx != nil:
		return last5xx, nil
	case !tried:
		return nil, fmt.Errorf("shard %s has no API (shard_api)", s.Name)
	case lastErr == nil:
		lastErr = cerr
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, lastErr)
	}
	return nil, fmt.Errorf("shard %s: no API answered: %w", s.Name, lastErr)
}

// discard reads a little of an answer that is not used, so that its
// connection may serve again, and closes it.
func discard(r *http.Response) {
	io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
	r.Body.Close()
}

// shardReply is a shard API's answer, read whole.
type shardReply struct {
	status int
	ctype  string
	body   []byte
}

// err returns the error the reply carries as a *zoneapi.Error: of the shard's
// status for a request it refused (4xx), of 502 when the shard failed (5xx)
// or refused the router's shard_token (401, 403).
func (r *shardReply) err(s *Shard) error {
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(r.body))
	if json.Unmarshal(r.body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if msg == "" {
		msg = http.StatusText(r.status)
	}
	switch {
	case r.status == http.StatusUnauthorized || r.status == http.StatusForbidden:
		return zoneapi.Errorf(http.StatusBadGateway, "shard %s refused the router's shard_token (%d): %s", s.Name, r.status, msg)
	case r.status >= 500:
		return zoneapi.Errorf(http.StatusBadGateway, "shard %s (%d): %s", s.Name, r.status, msg)
	}
	return zoneapi.Errorf(r.status, "shard %s: %s", s.Name, msg)
}

// do is open, the answer read whole.
func (sc *shardClient) do(ctx context.Context, s *Shard, method, path, query string, body []byte, ctype string) (*shardReply, error) {
	resp, err := sc.open(ctx, s, method, path, query, body, ctype)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	if f := sc.fenced(s, resp, b); f != nil {
		noteFenced(ctx, f)
		return nil, f
	}
	return &shardReply{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: b}, nil
}

// fenced reads the member's map epoch in resp (fence.go) and returns its
// refusal of a request routed by an older map (409, shardmap.Stale), if
// it is one; body is resp's body.
func (sc *shardClient) fenced(s *Shard, resp *http.Response, body []byte) *errFenced {
	e := sc.c.headerEpoch(resp.Header.Get(shardmap.EpochHeader))
	if resp.StatusCode != http.StatusConflict || e == 0 {
		return nil
	}
	var st shardmap.Stale
	if json.Unmarshal(body, &st) != nil || !st.StaleMap {
		return nil
	}
	return &errFenced{shard: s.Name, epoch: max(e, st.Epoch), msg: st.Error}
}

// each sends the same request to every shard of shards concurrently.
func (sc *shardClient) each(ctx context.Context, shards []*Shard, method, path string, body []byte, ctype string) ([]*shardReply, []error) {
	replies := make([]*shardReply, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() { replies[i], errs[i] = sc.do(ctx, s, method, path, "", body, ctype) })
	}
	wg.Wait()
	return replies, errs
}

// proxy sends a request to shard s and copies its answer to w, streaming.
// It returns the answer's status.
func (sc *shardClient) proxy(ctx context.Context, w http.ResponseWriter, s *Shard, method, path, query string, body []byte, ctype string) int {
	resp, err := sc.open(ctx, s, method, path, query, body, ctype)
	if err != nil {
		fail(w, err)
		return http.StatusBadGateway
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusConflict {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if f := sc.fenced(s, resp, b); f != nil {
			noteFenced(ctx, f)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
		return resp.StatusCode
	}
	sc.c.headerEpoch(resp.Header.Get(shardmap.EpochHeader))
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		fail(w, (&shardReply{status: resp.StatusCode, body: b}).err(s))
		return http.StatusBadGateway
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return resp.StatusCode
}

// zoneLists returns the zone list of every shard (c.shards() order).
func (sc *shardClient) zoneLists(ctx context.Context) ([][]zoneapi.ZoneInfo, []error) {
	return sc.zoneListsOf(ctx, sc.c.shards())
}

// zoneListsOf returns the zone list of every shard of shards.
func (sc *shardClient) zoneListsOf(ctx context.Context, shards []*Shard) ([][]zoneapi.ZoneInfo, []error) {
	replies, errs := sc.each(ctx, shards, http.MethodGet, "/v1/zones", nil, "")
	lists := make([][]zoneapi.ZoneInfo, len(shards))
	for i, rep := range replies {
		switch {
		case errs[i] != nil:
		case rep.status != http.StatusOK:
			errs[i] = rep.err(shards[i])
		default:
			if err := json.Unmarshal(rep.body, &lists[i]); err != nil {
				errs[i] = fmt.Errorf("shard %s: zone list: %w", shards[i].Name, err)
			}
		}
	}
	return lists, errs
}

// importZone creates or replaces zone origin from zone file text, the PUT of
// the API and of seeds: in key mode "zone" the text goes as it is to the
// zone's shard and its answer comes back; in key mode "name" it is split
// (split.go) and each part goes to its shard concurrently. It returns the
// HTTP status and the JSON body of the answer.
func (sc *shardClient) importZone(ctx context.Context, origin string, text []byte) (int, any) {
	c := sc.c
	if c.keyMode() == keyZone {
		c.zones.add(origin)
		res, err := sc.do(ctx, c.zoneShard(origin), http.MethodPut, zonePath(origin), "", text, "text/dns")
		if err != nil {
			return http.StatusBadGateway, map[string]string{"error": err.Error()}
		}
		if !json.Valid(res.body) {
			return res.status, map[string]string{"error": strings.TrimSpace(string(res.body))}
		}
		return res.status, json.RawMessage(res.body)
	}

	rrs, err := zoneapi.ParseZoneMax(origin, string(text), c.cfg.maxZone)
	if err != nil {
		status := http.StatusBadRequest
		if st, _, ok := zoneapi.Status(err); ok {
			status = st
		}
		return status, map[string]string{"error": err.Error()}
	}
	if cur, ok := c.currentSerial(ctx, origin); ok {
		// Replaced: every shard takes one serial, after the zone's.
		raiseSOA(rrs, cur)
	}
	c.zones.add(origin)
	parts := c.split(origin, rrs)
	shards := byName(c.shards())
	rep := zoneReport{Zone: origin, Records: len(rrs), Shards: make([]shardReport, len(shards))}
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() {
			sr := shardReport{Shard: s.Name}
			res, err := sc.do(ctx, s, http.MethodPut, zonePath(origin), "", zoneText(parts[s]), "text/dns")
			var out zoneapi.ZoneInfo
			switch {
			case err != nil:
				sr.fail(err)
			case res.status != http.StatusOK:
				sr.fail(res.err(s))
			case json.Unmarshal(res.body, &out) != nil:
				sr.fail(fmt.Errorf("shard %s: unreadable answer", s.Name))
			default:
				sr.Status, sr.Serial, sr.Records = statusCommitted, out.Serial, out.Records
			}
			rep.Shards[i] = sr
		})
	}
	wg.Wait()
	for _, sr := range rep.Shards {
		if sr.Status == statusCommitted && (rep.Serial == 0 || zonerules.SerialAfter(sr.Serial, rep.Serial)) {
			rep.Serial = sr.Serial
		}
	}
	if serial, ok := c.currentSerial(ctx, origin); ok && rep.committed() == len(shards) {
		rep.Serial = serial
	}
	if rep.committed() < len(shards) {
		var status int
		status, rep.Error = rep.failure("PUT")
		return status, rep
	}
	return http.StatusOK, rep
}
