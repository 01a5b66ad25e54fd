package craftroute

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/namefilter"
	"github.com/craftdns/craftdns/internal/shardproto"
)

// Existence filters (internal/namefilter; issue 54, item 3). In key mode
// "name" a name its owner shard does not hold is asked of every shard
// (resolve.go, step): another may hold it as an empty non-terminal, or a
// deeper closest encloser, or the wildcard that synthesizes it. A flood of
// made-up names then costs a query to every shard each. So the router
// keeps, per zone that needed such a broadcast, each shard's filter of the
// names the zone holds there (GET /v1/zones/{zone}/filter of a member) and
// asks the other shards only when some filter may hold the name, an
// ancestor of it deeper than the owner's closest encloser, or the wildcard
// at that encloser.
//
// Coherence. A filter holds every write its member's group acknowledged
// before the request came (the member confirms its state with its leader
// first). What members notify afterwards (lease.go) is added to the set's
// own filter of noticed names, from before the fetch begins, so nothing
// acknowledged later is missed: a transaction part notifies its names when
// it is prepared, before any part commits, and members build their filters
// with the names of the parts prepared there. A write applied before a
// member built its filter but not acknowledged yet is notified within a
// lease (shardproto.MaxLease), so a new set is used only after that long.
// The router consults filters only while it holds a lease on every member
// (as for its negative cache), only for a set fetched since the last lapse
// (changeTracker.floor) and by the routing it routes by, and never while a
// migration moves names (a name moved between shards is not notified; sets
// are fetched again under the new map). A zone created, replaced or
// deleted drops its set. Deleted names stay in a filter until the set is
// fetched again (at most every filterMaxAge, or when the noticed names
// outgrow their filter): the filter is then only less selective.

const (
	// filterSettle is how long a new set waits before it is used: a
	// member notifies a write it applied within a lease.
	filterSettle = shardproto.MaxLease + time.Second
	// filterMaxAge is when a set in use is fetched again (deleted names
	// leave it then).
	filterMaxAge = 10 * time.Minute
	// filterRetry is how long after a failed fetch a zone's set is not
	// fetched again.
	filterRetry = 30 * time.Second
	// noticedNames sizes a set's filter of noticed names: beyond it the
	// set is fetched again.
	noticedNames = 1 << 14
	// filterLogEvery is how often the same failed fetch of a zone's set
	// is logged again.
	filterLogEvery = 10 * time.Minute
	// maxFilterZones bounds the zones the router keeps filters of.
	maxFilterZones = 10000
	// defaultFilterMiB is name_filters' default.
	defaultFilterMiB = 64
)

// nameFilters are the router's filter sets, by zone.
type nameFilters struct {
	c        *Craftroute
	maxBytes int64        // 0: off
	zones    sync.Map     // canonical origin → *zoneFilters; read on queries' path without a lock
	nzones   atomic.Int32 // entries in zones
	mu       sync.Mutex   // the zones' fetching sets
	bytes    atomic.Int64 // of every set kept or being fetched
	kick     chan string  // zones to fetch
}

// zone returns origin's entry, nil when it has none.
func (nf *nameFilters) zone(origin string) *zoneFilters {
	if v, ok := nf.zones.Load(origin); ok {
		return v.(*zoneFilters)
	}
	return nil
}

// zoneFilters is one zone's.
type zoneFilters struct {
	set      atomic.Pointer[filterSet] // in use; nil before the first
	fetching *filterSet                // being fetched or settling; with mu
	retryAt  atomic.Int64              // unix ns: no fetch before
	queued   atomic.Bool
	// logged is what the last failure logged said, and when (run loop
	// only): the same failure is logged again after filterLogEvery.
	logged   string
	loggedAt time.Time
}

// filterSet is every shard's filter of one zone, and the names noticed
// since it began to be fetched.
type filterSet struct {
	rt      *routing
	start   uint64 // changeTracker.begin() when the fetch began
	parts   []*namefilter.Filter
	noticed *namefilter.Filter
	at      time.Time // when fetched
	bytes   int64
}

// randSeed returns a random filter seed.
func randSeed() uint64 {
	var b [8]byte
	rand.Read(b[:]) // crypto/rand: never fails (Go 1.24)
	return binary.LittleEndian.Uint64(b[:])
}

// addBytes counts n more bytes of filters kept (n < 0: fewer).
func (nf *nameFilters) addBytes(n int64) {
	filterBytes.Set(float64(nf.bytes.Add(n)))
}

func newNameFilters(c *Craftroute, maxBytes int64) *nameFilters {
	return &nameFilters{c: c, maxBytes: maxBytes, kick: make(chan string, 64)}
}

// on reports whether filters are used: configured, and the router can
// fetch them (every shard's API) and trust them (change leases).
func (nf *nameFilters) on() bool {
	return nf != nil && nf.maxBytes > 0 && nf.c.leases.port != 0
}

// rulesOut reports whether the filters say no shard but the owner holds a
// name that could change the owner's answer that name (canonical) is
// absent below its closest encloser of labels labels in zone origin, by
// routing rt. False asks every shard, as without filters; it also asks for
// the zone's set when there is none or it is due.
func (nf *nameFilters) rulesOut(rt *routing, origin, name string, labels int) bool {
	if !nf.on() {
		return false
	}
	zf := nf.zone(origin)
	if zf == nil {
		nf.want(origin, nil)
		return false
	}
	set := zf.set.Load()
	now := time.Now()
	switch {
	case set == nil || set.rt != nf.c.routes() || set.start < nf.c.changes.floor.Load():
		nf.want(origin, zf)
		return false
	case set.rt != rt, rt.m != nil && rt.m.Migration != nil, !nf.c.leases.valid(now):
		return false
	case now.Sub(set.at) > filterMaxAge || set.noticed.Names() > set.noticed.Capacity():
		nf.want(origin, zf) // keep using it meanwhile
	}
	var buf [256]byte
	key := dnsname.AppendCanonicalKey(buf[:0], dnsname.Lower(name))
	if set.noticed.MayHold(key, labels) {
		return false
	}
	for _, f := range set.parts {
		if f.MayHold(key, labels) {
			return false
		}
	}
	return true
}

// want queues the fetch of origin's set, unless one is queued or failed
// lately; zf is origin's entry, nil when it has none yet.
func (nf *nameFilters) want(origin string, zf *zoneFilters) {
	if zf == nil {
		if nf.nzones.Load() >= maxFilterZones {
			return
		}
		v, loaded := nf.zones.LoadOrStore(origin, &zoneFilters{})
		if !loaded {
			nf.nzones.Add(1)
		}
		zf = v.(*zoneFilters)
	}
	if time.Now().UnixNano() < zf.retryAt.Load() || !zf.queued.CompareAndSwap(false, true) {
		return
	}
	select {
	case nf.kick <- origin:
	default:
		zf.queued.Store(false)
	}
}

// noticed records a change notice of zone at names (canonical; none: the
// whole zone was created, replaced or deleted) in the zone's set and in
// the one being fetched. It runs before the notice is answered.
func (nf *nameFilters) noticed(zone string, names []string) {
	if !nf.on() {
		return
	}
	zf := nf.zone(zone)
	if zf == nil {
		return
	}
	nf.mu.Lock()
	defer nf.mu.Unlock()
	if len(names) == 0 {
		if set := zf.set.Swap(nil); set != nil {
			nf.addBytes(-set.bytes)
		}
		zf.fetching = nil // its fetch ends without a set
		return
	}
	for _, set := range []*filterSet{zf.set.Load(), zf.fetching} {
		if set == nil {
			continue
		}
		for _, name := range names {
			set.noticed.AddKey(dnsname.CanonicalKey(name))
		}
	}
}

// run fetches the sets the queries asked for, one zone at a time, until
// ctx ends.
func (nf *nameFilters) run(ctx context.Context, sc *shardClient) {
	for {
		select {
		case <-ctx.Done():
			return
		case origin := <-nf.kick:
			zf := nf.zone(origin)
			if zf == nil {
				continue
			}
			err := nf.fetch(ctx, sc, origin, zf)
			zf.queued.Store(false)
			if err != nil && ctx.Err() == nil {
				now := time.Now()
				zf.retryAt.Store(now.Add(filterRetry).UnixNano())
				filterFetches.WithLabelValues("failed").Inc()
				if msg := err.Error(); msg != zf.logged || now.Sub(zf.loggedAt) >= filterLogEvery {
					zf.logged, zf.loggedAt = msg, now
					log.Warningf("existence filters of %s not fetched (every shard is asked about its names the owner lacks; tried again every %v, this said again every %v): %v", origin, filterRetry, filterLogEvery, err)
				}
			}
		}
	}
}

// fetch reads every shard's filter of origin into a new set, which
// replaces zf's after filterSettle.
func (nf *nameFilters) fetch(ctx context.Context, sc *shardClient, origin string, zf *zoneFilters) error {
	rt := nf.c.routes()
	if rt.key != keyName || (rt.m != nil && rt.m.Migration != nil) {
		return nil // asked again when a query needs it
	}
	if !nf.c.haveShardAPIs() {
		return fmt.Errorf("a shard has no API (shard_api)")
	}
	set := &filterSet{rt: rt, noticed: namefilter.New(noticedNames, randSeed())}
	set.bytes = int64(set.noticed.Bytes())
	nf.mu.Lock()
	if zf.fetching != nil {
		nf.mu.Unlock()
		return nil // one is settling
	}
	zf.fetching = set
	nf.mu.Unlock()
	// After the set takes notices: one notified meanwhile is in it, or
	// before this (changeTracker.changed comes first) and so older.
	set.start = nf.c.changes.begin()
	abandon := func() {
		nf.mu.Lock()
		if zf.fetching == set {
			zf.fetching = nil
		}
		nf.mu.Unlock()
	}
	nf.addBytes(set.bytes)
	parts, size, err := nf.fetchParts(ctx, sc, rt, origin)
	if err != nil {
		nf.addBytes(-set.bytes)
		abandon()
		return err
	}
	set.bytes += size
	nf.addBytes(size)
	set.parts = parts
	set.at = time.Now()
	filterFetches.WithLabelValues("ok").Inc()
	time.AfterFunc(filterSettle, func() {
		nf.mu.Lock()
		defer nf.mu.Unlock()
		if zf.fetching != set {
			nf.addBytes(-set.bytes) // the zone changed whole meanwhile
			return
		}
		zf.fetching = nil
		if old := zf.set.Swap(set); old != nil {
			nf.addBytes(-old.bytes)
		}
	})
	return nil
}

// fetchParts reads the filter of origin from a member of each shard of
// rt, concurrently, within what is left of the router's budget.
func (nf *nameFilters) fetchParts(ctx context.Context, sc *shardClient, rt *routing, origin string) ([]*namefilter.Filter, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
	defer cancel()
	parts := make([]*namefilter.Filter, len(rt.shards))
	errs := make([]error, len(rt.shards))
	var size atomic.Int64
	var wg sync.WaitGroup
	for i, s := range rt.shards {
		wg.Go(func() {
			left := nf.maxBytes - nf.bytes.Load() - size.Load()
			parts[i], errs[i] = nf.fetchPart(ctx, sc, s, origin, left)
			if parts[i] != nil {
				size.Add(int64(parts[i].Bytes()))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, size.Load(), err
		}
		if e := rt.epoch(); rt.m != nil && parts[i].Epoch != e {
			return nil, size.Load(), fmt.Errorf("shard %s built its filter at map epoch %d, the router routes by %d", rt.shards[i].Name, parts[i].Epoch, e)
		}
	}
	if nf.bytes.Load()+size.Load() > nf.maxBytes {
		return nil, size.Load(), fmt.Errorf("the filters would take %d bytes, over name_filters", nf.bytes.Load()+size.Load())
	}
	return parts, size.Load(), nil
}

// fetchPart reads shard s's filter of origin, of at most left bytes.
func (nf *nameFilters) fetchPart(ctx context.Context, sc *shardClient, s *Shard, origin string, left int64) (*namefilter.Filter, error) {
	resp, err := sc.open(ctx, s, http.MethodGet, zonePath(origin)+"/filter", "", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != namefilter.MediaType {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, (&shardReply{status: resp.StatusCode, body: b}).err(s)
	}
	max := min(left, int64(namefilter.HeaderLen+namefilter.MaxBits/8))
	if resp.ContentLength > max {
		return nil, fmt.Errorf("shard %s: a filter of %d bytes is over name_filters", s.Name, resp.ContentLength)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("shard %s: the filter is over name_filters", s.Name)
	}
	f, err := namefilter.Decode(b, int(max))
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	return f, nil
}
