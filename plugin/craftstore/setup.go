package craftstore

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"

	"github.com/craftdns/craftdns/internal/corefile"
	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
	"github.com/craftdns/craftdns/plugin/craftstore/transport"
	"github.com/craftdns/craftdns/plugin/craftstore/zone"

	"github.com/miekg/dns"
)

func init() { plugin.Register("craftstore", setup) }

// defaultMaxZones is max_zones unless the block says otherwise.
const defaultMaxZones = 10000

// config is what a craftstore block says.
type config struct {
	id        uint64
	cluster   string
	dir       string
	raft      string // the address peers reach this member at
	listen    string // raft_listen: where the transport listens, when not raft
	peers     []replica.Member
	join      bool
	joinURLs  []string              // join URL...: member APIs that add this member
	byOrdinal bool                  // id ordinal: the id is the pod's ordinal plus one
	stateful  *statefulSet          // statefulset: a scale-down demotes this member
	seeds     map[string]seedSource // origin -> zone file or primary
	api       string
	token     string
	routerKey string // router_key: the routers' shared secret; none: no leases
	snapshot  uint64
	journal   int // IXFR journal: changes per zone, 0 default, -1 off
	timeout   time.Duration
	allow     []allowRule    // who may UPDATE what; none: updates refused
	maxUpdate int            // records in one UPDATE
	maxZone   int            // records in one zone (imports, and what changes add); 0: no limit
	maxChange int            // records one API change adds and deletes; 0: no limit
	maxZones  int            // zones the member holds (API imports); 0: no limit
	stale     string         // plain queries while not ready: "serve" (default) or "refuse"
	paged     int            // memory paged CACHE: names cached per zone; 0: memory mode
	headroom  int            // gc_headroom: percent of the live heap it may grow by (gc.go); 0: off
	dnsListen string         // this server block's address, advertised to the group
	raftTLS   *transport.TLS // raft_tls: mutual TLS between members; nil: plain TCP
	dnssec    dnssec.Config  // dnssec*: online signing (dnssec.go)
}

func setup(c *caddy.Controller) error {
	cs, err := parse(c)
	if err != nil {
		return plugin.Error("craftstore", err)
	}
	cfg := dnsserver.GetConfig(c)
	cfg.AllowOpcode(dns.OpcodeUpdate)
	cs.cfg.dnsListen = net.JoinHostPort(firstHost(cfg.ListenHosts), cfg.Port)

	c.OnStartup(cs.start)
	c.OnStartup(func() error { return cs.startNotify(dnsserver.GetConfig(c)) })
	c.OnShutdown(cs.stopNotify)
	c.OnShutdown(cs.shutdown)
	cfg.AddPlugin(func(next plugin.Handler) plugin.Handler {
		cs.Next = next
		return cs
	})
	return nil
}

func firstHost(hosts []string) string {
	if len(hosts) == 0 || hosts[0] == "" {
		return "0.0.0.0"
	}
	return hosts[0]
}

func parse(c *caddy.Controller) (*Craftstore, error) {
	cs := &Craftstore{cfg: config{id: 1, cluster: "craftdns", seeds: map[string]seedSource{},
		timeout: 5 * time.Second, maxUpdate: defaultMaxUpdateRecords, maxZone: zoneapi.DefaultMaxZoneRecords,
		maxChange: zoneapi.DefaultMaxChangeRecords, maxZones: defaultMaxZones, stale: "serve", headroom: defaultHeadroom}}
	i := 0
	for c.Next() {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		i++
		cs.Zones = plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), c.ServerBlockKeys)
		for i, z := range cs.Zones {
			cs.Zones[i] = dnsname.Lower(z) // inZones compares lower-case names
		}
		for c.NextBlock() {
			if err := parseProperty(c, cs); err != nil {
				return nil, err
			}
		}
	}
	return cs, cs.cfg.check(c, cs.Zones)
}

func parseProperty(c *caddy.Controller, cs *Craftstore) error {
	cfg := &cs.cfg
	if ok, err := cfg.dnssec.Parse(c); ok {
		return err
	}
	a := corefile.NextArgs(c)
	args, one := a.Vals, a.One
	var err error
	switch a.Prop {
	case "id":
		switch {
		case len(args) >= 1 && args[0] == "ordinal" && len(args) <= 2:
			name := ""
			if len(args) == 2 {
				name = args[1]
			} else if name, err = os.Hostname(); err != nil {
				return c.Errf("id ordinal: %v", err)
			}
			if cfg.id, err = ordinalID(name); err != nil {
				return c.Errf("id ordinal: %v", err)
			}
			cfg.byOrdinal = true
		default:
			var v string
			if v, err = one(); err == nil {
				cfg.id, err = parseID(v)
			}
		}
	case "cluster":
		cfg.cluster, err = one()
	case "data":
		if cfg.dir, err = one(); err == nil {
			cfg.dir = corefile.Rooted(c, cfg.dir)
			if merr := mmapWorks(cfg.dir); merr != nil {
				err = c.Errf("data %s: its filesystem cannot memory-map files (%v), which the bbolt file needs: put the data directory on a local filesystem", cfg.dir, merr)
			}
		}
	case "raft":
		cfg.raft, err = one()
	case "raft_listen":
		cfg.listen, err = one()
	case "statefulset":
		if len(args) < 1 || len(args) > 2 {
			return c.ArgErr()
		}
		cfg.stateful = &statefulSet{name: args[0], account: serviceAccountDir}
		if len(args) == 2 {
			cfg.stateful.account = corefile.Rooted(c, args[1])
		}
	case "raft_tls":
		if len(args) != 3 {
			return c.Errf("raft_tls needs a certificate, its key and the CA: raft_tls CERT KEY CA")
		}
		cfg.raftTLS, err = transport.LoadTLS(corefile.Rooted(c, args[0]), corefile.Rooted(c, args[1]), corefile.Rooted(c, args[2]))
		if err != nil {
			return c.Errf("raft_tls: %v", err)
		}
	case "peer":
		if len(args) != 2 {
			return c.ArgErr()
		}
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		cfg.peers = append(cfg.peers, replica.Member{ID: id, Raft: args[1]})
	case "join":
		for _, u := range args {
			if err := checkJoinURL(u); err != nil {
				return c.Errf("join: %v", err)
			}
		}
		cfg.join, cfg.joinURLs = true, args
	case "seed":
		switch {
		case len(args) == 2:
			cfg.seeds[dns.CanonicalName(args[0])] = seedSource{file: corefile.Rooted(c, args[1])}
		case len(args) == 3 && args[1] == "axfr":
			var primary string
			if primary, err = primaryAddr(args[2]); err == nil {
				cfg.seeds[dns.CanonicalName(args[0])] = seedSource{primary: primary}
			}
		default:
			return c.ArgErr()
		}
	case "api":
		cfg.api, err = one()
	case "token":
		cfg.token, err = a.Secret(0)
	case "router_key":
		cfg.routerKey, err = a.Secret(shardproto.MinSecret)
	case "snapshot":
		var v string
		if v, err = one(); err == nil {
			cfg.snapshot, err = strconv.ParseUint(v, 10, 64)
		}
	case "journal":
		var v string
		if v, err = one(); err == nil {
			var n uint64
			if n, err = strconv.ParseUint(v, 10, 31); err == nil {
				cfg.journal = int(n)
				if n == 0 {
					cfg.journal = -1 // off
				}
			}
		}
	case "timeout":
		cfg.timeout, err = a.Duration(false)
	case "allow":
		var rule allowRule
		if rule, err = parseAllow(args); err == nil {
			cfg.allow = append(cfg.allow, rule)
		}
	case "max_update_records":
		cfg.maxUpdate, err = a.Int(1)
	case "max_zone_records":
		cfg.maxZone, err = a.Int(0)
	case "max_change_records":
		cfg.maxChange, err = a.Int(0)
	case "max_zones":
		cfg.maxZones, err = a.Int(0)
	case "stale":
		if cfg.stale, err = one(); err == nil && cfg.stale != "serve" && cfg.stale != "refuse" {
			err = c.Errf("stale must be serve or refuse, not %q", cfg.stale)
		}
	case "memory":
		cfg.paged, err = parseMemory(c, args)
	case "gc_headroom":
		var v string
		if v, err = one(); err == nil {
			cfg.headroom, err = strconv.Atoi(v)
			switch {
			case v == "off":
				cfg.headroom, err = 0, nil
			case err != nil || cfg.headroom < 5 || cfg.headroom > 100:
				err = c.Errf("gc_headroom %q: a percent from 5 to 100, or off", v)
			}
		}
	case "fallthrough":
		cs.Fall.SetZonesFromArgs(args)
	default:
		return c.Errf("unknown property %q", a.Prop)
	}
	return err
}

// defaultPagedCache is the names cached per zone in paged mode when the
// Corefile gives no number.
const defaultPagedCache = 50000

// parseMemory reads `memory memory|paged [CACHE]`: the names cached per
// zone in paged mode, 0 for memory mode.
func parseMemory(c *caddy.Controller, args []string) (int, error) {
	switch {
	case len(args) == 1 && args[0] == "memory":
		return 0, nil
	case len(args) == 1 && args[0] == "paged":
		return defaultPagedCache, nil
	case len(args) == 2 && args[0] == "paged":
		n, err := strconv.Atoi(args[1])
		if err != nil || n < zone.MinPagedCache {
			return 0, c.Errf("memory paged: the cache %q must be a number of names, at least %d", args[1], zone.MinPagedCache)
		}
		return n, nil
	}
	return 0, c.Errf("memory takes memory, or paged and an optional cache size in names, not %q", strings.Join(args, " "))
}

// ordinalID is the member id of `id ordinal`: the number after the last
// "-" of name (a StatefulSet pod's ordinal: craftdns-a-2) plus one.
func ordinalID(name string) (uint64, error) {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.ParseUint(name[i+1:], 10, 63)
	if i < 0 || err != nil || name[i+1:] != strconv.FormatUint(n, 10) {
		return 0, fmt.Errorf("%q does not end in -NUMBER (a StatefulSet pod's name, such as craftdns-a-0)", name)
	}
	return n + 1, nil
}

func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("member id %q must be a positive integer", s)
	}
	return id, nil
}

// check validates the block and fills in derived defaults.
func (cfg *config) check(c *caddy.Controller, zones []string) error {
	if cfg.dir == "" {
		return c.Err("craftstore needs a data directory: data DIR")
	}
	dir, err := filepath.Abs(cfg.dir)
	if err != nil {
		return err
	}
	cfg.dir = dir
	for _, p := range cfg.peers {
		if p.ID == cfg.id {
			if cfg.raft == "" {
				cfg.raft = p.Raft
			}
		}
	}
	if cfg.raft == "" {
		if len(cfg.peers) > 0 || cfg.join {
			return c.Errf("member %d needs its Raft address: raft ADDR or peer %d ADDR", cfg.id, cfg.id)
		}
		cfg.raft = "127.0.0.1:0" // a lone member: nobody dials it
	}
	if _, _, err := net.SplitHostPort(cfg.raft); err != nil {
		return c.Errf("raft address %q: %v", cfg.raft, err)
	}
	if cfg.stateful != nil && !cfg.byOrdinal {
		return c.Errf("statefulset needs the id from the pod's ordinal: id ordinal")
	}
	if cfg.listen == "" {
		cfg.listen = cfg.raft
	} else if _, _, err := net.SplitHostPort(cfg.listen); err != nil {
		return c.Errf("raft_listen address %q: %v", cfg.listen, err)
	}
	self := false
	for _, p := range cfg.peers {
		self = self || p.ID == cfg.id
	}
	if len(cfg.joinURLs) > 0 {
		// One Corefile for every member (a StatefulSet's): the initial
		// members start the group, the others join it.
		cfg.join = !self
	}
	if !self && !cfg.join {
		cfg.peers = append(cfg.peers, replica.Member{ID: cfg.id, Raft: cfg.raft})
	}
	for origin, src := range cfg.seeds {
		if plugin.Zones(zones).Matches(origin) == "" {
			return c.Errf("seed zone %q is not served by this server block", origin)
		}
		if src.file == "" {
			continue
		}
		if _, err := os.Stat(src.file); err != nil {
			return c.Errf("seed zone file for %q: %v", origin, err)
		}
	}
	if cfg.api != "" {
		host, _, err := net.SplitHostPort(cfg.api)
		if err != nil {
			return c.Errf("api address %q: %v", cfg.api, err)
		}
		if cfg.token == "" && !httpapi.Loopback(host) {
			return c.Errf("api on %q is not loopback: it needs a token", cfg.api)
		}
	}
	for _, z := range cfg.dnssec.Zones {
		if plugin.Zones(zones).Matches(z) == "" {
			return c.Errf("dnssec zone %q is not served by this server block", z)
		}
	}
	if err := cfg.dnssec.Check(); err != nil {
		return c.Errf("dnssec: %v", err)
	}
	return nil
}
