package craftroute

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
)

// The shard map (internal/shardmap): the shards every router routes by,
// agreed in the shards' Raft state at an epoch that only rises. A router
// starts from its Corefile's lines and the members they and shard_seed
// name; it asks them for the map (agreeMap), seeds epoch 1 from its
// Corefile when no shard has one yet (a transaction with a part on every
// shard, which a shard takes only at epoch 0: the first seed wins), and
// then follows the map, reading it again every mapPoll (pollMap).

// mapMode says whether a router routes by the agreed map (shard_map).
type mapMode int

const (
	mapDefault mapMode = iota // on when the router reaches the members' APIs (setup)
	mapOn
	mapOff
)

// routing is the shard map a router routes by, at one epoch: the map, its
// shards (with the router's view of their members' health), its key mode
// and its ring. A router replaces it whole (Craftroute.rt), never changes
// it.
type routing struct {
	m      *shardmap.Map // nil: the Corefile's lines, no agreed map yet
	shards []*Shard      // in the map's order
	key    string        // keyName or keyZone
	ring   *shardmap.Ring
	// epochOpts are the EDNS0 options with m's epoch that the router's
	// queries carry (fence.go): to a shard asked as one of all, and to
	// the owner of the name.
	epochOpts [2]dns.EDNS0
}

// newRouting returns the routing over shards, placed by m's key mode and
// ring, or by key, partitions and load without a map (m nil).
func newRouting(m *shardmap.Map, shards []*Shard, key string, partitions int, load float64) (*routing, error) {
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = s.Name
	}
	var (
		ring *shardmap.Ring
		err  error
	)
	if m != nil {
		// The map's placement: its explicit owners, or the ring of its
		// shards.
		key = m.Key
		ring, err = m.Ring()
	} else {
		ring, err = shardmap.NewRing(names, partitions, load)
	}
	if err != nil {
		return nil, err
	}
	rt := &routing{m: m, shards: shards, key: key, ring: ring}
	if m != nil {
		for i, owner := range []bool{false, true} {
			q := new(dns.Msg)
			shardproto.SetEpoch(q, m.Epoch, owner)
			rt.epochOpts[i] = q.IsEdns0().Option[0]
		}
	}
	return rt, nil
}

// shard returns the shard called name, nil when there is none.
func (rt *routing) shard(name string) *Shard { return shardNamed(rt.shards, name) }

// epoch is the epoch of the map, 0 without one.
func (rt *routing) epoch() uint64 {
	if rt == nil || rt.m == nil {
		return 0
	}
	return rt.m.Epoch
}

// shardNamed returns the shard of shards called name, nil when none is.
func shardNamed(shards []*Shard, name string) *Shard {
	for _, s := range shards {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// routes returns the routing the router uses now.
func (c *Craftroute) routes() *routing { return c.rt.Load() }

// shards returns the shards of the routing the router uses now.
func (c *Craftroute) shards() []*Shard { return c.rt.Load().shards }

// keyMode returns the key mode the router uses now.
func (c *Craftroute) keyMode() string { return c.rt.Load().key }

const (
	// mapWait bounds how long a router's start waits for the agreed map
	// (and for seeding it); without one it routes by its Corefile.
	mapWait = 5 * time.Second
	// mapPoll is how often a router reads the map again.
	mapPoll = time.Second
	// maxMapAnswer bounds a member's answer with the map.
	maxMapAnswer = 2 << 20
)

// mapState is the router's side of the agreement.
type mapState struct {
	change  sync.Mutex // a change of the map this router makes (putShard)
	mu      sync.Mutex // adopt
	running bool       // start ran: adopted members are started, probes restarted
	// unreachable is set while the last read of the map reached no member:
	// the router serves by its last map, and says so in /ready.
	unreachable atomic.Bool
}

// corefileMap returns the map the Corefile's lines describe, at epoch 1,
// or why they do not make one (a shard without shard_api).
func (c *Craftroute) corefileMap() (*shardmap.Map, error) {
	m := &shardmap.Map{Epoch: 1, Key: c.cfg.key, Partitions: c.cfg.partitions, Load: c.cfg.load}
	for _, s := range c.cfg.shards {
		ms := shardmap.Shard{Name: s.Name}
		for _, mem := range s.Members {
			ms.Members = append(ms.Members, mem.Addr)
			ms.API = append(ms.API, mem.API)
		}
		m.Shards = append(m.Shards, ms)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// mapSources returns the API URLs the router asks for the map: those of
// the members it routes to, then shard_seed's.
func (c *Craftroute) mapSources() []string {
	var urls []string
	for _, s := range c.shards() {
		urls = append(urls, s.APIs()...)
	}
	for _, u := range c.cfg.mapSeeds {
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	return urls
}

// fetchMap asks every source at once for its map and returns the one of
// the highest epoch (nil when none had one), with how many answered that
// they have none.
func (c *Craftroute) fetchMap(ctx context.Context) (best *shardmap.Map, none int, err error) {
	urls := c.mapSources()
	if len(urls) == 0 {
		return nil, 0, fmt.Errorf("no member API to ask (shard_api, shard_seed)")
	}
	type answer struct {
		m    *shardmap.Map
		none bool
		err  error
	}
	answers := make(chan answer, len(urls))
	for _, u := range urls {
		go func() {
			m, none, err := c.getMap(ctx, u)
			answers <- answer{m, none, err}
		}()
	}
	var errs []error
	for range urls {
		a := <-answers
		switch {
		case a.err != nil:
			errs = append(errs, a.err)
		case a.none:
			none++
		case best == nil || a.m.Epoch > best.Epoch:
			best = a.m
		}
	}
	if best == nil && none == 0 {
		return nil, 0, fmt.Errorf("no member answered: %w", errors.Join(errs...))
	}
	return best, none, nil
}

// getMap reads the map of the member at API base URL u (none: it has
// none).
func (c *Craftroute) getMap(ctx context.Context, u string) (m *shardmap.Map, none bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, 2*c.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u+shardmap.MapPath, nil)
	if err != nil {
		return nil, false, err
	}
	if c.cfg.shardToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.shardToken)
	}
	resp, err := c.txc.client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMapAnswer))
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("%s: %w", u, err)
	case resp.StatusCode == http.StatusNotFound:
		return nil, true, nil
	case resp.StatusCode != http.StatusOK:
		return nil, false, fmt.Errorf("%s: %d %s", u, resp.StatusCode, body)
	}
	var a shardmap.Answer
	if err := json.Unmarshal(body, &a); err != nil || a.Map == nil {
		return nil, false, fmt.Errorf("%s: unreadable map (%v)", u, err)
	}
	if err := a.Map.Validate(); err != nil {
		return nil, false, fmt.Errorf("%s: %w", u, err)
	}
	return a.Map, false, nil
}

// agreeMap finds the agreed map and adopts it, seeding epoch 1 from the
// Corefile when members answered and none has one. Without an answer the
// router routes by its Corefile and pollMap tries again.
func (c *Craftroute) agreeMap(ctx context.Context) error {
	best, none, err := c.fetchMap(ctx)
	if err != nil {
		return err
	}
	if best == nil && none > 0 {
		seed, err := c.corefileMap()
		if err != nil {
			return fmt.Errorf("no shard has a map, and the Corefile's lines cannot seed one: %w", err)
		}
		if err := c.changeMap(ctx, seed); err != nil {
			// Another router's seed may have won: read what it made.
			log.Infof("seeding the shard map: %v", err)
			if best, _, err = c.fetchMap(ctx); err != nil {
				return err
			}
		} else {
			log.Infof("seeded the shard map at epoch 1 from the Corefile: %d shards", len(seed.Shards))
			best = seed
		}
	}
	if best == nil {
		return fmt.Errorf("no shard has a map yet")
	}
	return c.adopt(best)
}

// changeMap commits m, the map at the epoch after the shards', as a
// transaction with a part on every shard of the routing the router uses
// and of m.
func (c *Craftroute) changeMap(ctx context.Context, m *shardmap.Map) error {
	parts := map[*Shard]txn.Prepare{}
	for _, s := range c.shards() {
		parts[s] = txn.Prepare{Map: m, Shard: s.Name}
	}
	for _, ms := range m.Shards {
		if c.shard(ms.Name) == nil {
			parts[shardFromMap(ms, c.cfg.timeout, c.cfg.tls)] = txn.Prepare{Map: m, Shard: ms.Name}
		}
	}
	res := c.txc.runTx(ctx, "", parts)
	switch {
	case res.committed:
		return nil
	case res.err != nil:
		return res.err
	case res.failed != nil:
		if res.vote.Status >= 500 {
			// Not a refusal: the shard could not commit the part in time
			// (no leader, no quorum). Nothing is decided; try again.
			return fmt.Errorf("shard %s could not take the map at epoch %d: %s", res.failed.Name, m.Epoch, res.vote.Error)
		}
		return fmt.Errorf("shard %s %w at epoch %d: %s", res.failed.Name, errMapRefused, m.Epoch, res.vote.Error)
	}
	return fmt.Errorf("the map at epoch %d was not committed", m.Epoch)
}

// errMapRefused: a shard voted no on a map change (another router changed
// the map first, or changes it now).
var errMapRefused = errors.New("refused the map")

// shardFromMap makes the shard ms describes, its members not started.
func shardFromMap(ms shardmap.Shard, timeout time.Duration, tc *tls.Config) *Shard {
	s := &Shard{Name: ms.Name}
	for i, addr := range ms.Members {
		m := newMember(ms.Name, addr, timeout, tc)
		m.API = ms.API[i]
		s.Members = append(s.Members, m)
	}
	return s
}

// sameShard reports whether s has the members ms lists, in its order.
func sameShard(s *Shard, ms shardmap.Shard) bool {
	if len(s.Members) != len(ms.Members) {
		return false
	}
	for i, m := range s.Members {
		if m.Addr != ms.Members[i] || m.API != ms.API[i] {
			return false
		}
	}
	return true
}

// adopt makes m the router's routing when its epoch is newer than the
// one it uses: shards whose members did not change are kept as they are
// (their members' health, their indexes), the others are made anew; once
// the router runs, new members start and dropped ones stop, and the probes
// follow.
func (c *Craftroute) adopt(m *shardmap.Map) error {
	c.mapst.mu.Lock()
	defer c.mapst.mu.Unlock()
	cur := c.routes()
	if cur.m != nil && m.Epoch <= cur.m.Epoch {
		return nil
	}
	if cur.m == nil {
		// Logged once: only the first map adopted replaces the Corefile's.
		if cf, err := c.corefileMap(); err != nil || !cf.Same(m) {
			log.Warningf("the Corefile's shard lines differ from the agreed shard map (epoch %d, %d shards): following the map", m.Epoch, len(m.Shards))
		}
	}
	shards := make([]*Shard, 0, len(m.Shards))
	var added []*Member
	kept := map[*Member]bool{}
	for _, ms := range m.Shards {
		old := cur.shard(ms.Name)
		if old != nil && sameShard(old, ms) {
			shards = append(shards, old)
			continue
		}
		s := shardFromMap(ms, c.cfg.timeout, c.cfg.tls)
		if old != nil {
			// The same Raft group with other members: the members it keeps
			// keep their health and connections, and the group's index
			// carries over, so that the router's reads never go back.
			for i, mem := range s.Members {
				for _, om := range old.Members {
					if om.Addr == mem.Addr && om.API == mem.API {
						s.Members[i] = om
						kept[om] = true
					}
				}
			}
			// From here on what old is told reaches s too (raise).
			old.next.Store(s)
			s.raise(old.minIndex.Load())
		}
		for _, mem := range s.Members {
			if !kept[mem] {
				added = append(added, mem)
			}
		}
		shards = append(shards, s)
	}
	rt, err := newRouting(m.Clone(), shards, "", 0, 0)
	if err != nil {
		return err
	}
	if c.mapst.running {
		for _, mem := range added {
			mem.start()
		}
	}
	c.rt.Store(rt)
	c.followMap(shards)
	mapEpoch.Set(float64(m.Epoch))
	switch {
	case m.Migration == nil:
		migrationState.Set(0)
	case m.Migration.Kind == shardmap.MigrateAdd:
		migrationState.Set(1)
	default:
		migrationState.Set(2)
	}
	if cur.m != nil {
		log.Infof("shard map epoch %d: %d shards", m.Epoch, len(m.Shards))
	}
	if c.mapst.running {
		for _, old := range cur.shards {
			if !slices.Contains(shards, old) {
				for _, mem := range old.Members {
					if !kept[mem] {
						mem.stop()
					}
				}
			}
		}
		c.restartProbes()
	}
	return nil
}

// pollMap reads the map again every mapPoll until ctx ends, and adopts a
// newer one; before the first agreement it seeds as agreeMap does.
func (c *Craftroute) pollMap(ctx context.Context) {
	t := time.NewTicker(mapPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if holdMap && c.routes().m != nil {
			continue // a test holds the router at its epoch (fence.go)
		}
		var err error
		rctx, cancel := context.WithTimeout(ctx, mapWait)
		if c.routes().m == nil {
			err = c.agreeMap(rctx)
		} else {
			var best *shardmap.Map
			if best, _, err = c.fetchMap(rctx); err == nil && best != nil {
				err = c.adopt(best)
			}
		}
		cancel()
		mapUnreachable(err != nil)
		c.mapst.unreachable.Store(err != nil && c.routes().m != nil)
		c.migr.consider(c, c.routes().m, false)
		if err != nil && ctx.Err() == nil {
			log.Debugf("shard map: %v", err)
		}
	}
}

// commitMap commits m, the map at the epoch after the router's, through
// every shard (changeMap) and adopts it; when it cannot, it answers the
// request (409: another router changed the map first, which this one then
// reads; 503: a shard could not answer or commit in time; nothing changed)
// and returns false.
func (a *apiServer) commitMap(w http.ResponseWriter, r *http.Request, m *shardmap.Map) bool {
	c := a.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), shardCallTimeout)
	defer cancel()
	if err := c.changeMap(ctx, m); err != nil {
		status := http.StatusServiceUnavailable
		if f, ok := fencedBy(err); ok || errors.Is(err, errMapRefused) {
			status = http.StatusConflict
			if ok {
				c.mapsf.refresh(ctx, c, f.epoch)
			}
		}
		httpapi.WriteError(w, status, fmt.Sprintf("the map at epoch %d was not committed: %v; nothing changed", m.Epoch, err))
		return false
	}
	if err := c.adopt(m); err != nil {
		httpapi.WriteError(w, http.StatusInternalServerError, err.Error())
		return false
	}
	return true
}

// shardMembers is the body of PUT /v1/shards/{name}: the shard's members,
// their DNS addresses and their API URLs in the same order.
type shardMembers struct {
	Members []string `json:"members"`
	API     []string `json:"api"`
}

// putShard answers PUT /v1/shards/{name}: the shard's member list changes
// through the map, at the epoch after the router's (a transaction with a
// part on every shard, as every map change). The router adopts the new
// map at once; the others within mapPoll, or sooner from an answer that
// shows the epoch (fence.go). Bad input (an empty member list, a member
// of another shard, a malformed address) is a 400 and changes nothing; a
// map changed meanwhile by another router is a 409.
func (a *apiServer) putShard(w http.ResponseWriter, r *http.Request) {
	c := a.c
	name := r.PathValue("name")
	var body shardMembers
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("body: %v (expected {\"members\": [\"host:port\", ...], \"api\": [\"http://host:port\", ...]})", err))
		return
	}
	c.mapst.change.Lock() // one change of the map at a time from this router
	defer c.mapst.change.Unlock()
	cur := c.routes().m
	if cur == nil {
		httpapi.WriteError(w, http.StatusConflict, "the router has no agreed shard map to change (it routes by its Corefile: give it shard_seed)")
		return
	}
	m := cur.Clone()
	i := slices.IndexFunc(m.Shards, func(s shardmap.Shard) bool { return s.Name == name })
	if i < 0 {
		httpapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no shard %q in the map at epoch %d", name, cur.Epoch))
		return
	}
	m.Shards[i].Members, m.Shards[i].API = body.Members, body.API
	m.Epoch++
	if err := m.Validate(); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("shard %q: %v; nothing changed", name, err))
		return
	}
	if m.Same(cur) {
		httpapi.WriteJSON(w, http.StatusOK, shardmap.Answer{Map: cur, Confirmed: true})
		return
	}
	if !a.commitMap(w, r, m) {
		return
	}
	log.Infof("shard %s: members %v at map epoch %d", name, body.Members, m.Epoch)
	httpapi.WriteJSON(w, http.StatusOK, shardmap.Answer{Map: m, Confirmed: true})
}
