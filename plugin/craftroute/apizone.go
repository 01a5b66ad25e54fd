package craftroute

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/coredns/coredns/plugin"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
)

// The zone and record paths of the router's API, placed by the key mode.

// routedZone is a zone as the router lists it: the highest serial, the sum
// of the records of the shards that hold it (replicated records counted
// once per shard), and those shards.
type routedZone struct {
	zoneapi.ZoneInfo
	Shards []string `json:"shards"`
}

func (a *apiServer) listZones(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), shardCallTimeout)
	defer cancel()
	lists, errs := a.zoneLists(ctx)
	if err := errors.Join(errs...); err != nil {
		httpapi.WriteError(w, http.StatusBadGateway, err.Error())
		return
	}
	zones := mergeZoneLists(a.c.shards(), lists)
	if a.c.keyMode() == keyName {
		for i := range zones {
			if serial, ok := a.c.currentSerial(ctx, zones[i].Zone); ok {
				zones[i].Serial = serial // the zone's, over its shards
			}
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, zones)
}

// mergeZoneLists joins the shards' zone lists, sorted by zone.
func mergeZoneLists(shards []*Shard, lists [][]zoneapi.ZoneInfo) []routedZone {
	byZone := map[string]*routedZone{}
	for i, list := range lists {
		for _, zi := range list {
			o := dnsname.Lower(dns.Fqdn(zi.Zone))
			rz := byZone[o]
			if rz == nil {
				rz = &routedZone{ZoneInfo: zoneapi.ZoneInfo{Zone: o, Serial: zi.Serial}}
				byZone[o] = rz
			}
			if zonerules.SerialAfter(zi.Serial, rz.Serial) {
				rz.Serial = zi.Serial
			}
			rz.Records += zi.Records
			rz.Shards = append(rz.Shards, shards[i].Name)
		}
	}
	out := make([]routedZone, 0, len(byZone))
	for _, rz := range byZone {
		slices.Sort(rz.Shards)
		out = append(out, *rz)
	}
	slices.SortFunc(out, func(a, b routedZone) int { return strings.Compare(a.Zone, b.Zone) })
	return out
}

func (a *apiServer) putZone(w http.ResponseWriter, r *http.Request) {
	origin, body, err := zoneapi.ReadZone(w, r)
	if err == nil && plugin.Zones(a.c.Zones).Matches(origin) == "" {
		// The router would not answer for it.
		err = zoneapi.Errorf(http.StatusForbidden, "zone %q is not in this router's server block (%s): nothing was written", origin, strings.Join(a.c.Zones, " "))
	}
	if err != nil {
		fail(w, err)
		return
	}
	// A client going away does not stop a write half way through.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), importTimeout(len(body)))
	defer cancel()
	status, v := a.importZone(ctx, origin, body)
	httpapi.WriteJSON(w, status, v)
}

func (a *apiServer) getZone(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	c := a.c
	if c.keyMode() == keyZone {
		a.proxy(r.Context(), w, c.zoneShard(origin), http.MethodGet, zonePath(origin), "", nil, "")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), shardCallTimeout)
	defer cancel()
	replies, errs := a.each(ctx, c.shards(), http.MethodGet, zonePath(origin), nil, "")
	var exports [][]byte
	for i, rep := range replies {
		switch {
		case errs[i] != nil:
			fail(w, errs[i])
			return
		case rep.status == http.StatusNotFound:
			log.Warningf("zone %s is not on shard %s", origin, c.shards()[i].Name)
		case rep.status != http.StatusOK:
			fail(w, rep.err(c.shards()[i]))
			return
		default:
			exports = append(exports, rep.body)
		}
	}
	if len(exports) == 0 {
		fail(w, zoneapi.Errorf(http.StatusNotFound, "zone %q not found", origin))
		return
	}
	rrs, err := mergeExports(origin, exports)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/dns")
	w.Write(zoneText(rrs))
}

// mergeExports joins the zone file texts of the shards of origin: each
// record once (replicated records are equal but for their TTL), the SOA with
// the highest serial first.
func mergeExports(origin string, exports [][]byte) ([]dns.RR, error) {
	var (
		soa  *dns.SOA
		out  = []dns.RR{nil}
		seen = map[string]bool{}
	)
	for _, text := range exports {
		zp := dns.NewZoneParser(bytes.NewReader(text), origin, "")
		zp.SetIncludeAllowed(false)
		zp.SetDefaultTTL(zoneapi.DefaultTTL)
		for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
			if s, isSOA := rr.(*dns.SOA); isSOA {
				if soa == nil || zonerules.SerialAfter(s.Serial, soa.Serial) {
					soa = s
				}
				continue
			}
			h := rr.Header()
			k := dnsname.Lower(h.Name) + " " + dns.TypeToString[h.Rrtype] + " " + strings.TrimPrefix(rr.String(), h.String())
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, rr)
		}
		if err := zp.Err(); err != nil {
			return nil, fmt.Errorf("export of %s: %w", origin, err)
		}
	}
	if soa == nil {
		return out[1:], nil
	}
	out[0] = soa
	return out, nil
}

func (a *apiServer) deleteZone(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	c := a.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), shardCallTimeout)
	defer cancel()
	if c.keyMode() == keyZone {
		if a.proxy(ctx, w, c.zoneShard(origin), http.MethodDelete, zonePath(origin), "", nil, "") == http.StatusOK {
			c.zones.remove(origin)
		}
		return
	}
	shards := byName(c.shards())
	replies, errs := a.each(ctx, shards, http.MethodDelete, zonePath(origin), nil, "")
	rep := zoneReport{Zone: origin, Shards: make([]shardReport, len(shards))}
	deleted, absent := 0, 0
	for i, s := range shards {
		sr := shardReport{Shard: s.Name}
		switch {
		case errs[i] != nil:
			sr.fail(errs[i])
		case replies[i].status == http.StatusOK:
			sr.Status = statusCommitted
			deleted++
		case replies[i].status == http.StatusNotFound:
			sr.Status = statusAbsent
			absent++
		default:
			sr.fail(replies[i].err(s))
		}
		rep.Shards[i] = sr
	}
	switch {
	case absent == len(shards):
		fail(w, zoneapi.Errorf(http.StatusNotFound, "zone %q not found", origin))
	case deleted+absent < len(shards):
		status, msg := rep.failure("DELETE")
		rep.Error = msg
		httpapi.WriteJSON(w, status, rep)
	default:
		c.zones.remove(origin)
		httpapi.WriteJSON(w, http.StatusOK, rep)
	}
}

func (a *apiServer) getRecords(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	name, _, err := zoneapi.RecordsQuery(r, origin)
	if err != nil {
		fail(w, err)
		return
	}
	// In key mode "name" the owner shard holds the name, replicated or not.
	s := a.c.shardFor(name)
	if a.c.keyMode() == keyZone {
		s = a.c.zoneShard(origin)
	}
	a.proxy(r.Context(), w, s, http.MethodGet, recordsPath(origin), r.URL.RawQuery, nil, "")
}

func (a *apiServer) changeRecords(w http.ResponseWriter, r *http.Request) {
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), shardCallTimeout)
	defer cancel()
	// A shard that fenced the router's map wrote nothing: the router reads
	// the map and routes the change again (fence.go), as long as the map
	// moves (a migration moves it a batch at a time).
	for try := 0; ; try++ {
		mctx, mark := withFenceMark(a.c.withRouteEpoch(ctx))
		rec := newAPIRecorder()
		a.changeRecordsOnce(mctx, rec, origin, body)
		if f := mark.fenced(); try < fenceRetries && f != nil && a.c.refreshMap(ctx, f) {
			continue
		}
		rec.copyTo(w)
		return
	}
}

// changeRecordsOnce routes a record change by the map the router routes
// by.
func (a *apiServer) changeRecordsOnce(ctx context.Context, w http.ResponseWriter, origin string, body []byte) {
	c := a.c
	if c.keyMode() == keyZone {
		a.proxy(ctx, w, c.zoneShard(origin), http.MethodPost, recordsPath(origin), "", body, "application/json")
		return
	}
	parts, err := c.splitChange(ctx, origin, body)
	if err != nil {
		fail(w, err)
		return
	}
	if len(parts) == 1 {
		for s := range parts {
			a.proxy(ctx, w, s, http.MethodPost, recordsPath(origin), "", body, "application/json")
		}
		return
	}
	status, rep := a.applyTx(ctx, origin, parts)
	httpapi.WriteJSON(w, status, rep)
}

// applyTx applies the parts of a record change that spans shards as one
// transaction (txn.go): all of them or none.
func (a *apiServer) applyTx(ctx context.Context, origin string, parts map[*Shard]*zoneapi.Change) (int, zoneReport) {
	prep := make(map[*Shard]txn.Prepare, len(parts))
	for s, p := range parts {
		prep[s] = txn.Prepare{Change: p}
	}
	res := a.runTx(ctx, origin, prep)
	shards := byName(slices.Collect(maps.Keys(parts)))
	rep := zoneReport{Zone: origin, Shards: make([]shardReport, len(shards))}
	for i, s := range shards {
		sr := shardReport{Shard: s.Name, Status: statusAborted}
		switch {
		case res.committed && slices.Contains(res.late, s):
			sr.Status = statusCommitted
			sr.Error = "committed; the shard applies it on its own (it did not confirm in time)"
		case res.committed:
			sr.Status, sr.Serial = statusCommitted, res.serial[s]
		case res.failed == s && res.err != nil:
			sr.fail(res.err)
		case res.failed == s:
			sr.Status, sr.Error, sr.code = statusFailed, res.vote.Error, cmp.Or(res.vote.Status, http.StatusConflict)
		case res.failed == nil:
			sr.Status = statusUnknown
		}
		rep.Shards[i] = sr
	}
	switch {
	case res.committed:
		for _, s := range res.serial {
			if rep.Serial == 0 || zonerules.SerialAfter(s, rep.Serial) {
				rep.Serial = s
			}
		}
		if serial, ok := a.c.currentSerial(ctx, origin); ok {
			rep.Serial = serial // the zone's, over its shards
		}
		return http.StatusOK, rep
	case res.failed == nil:
		rep.Error = fmt.Sprint(res.err)
		return http.StatusServiceUnavailable, rep
	}
	status, msg := http.StatusBadGateway, res.err
	var zerr *zoneapi.Error
	switch {
	case msg == nil:
		status, msg = cmp.Or(res.vote.Status, http.StatusConflict), errors.New(res.vote.Error)
	case errors.As(msg, &zerr):
		status = zerr.Status
	}
	rep.Error = fmt.Sprintf("shard %s refused its part, nothing was written: %v", res.failed.Name, msg)
	return status, rep
}

// Outcomes of one shard's part of a write.
const (
	statusCommitted = "committed"
	statusFailed    = "failed"
	statusAbsent    = "absent"
	statusAborted   = "aborted"
	statusUnknown   = "unknown"
)

// shardReport is one shard's part of a write that reaches several shards.
type shardReport struct {
	Shard   string `json:"shard"`
	Status  string `json:"status"`
	Serial  uint32 `json:"serial,omitempty"`
	Records int    `json:"records,omitempty"`
	Error   string `json:"error,omitempty"`

	code int // HTTP status of a failure
}

func (sr *shardReport) fail(err error) {
	sr.Status, sr.code, sr.Error = statusFailed, http.StatusBadGateway, err.Error()
	var zerr *zoneapi.Error
	if errors.As(err, &zerr) {
		sr.code = zerr.Status
	}
}

// zoneReport is the answer to a write that reaches several shards.
type zoneReport struct {
	Zone    string        `json:"zone"`
	Serial  uint32        `json:"serial,omitempty"`
	Records int           `json:"records,omitempty"`
	Shards  []shardReport `json:"shards"`
	Error   string        `json:"error,omitempty"`
}

func (rep *zoneReport) committed() int {
	n := 0
	for _, sr := range rep.Shards {
		if sr.Status == statusCommitted {
			n++
		}
	}
	return n
}

// failure returns the status and the message of a write of which some parts
// failed: the shards' own 4xx status when nothing was written and they all
// refused alike, else 502; the message names the failed shards and says
// that the parts already written stay.
func (rep *zoneReport) failure(op string) (int, string) {
	var failed, done []string
	code := 0
	for _, sr := range rep.Shards {
		switch sr.Status {
		case statusFailed:
			failed = append(failed, sr.Shard)
			switch {
			case code == 0:
				code = sr.code
			case code != sr.code:
				code = -1
			}
		case statusCommitted:
			done = append(done, sr.Shard)
		}
	}
	msg := fmt.Sprintf("%s of %s failed on shard %s", op, rep.Zone, strings.Join(failed, ", "))
	if len(failed) == 1 && len(rep.Shards) == 1 {
		msg = rep.Shards[0].Error
	}
	if len(done) == 0 {
		if code >= 400 && code < 500 {
			return code, msg + ": nothing was written"
		}
		return http.StatusBadGateway, msg + ": nothing was written"
	}
	return http.StatusBadGateway, fmt.Sprintf("%s; the parts on shard %s were written and stay: repeat the request once the failed shards answer",
		msg, strings.Join(done, ", "))
}
