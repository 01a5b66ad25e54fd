package craftroute

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/zoneapi"
)

// Background work of a router: zone discovery and seeding.

// zoneRefresh is how often the router reads the zones the shards list.
const zoneRefresh = 30 * time.Second

// seedRetry is how often a seed is retried until the shards' APIs answer.
const seedRetry = time.Second

// shardCallTimeout bounds a call to a shard's API, failover included: a
// record change, a zone list, export or deletion. A zone import gets it per
// MiB of zone text (importTimeout). It is above craftstore's write timeout,
// so that a shard's own answer to a slow commit arrives.
const shardCallTimeout = 30 * time.Second

// importTimeout bounds the import of zone text of n bytes.
func importTimeout(n int) time.Duration {
	return shardCallTimeout * time.Duration(1+n>>20)
}

// startBackground reads the zones the shards list, at start and every
// zoneRefresh, so that key mode "zone" keys names by their real zone, and
// imports the seed zones that no shard holds, retrying every second until
// the shards' APIs answer. The returned stop ends both and waits for them.
func (c *Craftroute) startBackground() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	c.seedsPending.Store(int32(len(c.cfg.seeds)))
	sc := newShardClient(c)
	var wg sync.WaitGroup
	wg.Go(func() { c.background(ctx, sc) })
	if c.filters.on() {
		wg.Go(func() { c.filters.run(ctx, sc) })
	}
	if c.sec != nil {
		wg.Go(func() { c.runKeys(ctx, sc) })
	}
	return func() {
		cancel()
		wg.Wait()
		sc.close()
	}
}

func (c *Craftroute) background(ctx context.Context, sc *shardClient) {
	if !c.haveShardAPIs() {
		if len(c.cfg.seeds) > 0 {
			log.Errorf("seed needs shard_api for every shard: seeds not imported")
		}
		c.seedsPending.Store(0) // nothing to wait for
		return
	}
	pending := map[string]*seedState{}
	for origin, file := range c.cfg.seeds {
		pending[origin] = &seedState{file: file}
	}
	refresh := time.NewTicker(zoneRefresh)
	defer refresh.Stop()
	retry := time.NewTicker(seedRetry)
	defer retry.Stop()

	lists := c.refreshZones(ctx, sc)
	for {
		if len(pending) > 0 && lists != nil {
			c.seed(ctx, sc, pending, lists)
			c.seedsPending.Store(int32(len(pending)))
		}
		lists = nil
		select {
		case <-ctx.Done():
			return
		case <-refresh.C:
			lists = c.refreshZones(ctx, sc)
		case <-c.refreshNow:
			lists = c.refreshZones(ctx, sc)
		case <-retry.C:
			if len(pending) > 0 {
				lists = c.refreshZones(ctx, sc)
			}
		}
	}
}

// haveShardAPIs reports whether every shard has an API URL.
func (c *Craftroute) haveShardAPIs() bool {
	for _, s := range c.shards() {
		if len(s.APIs()) == 0 {
			return false
		}
	}
	return len(c.shards()) > 0
}

// refreshZones reads the zone lists of the shards. When every shard
// answered, the known zones become the fixed ones plus the union of the
// lists; else the listed zones are only added. It returns the merged lists
// when every shard answered, nil otherwise.
func (c *Craftroute) refreshZones(ctx context.Context, sc *shardClient) []routedZone {
	cctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
	defer cancel()
	var (
		lists [][]zoneapi.ZoneInfo
		errs  []error
		raced bool
	)
	// A zone created or deleted while the lists are read may be missing
	// from them, or still in them, though notified: read again (a few
	// times at most; the notices keep the set current meanwhile).
	for try := 0; try < 3; try++ {
		gen := c.zones.noticed.Load()
		lists, errs = sc.zoneLists(cctx)
		if raced = c.zones.noticed.Load() != gen; !raced {
			break
		}
	}
	if raced {
		return nil
	}
	merged := mergeZoneLists(c.shards(), lists)
	names := make([]string, len(merged))
	for i, rz := range merged {
		names[i] = rz.Zone
	}
	if err := errors.Join(errs...); err != nil {
		for _, z := range names {
			c.zones.add(z)
		}
		if ctx.Err() == nil {
			log.Debugf("zone discovery: %v", err)
		}
		return nil
	}
	c.zones.replace(names)
	return merged
}

// seedState is a seed zone not imported yet.
type seedState struct {
	file    string
	started bool   // the router began importing it: finish even if some shards hold it now
	lastErr string // logged once
}

// seed imports the pending seed zones that no shard lists (lists is the
// merged list of every shard). An import that failed part way is repeated
// until it succeeds; a zone file that cannot be read or parsed is dropped.
func (c *Craftroute) seed(ctx context.Context, sc *shardClient, pending map[string]*seedState, lists []routedZone) {
	held := map[string]bool{}
	for _, rz := range lists {
		held[rz.Zone] = true
	}
	origins := make([]string, 0, len(pending))
	for o := range pending {
		origins = append(origins, o)
	}
	sort.Strings(origins)
	for _, origin := range origins {
		st := pending[origin]
		if held[origin] && !st.started {
			log.Infof("seed %s: zone already present", origin)
			delete(pending, origin)
			continue
		}
		text, err := os.ReadFile(st.file)
		if err != nil {
			log.Errorf("seed %s: %v", origin, err)
			delete(pending, origin)
			continue
		}
		st.started = true
		ictx, cancel := context.WithTimeout(ctx, importTimeout(len(text)))
		status, v := sc.importZone(ictx, origin, text)
		cancel()
		if ctx.Err() != nil {
			return
		}
		msg := ""
		if rep, ok := v.(zoneReport); ok {
			msg = rep.Error
		} else if b, err := json.Marshal(v); err == nil {
			msg = string(b)
		}
		switch {
		case status == http.StatusOK:
			log.Infof("seeded zone %s from %s", origin, st.file)
			delete(pending, origin)
		case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			log.Errorf("seed %s from %s: %s", origin, st.file, msg)
			delete(pending, origin)
		case msg != st.lastErr:
			log.Warningf("seed %s from %s: %s (will retry)", origin, st.file, msg)
			st.lastErr = msg
		}
	}
}
