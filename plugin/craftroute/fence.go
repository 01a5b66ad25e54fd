package craftroute

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// Fencing by the shard map (internal/shardmap, shardproto/epoch.go): what
// a router sends a member carries the epoch of the map it routed it by, in
// an EDNS option for DNS and in the shardmap.EpochHeader for the API. A
// member with a newer map refuses what that map no longer places on it
// (errFenced here), or answers with its epoch (a notice). Either way the
// router reads the map (refreshMap); a refused request is routed again,
// once, by the new map (resolve, serveUpdate, the API's record changes).

// errFenced is a member's refusal of a request routed by an older map.
type errFenced struct {
	shard string
	epoch uint64 // the member's
	msg   string
}

func (e *errFenced) Error() string {
	return fmt.Sprintf("shard %s fenced the router's shard map (its epoch is %d): %s", e.shard, e.epoch, e.msg)
}

// fencedBy returns the member's refusal err carries, if any.
func fencedBy(err error) (*errFenced, bool) {
	var f *errFenced
	ok := errors.As(err, &f)
	return f, ok
}

// routeKey is the context key of the routing a request is routed by.
type routeKey struct{}

// withRouteEpoch returns ctx carrying the routing the router uses now:
// everything sent for the request says its epoch. It is read once, when
// the request starts, so that it is never newer than the routing its names
// were placed by (a routing is swapped only for a newer one; an older
// epoch only makes members judge more strictly). A query's resolution
// keeps it in its marks instead (resolve.go), which it allocates anyway.
func (c *Craftroute) withRouteEpoch(ctx context.Context) context.Context {
	return context.WithValue(ctx, routeKey{}, c.routes())
}

// routedBy returns the routing a request under ctx is routed by: its
// resolution's, else the one withRouteEpoch set, else the current one.
func (c *Craftroute) routedBy(ctx context.Context) *routing {
	if mk, ok := ctx.Value(marksKey{}).(*marks); ok && mk.rt != nil {
		return mk.rt
	}
	if rt, ok := ctx.Value(routeKey{}).(*routing); ok {
		return rt
	}
	return c.routes()
}

// routeEpoch returns the epoch a request under ctx is routed by.
func (c *Craftroute) routeEpoch(ctx context.Context) uint64 { return c.routedBy(ctx).epoch() }

// writeEpoch returns the epoch a write under ctx says it is routed by: its
// map's, or shardmap.Unmapped for a router that routes by its Corefile
// (shard_map off), so that members take it as routed; 0 while a router of
// the agreed map has none yet (members holding one refuse its writes of
// names their shard does not hold alone).
func (c *Craftroute) writeEpoch(ctx context.Context) uint64 {
	if c.cfg.mapMode == mapOff {
		return shardmap.Unmapped
	}
	return c.routeEpoch(ctx)
}

// markEpoch sets, in query req, the epoch it is routed by and whether it
// goes to the owner of its name, unless it says an epoch already. mk is
// the resolution's marks, nil outside one.
func (c *Craftroute) markEpoch(ctx context.Context, mk *marks, req *dns.Msg, owner bool) {
	if mk != nil && mk.rt != nil {
		mk.rt.markEpoch(req, owner) // no walk up ctx on a query's path
		return
	}
	c.routedBy(ctx).markEpoch(req, owner)
}

// markEpoch adds rt's epoch option to query req (built once per routing:
// routing.epochOpts), unless req has one.
func (rt *routing) markEpoch(req *dns.Msg, owner bool) {
	if rt == nil || rt.m == nil {
		return
	}
	opt := req.IsEdns0()
	if opt == nil {
		req.SetEdns0(dns.DefaultMsgSize, false)
		opt = req.IsEdns0()
	}
	for _, o := range opt.Option {
		if o.Option() == shardproto.EpochCode {
			return
		}
	}
	i := 0
	if owner {
		i = 1
	}
	// Shared by every query of the routing: packing only reads it.
	opt.Option = append(opt.Option, rt.epochOpts[i])
}

// checkEpoch reads the map epoch in a member's answer: a newer one than
// the router's makes it read the map (in the background for a notice); a
// fence is returned as *errFenced.
func (c *Craftroute) checkEpoch(s *Shard, resp *dns.Msg) *errFenced {
	e, fenced, ok := shardproto.AnswerEpoch(resp)
	if !ok {
		return nil
	}
	if !fenced {
		if e > c.routes().epoch() {
			c.mapsf.background(c, e)
		}
		return nil
	}
	msg := "refused"
	if x := ede.Of(resp); x != nil {
		msg = x.ExtraText
	}
	return &errFenced{shard: s.Name, epoch: e, msg: msg}
}

// headerEpoch reads the member's epoch in an API answer's header as
// checkEpoch does; it returns it, 0 without one.
func (c *Craftroute) headerEpoch(v string) uint64 {
	if v == "" {
		return 0
	}
	e, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0
	}
	if e > c.routes().epoch() {
		c.mapsf.background(c, e)
	}
	return e
}

// mapFlight coalesces the router's reads of the map that refusals and
// notices ask for: one at a time, and none while the router's map is at
// least the epoch asked for.
type mapFlight struct {
	mu   sync.Mutex
	cur  chan struct{} // closed when the read in flight ends; nil when none
	last time.Time     // when the last read ended
}

// minMapRead spaces the reads notices ask for: a member that keeps
// announcing an epoch no member serves (a forged answer) costs at most one
// read of the map per minMapRead.
const minMapRead = 100 * time.Millisecond

// refresh reads the map until the router routes by epoch or newer, or
// ctx ends; it reports whether it does. Concurrent callers share a read;
// one that joined a read begun before the epoch was committed (a notice's)
// and is still behind after it waits for one more.
func (f *mapFlight) refresh(ctx context.Context, c *Craftroute, epoch uint64) bool {
	if c.cfg.mapMode == mapOff {
		return false // it routes by its Corefile, whatever the members say
	}
	for reads := 0; c.routes().epoch() < epoch; reads++ {
		if reads == 2 {
			return false // no member serves the epoch yet, or none answered
		}
		f.mu.Lock()
		ch := f.cur
		if ch == nil {
			ch = make(chan struct{})
			f.cur = ch
			wait := minMapRead - time.Since(f.last)
			go f.read(c, ch, wait)
		}
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// background starts a read of the map when the router is behind epoch and
// none is in flight.
func (f *mapFlight) background(c *Craftroute, epoch uint64) {
	if holdMap || c.cfg.mapMode == mapOff {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil || c.routes().epoch() >= epoch {
		return
	}
	ch := make(chan struct{})
	f.cur = ch
	go f.read(c, ch, minMapRead-time.Since(f.last))
}

// read reads the map from the members after wait, adopts it when newer,
// and closes ch.
func (f *mapFlight) read(c *Craftroute, ch chan struct{}, wait time.Duration) {
	if wait > 0 {
		time.Sleep(wait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mapWait)
	best, _, err := c.fetchMap(ctx)
	cancel()
	if err == nil && best != nil {
		if err = c.adopt(best); err != nil {
			log.Warningf("shard map epoch %d: %v", best.Epoch, err)
		}
	}
	f.mu.Lock()
	f.cur = nil
	f.last = time.Now()
	f.mu.Unlock()
	close(ch)
}

// fenceRetries bounds how many times a request a member fenced is routed
// again, each time by a newer map: a migration moves the map a batch at a
// time, every few hundred milliseconds, and a request may meet several.
const fenceRetries = 8

// refreshMap reads the map after a member fenced the router (err carries
// its refusal) and reports whether the router now routes by the member's
// epoch or a newer one: the request may then be routed again.
func (c *Craftroute) refreshMap(ctx context.Context, err error) bool {
	f, ok := fencedBy(err)
	if !ok {
		return false
	}
	staleMaps.Inc()
	return c.mapsf.refresh(ctx, c, f.epoch)
}

// fenceMark records, for a request that may be routed again, the refusal a
// member fenced it with (noteFenced), wherever in the request it came.
type fenceMark struct {
	mu  sync.Mutex
	err *errFenced
}

type fenceMarkKey struct{}

// withFenceMark returns ctx with a new mark, and the mark.
func withFenceMark(ctx context.Context) (context.Context, *fenceMark) {
	m := &fenceMark{}
	return context.WithValue(ctx, fenceMarkKey{}, m), m
}

// noteFenced records f in ctx's mark, if it has one.
func noteFenced(ctx context.Context, f *errFenced) {
	if m, ok := ctx.Value(fenceMarkKey{}).(*fenceMark); ok {
		m.mu.Lock()
		if m.err == nil || f.epoch > m.err.epoch {
			m.err = f
		}
		m.mu.Unlock()
	}
}

// fenced returns the refusal recorded, nil when none was.
func (m *fenceMark) fenced() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		return nil
	}
	return m.err
}

// apiRecorder keeps an API answer that may be replaced by the answer to the
// request routed again (a record change's answer is small).
type apiRecorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func newAPIRecorder() *apiRecorder { return &apiRecorder{h: http.Header{}} }

func (r *apiRecorder) Header() http.Header { return r.h }

func (r *apiRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *apiRecorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// copyTo sends what was recorded to w.
func (r *apiRecorder) copyTo(w http.ResponseWriter) {
	maps.Copy(w.Header(), r.h)
	w.WriteHeader(cmp.Or(r.code, http.StatusOK))
	w.Write(r.body.Bytes())
}

// holdMap is a test hook (integration's TestShardMapFenced): with
// CRAFTROUTE_TEST_HOLD_MAP set, a router that has a map reads it again only
// when a member fences it, never on its own (pollMap) nor on a notice, so
// that a test holds it at an old epoch.
var holdMap = os.Getenv("CRAFTROUTE_TEST_HOLD_MAP") != ""
