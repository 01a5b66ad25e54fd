// Package craftroute is a CoreDNS plugin in front of craftstore shards: it
// maps every query name (key mode "name") or zone (key mode "zone") to a
// shard with a consistent-hash ring, sends the query to the shard member
// most recently seen alive, fails over to the next member on timeout or
// error, and, in key mode "name", merges the facts of every shard when the
// owner shard cannot answer alone (package shardproto), so that the answer
// equals that of one unsharded server.
//
// Any number of routers may front the same shards and each answers as one
// server would, right after a write made through another router or
// directly on a shard. Members answer the router's queries only from a
// state confirmed current with their leader (craftstore's fresh reads). The
// router's own state, its cache of merged negative answers and its set of
// known zones, follows every write through change leases (lease.go): the
// router holds a lease on every member, and a member notifies every router
// holding one (a NOTIFY naming the zone and the changed names) before it
// acknowledges a write. Cache entries record the number of the last notice
// when their resolution began and are void once a notice touched their
// name, an ancestor or a descendant since (changeTracker); a zone created or
// deleted enters or leaves the zone set. The cache is used only while every
// lease holds.
package craftroute

import (
	"context"
	"crypto/tls"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"

	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/xfrnotify"

	"github.com/miekg/dns"
)

var log = clog.NewWithPlugin("craftroute")

// Key modes.
const (
	keyName = shardmap.KeyName // the canonical query (owner) name: names of a zone spread over shards
	keyZone = shardmap.KeyZone // the longest known zone containing the name: a zone on one shard
)

// config is what a craftroute block says.
type config struct {
	shards     []*Shard          // the Corefile's, in its order (routing has the map's)
	key        string            // keyName or keyZone
	timeout    time.Duration     // one try at one member
	downFor    time.Duration     // how long a failed member is not preferred
	probe      time.Duration     // probe interval for members marked down; 0: no probes
	partitions int               // ring partitions
	load       float64           // ring load factor (bounded loads)
	negCache   int               // entries of the merged-negative cache; 0: off
	filterMiB  int               // name_filters: MiB of existence filters; 0: off
	maxZone    int               // records of a zone an import through the API makes; 0: no limit
	maxChange  int               // records one API change adds and deletes; 0: no limit
	batch      int               // records a migration's batch moves at most (migrate_batch)
	keys       map[string]string // TSIG key name (canonical) → base64 secret, to sign forwarded UPDATEs
	keyAlgs    map[string]string // TSIG key name → algorithm (dns.HmacSHA256 ...)
	api        string            // listen address of the HTTP API, "" for none
	token      string            // bearer token for the router's own API
	shardToken string            // bearer token sent to the shards' APIs
	seeds      map[string]string // zone → zone file, imported through the ring when no shard holds it
	mapSeeds   []string          // shard_seed: member API URLs to learn the shard map from
	mapMode    mapMode           // shard_map: whether the router routes by the agreed map
	slowOnly   bool              // fast_path off: every query takes the slow path (fast.go)
	tls        *tls.Config       // tls, tls_servername: for members at tls:// addresses; nil: the system's CAs
	dnssec     dnssec.Config     // dnssec*: the zones the router signs (dnssec.go)
}

// Craftroute is the plugin handler of one server block.
type Craftroute struct {
	Next  plugin.Handler
	Zones []string // the server block's zones

	cfg   config
	rt    atomic.Pointer[routing] // the shard map it routes by (shardmap.go)
	mapst mapState
	mapsf mapFlight // reads of the map that members' epochs ask for (fence.go)
	migr  migrator  // adding and removing shards (migrate.go)
	zones *zoneSet
	neg   *negCache
	// sec signs the answers of signed zones (dnssec.go), nil without
	// dnssec; negSigned holds their merged negative answers completed for
	// signing (unsigned: the signature cache signs them again at once).
	sec       *routerSigning
	negSigned *negCache
	// filters are the shards' existence filters (filter.go).
	filters   *nameFilters
	soa       serials      // key mode name: one serial per zone
	zoneNames zoneNames    // the last zone a relayed answer named (fast.go)
	txc       *shardClient // transactions of UPDATEs that span shards (txn.go)
	ex        exchanger    // tests: in-memory shards

	leases     leaseHolder    // change leases on the members (lease.go)
	changes    *changeTracker // the changes they notified
	stopLeases func()
	// refreshNow asks the background loop to read the zone lists now
	// (after the leases lapsed).
	refreshNow chan struct{}

	// notify sends NOTIFY through the block's transfer plugin after the
	// changes members notify (xfr.go); nil without one.
	notify atomic.Pointer[xfrnotify.Notifier]

	api            *apiServer // with cfg.api, once started
	stopProbes     func()
	stopBackground func()
	stopMapPoll    func()
	// seedsPending counts the seed zones not imported yet (discover.go):
	// the router is not ready before they are served.
	seedsPending atomic.Int32
}

// qnameOf returns the name of r's first question, "" without one.
func qnameOf(r *dns.Msg) string {
	if len(r.Question) == 0 {
		return ""
	}
	return r.Question[0].Name
}

// Name implements plugin.Handler.
func (c *Craftroute) Name() string { return "craftroute" }

// ServeDNS implements plugin.Handler.
func (c *Craftroute) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if shardproto.IsNotice(r) {
		return c.serveNotice(w, r)
	}
	if len(c.shards()) == 0 && (r.Opcode == dns.OpcodeUpdate || plugin.Zones(c.Zones).Matches(qnameOf(r)) != "") {
		// Started from shard_seed alone, and no member answered yet.
		return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, "no shard map yet: no member of shard_seed answered")
	}
	if r.Opcode == dns.OpcodeUpdate {
		return c.serveUpdate(ctx, w, r)
	}
	if r.Opcode == dns.OpcodeNotify && len(r.Question) == 1 && plugin.Zones(c.Zones).Matches(r.Question[0].Name) != "" {
		// A NOTIFY from a primary (RFC 1996): the router serves its zones
		// from the shards and is nobody's secondary. A secondary plugin in
		// the block, which runs before the router, takes its own zones'.
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "this server is not a secondary of the zone: it takes no NOTIFY")
	}
	if r.Opcode != dns.OpcodeQuery || len(r.Question) == 0 {
		// CoreDNS's server answers opcodes other than QUERY, NOTIFY and
		// UPDATE (NOTIMP) before any plugin runs.
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	if plugin.Zones(c.Zones).Matches(r.Question[0].Name) == "" {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	if len(r.Question) != 1 {
		// As CoreDNS's own server does before any plugin runs (RFC 9619).
		return ede.Write(w, r, dns.RcodeFormatError, dns.ExtendedErrorCodeOther, "a query must hold exactly one question")
	}
	if r.Question[0].Qclass != dns.ClassINET {
		// The shards serve class IN: refused here, as a member refuses it,
		// and never sent on (a member's refusal is no failure of it).
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported, "only class IN is served")
	}
	var (
		keys *dnssec.Keys
		st   *signState
	)
	if c.sec != nil {
		// A signed zone's keys at its apex, from the router's; an
		// answer with DO signed by it (dnssec.go).
		if m := c.keysAnswer(r); m != nil {
			w.WriteMsg(m)
			return dns.RcodeSuccess, nil
		}
		if keys = c.signKeys(r); keys != nil {
			st = new(signState)
			ctx = context.WithValue(ctx, signKey{}, st)
		}
	}
	// The common case: the member's answer relayed as bytes (fast.go).
	var pre *prefetch
	if keys == nil {
		var done bool
		if done, pre = c.serveFast(ctx, w, r); done {
			return dns.RcodeSuccess, nil
		}
	}
	// The members choose a policy's answer for the client (client.go).
	q, added, err := withClient(r, w.RemoteAddr())
	if err != nil {
		return ede.Write(w, r, dns.RcodeFormatError, dns.ExtendedErrorCodeOther, err.Error()+" (RFC 7871)")
	}
	resp, err := c.resolve(ctx, q, pre)
	if err != nil {
		log.Warningf("%s/%s: %v", r.Question[0].Name, dns.TypeToString[r.Question[0].Qtype], err)
		return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNoReachableAuthority, err.Error())
	}
	if added {
		resp = withoutClient(resp, r)
	}
	if keys != nil {
		if err := c.sign(resp, keys, st); err != nil {
			log.Errorf("%s/%s: signing the answer: %v", r.Question[0].Name, dns.TypeToString[r.Question[0].Qtype], err)
			return ede.Write(w, r, dns.RcodeServerFailure, dns.ExtendedErrorCodeOther, "the answer could not be signed: "+err.Error())
		}
	}
	w.WriteMsg(resp)
	return dns.RcodeSuccess, nil
}

// start brings up the members' connections, the probes, the API and the
// background work (seeding, zone discovery).
func (c *Craftroute) start() error {
	if c.cfg.mapMode == mapOn {
		// The agreed shard map (shardmap.go); with shard_map off the
		// router routes by its Corefile, unfenced.
		ctx, cancel := context.WithTimeout(context.Background(), mapWait)
		if err := c.agreeMap(ctx); err != nil {
			log.Warningf("no agreed shard map yet (%v): routing by the Corefile's lines until a member answers", err)
			mapUnreachable(true)
		}
		cancel()
	}
	c.mapst.mu.Lock()
	c.mapst.running = true
	for _, s := range c.shards() {
		for _, m := range s.Members {
			m.start()
		}
	}
	c.restartProbes()
	c.mapst.mu.Unlock()
	if c.cfg.mapMode == mapOn {
		pctx, pcancel := context.WithCancel(context.Background())
		pdone := make(chan struct{})
		c.migr.start(pctx)
		go func() {
			defer close(pdone)
			c.pollMap(pctx)
		}()
		c.stopMapPoll = func() { pcancel(); <-pdone; c.migr.wait() }
	}
	if c.cfg.api != "" {
		if err := c.startAPI(); err != nil {
			c.stop() // the probes and member connections started above
			return err
		}
	}
	c.stopBackground = c.startBackground()
	c.stopLeases = c.startLeases(func() {
		// Held again after a lapse (or for the first time): what changed
		// meanwhile was not notified.
		c.changes.void()
		select {
		case c.refreshNow <- struct{}{}:
		default:
		}
	})
	return nil
}

// restartProbes (re)starts the probes of the members of the shards the
// router routes to; with c.mapst.mu held.
func (c *Craftroute) restartProbes() {
	if c.stopProbes != nil {
		c.stopProbes()
		c.stopProbes = nil
	}
	if c.cfg.probe > 0 {
		qname := "."
		if len(c.Zones) > 0 {
			qname = c.Zones[0]
		}
		c.stopProbes = startProbes(c.shards(), c.cfg.probe, c.cfg.downFor, qname)
	}
}

// stop undoes start.
func (c *Craftroute) stop() error {
	if c.stopMapPoll != nil {
		c.stopMapPoll()
		c.stopMapPoll = nil
	}
	if c.stopLeases != nil {
		c.stopLeases()
		c.stopLeases = nil
	}
	if c.stopBackground != nil {
		c.stopBackground()
		c.stopBackground = nil
	}
	c.stopAPI()
	c.mapst.mu.Lock()
	defer c.mapst.mu.Unlock()
	c.mapst.running = false
	if c.stopProbes != nil {
		c.stopProbes()
		c.stopProbes = nil
	}
	for _, s := range c.shards() {
		for _, m := range s.Members {
			m.stop()
		}
	}
	return nil
}
