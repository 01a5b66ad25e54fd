package craftroute

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	pkgtls "github.com/coredns/coredns/plugin/pkg/tls"
	"github.com/coredns/coredns/plugin/pkg/transport"

	"github.com/craftdns/craftdns/internal/corefile"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

func init() { plugin.Register("craftroute", setup) }

// Defaults of the Corefile properties.
const (
	defaultTimeout  = 500 * time.Millisecond
	defaultDownFor  = 5 * time.Second
	defaultProbe    = time.Second
	defaultNegCache = 10000
)

func setup(c *caddy.Controller) error {
	cr, err := parse(c)
	if err != nil {
		return plugin.Error("craftroute", err)
	}
	cfg := dnsserver.GetConfig(c)
	cfg.AllowOpcode(dns.OpcodeUpdate)
	if cfg.Transport == transport.DNS {
		// Members send change notices to this server's port (lease.go);
		// a block that speaks only TLS, HTTPS or gRPC holds no leases.
		if port, err := strconv.ParseUint(cfg.Port, 10, 16); err == nil && port != 0 {
			cr.leases.port = uint16(port)
		}
	}

	c.OnStartup(cr.start)
	c.OnShutdown(cr.stop)
	c.OnStartup(func() error { cr.startNotify(cfg); return nil })
	c.OnShutdown(func() error { cr.stopNotify(); return nil })
	cfg.AddPlugin(func(next plugin.Handler) plugin.Handler {
		cr.Next = next
		return cr
	})
	return nil
}

func parse(c *caddy.Controller) (*Craftroute, error) {
	cr := &Craftroute{cfg: config{
		key:        keyName,
		timeout:    defaultTimeout,
		downFor:    defaultDownFor,
		probe:      defaultProbe,
		partitions: shardmap.DefaultPartitions,
		load:       shardmap.DefaultLoad,
		negCache:   defaultNegCache,
		filterMiB:  defaultFilterMiB,
		maxZone:    zoneapi.DefaultMaxZoneRecords,
		maxChange:  zoneapi.DefaultMaxChangeRecords,
		batch:      defaultMigrateBatch,
		keys:       map[string]string{},
		keyAlgs:    map[string]string{},
		seeds:      map[string]string{},
	}}
	i := 0
	apis := map[string][]string{} // shard → its members' API URLs (shard_api)
	for c.Next() {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		i++
		cr.Zones = plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), c.ServerBlockKeys)
		for c.NextBlock() {
			if err := parseProperty(c, cr, apis); err != nil {
				return nil, err
			}
		}
		if len(cr.cfg.shards) == 0 && len(cr.cfg.mapSeeds) == 0 {
			return nil, c.Err("at least one shard, or a shard_seed to learn the shard map from, is needed")
		}
		if cr.cfg.mapMode == mapOff && len(cr.cfg.mapSeeds) > 0 {
			return nil, c.Err("shard_seed is for the agreed shard map, which shard_map off turns off")
		}
		for name, urls := range apis {
			s := shardNamed(cr.cfg.shards, name)
			if s == nil {
				return nil, c.Errf("shard_api for unknown shard %q", name)
			}
			if len(urls) != len(s.Members) {
				return nil, c.Errf("shard_api %s lists %d URLs for %d members: one URL a member, in the order of its shard line", name, len(urls), len(s.Members))
			}
		}
	}
	// The members, now that the whole block (timeout included) is read.
	for _, s := range cr.cfg.shards {
		for i, m := range s.Members {
			s.Members[i] = newMember(s.Name, m.Addr, cr.cfg.timeout, cr.cfg.tls)
			if urls := apis[s.Name]; urls != nil {
				s.Members[i].API = urls[i]
			}
		}
	}
	cfg := &cr.cfg
	switch {
	case cfg.mapMode == mapOn && len(cfg.mapSeeds) == 0 && !allAPIs(cfg.shards):
		return nil, c.Err("shard_map on needs the shards' APIs to agree on the map: shard_api for every shard, or shard_seed")
	case cfg.mapMode == mapDefault:
		// The agreed map wherever the router can reach the members' APIs.
		cfg.mapMode = mapOff
		if len(cfg.mapSeeds) > 0 || allAPIs(cfg.shards) {
			cfg.mapMode = mapOn
		}
	}
	if cfg.api != "" && cfg.token == "" && !loopback(cfg.api) {
		return nil, c.Errf("api on %q is not loopback: it needs a token", cfg.api)
	}
	for _, z := range cfg.dnssec.Zones {
		if plugin.Zones(cr.Zones).Matches(z) == "" {
			return nil, c.Errf("dnssec zone %q is not routed by this block", z)
		}
	}
	if cfg.dnssec.On && cfg.mapMode != mapOn {
		return nil, c.Err("dnssec needs the agreed shard map (shard_api for every shard, or shard_seed): the routers keep a signed zone's keys on every shard of it")
	}
	if err := cfg.dnssec.Check(); err != nil {
		return nil, c.Errf("dnssec: %v", err)
	}
	if cr.leases.key == nil {
		return nil, c.Err("router_key is needed: the secret the router shares with the members (their router_key), which signs its leases and their notices")
	}
	rt := &routing{key: cfg.key} // shard_seed alone: no shards until the map is read
	if len(cfg.shards) > 0 {
		var err error
		if rt, err = newRouting(nil, cfg.shards, cfg.key, cfg.partitions, cfg.load); err != nil {
			return nil, c.Err(err.Error())
		}
	}
	cr.rt.Store(rt)
	fixed := []string{}
	for _, z := range cr.Zones {
		if z != "." {
			fixed = append(fixed, z)
		}
	}
	for z := range cfg.seeds {
		fixed = append(fixed, z)
	}
	cr.zones = newZoneSet(fixed)
	cr.neg = newNegCache(cfg.negCache)
	if cr.sec = newRouterSigning(cfg.dnssec); cr.sec != nil {
		cr.negSigned = newNegCache(cfg.negCache)
	}
	cr.filters = newNameFilters(cr, int64(cfg.filterMiB)<<20)
	cr.txc = newShardClient(cr)
	cr.changes = newChangeTracker()
	cr.refreshNow = make(chan struct{}, 1)
	cr.leases.qname = "."
	if len(cr.Zones) > 0 {
		cr.leases.qname = cr.Zones[0]
	}
	return cr, nil
}

// onOff reads the one argument of property prop, "on" or "off".
func onOff(c *caddy.Controller, prop string, one func() (string, error)) (bool, error) {
	v, err := one()
	switch {
	case err != nil:
		return false, err
	case v == "on":
		return true, nil
	case v == "off":
		return false, nil
	}
	return false, c.Errf("%s must be on or off, not %q", prop, v)
}

func parseProperty(c *caddy.Controller, cr *Craftroute, apis map[string][]string) error {
	cfg := &cr.cfg
	if ok, err := cfg.dnssec.Parse(c); ok {
		return err
	}
	a := corefile.NextArgs(c)
	args, one, duration := a.Vals, a.One, a.Duration
	var err error
	switch a.Prop {
	case "shard":
		if len(args) < 2 {
			return c.Errf("shard needs a name and at least one member address")
		}
		if shardNamed(cfg.shards, args[0]) != nil {
			return c.Errf("shard %q listed twice", args[0])
		}
		s := &Shard{Name: args[0]}
		for _, a := range args[1:] {
			addr, err := memberAddr(a)
			if err != nil {
				return c.Err(err.Error())
			}
			// The Member is made once the block is read (parse), with its timeout.
			s.Members = append(s.Members, &Member{Addr: addr})
		}
		cfg.shards = append(cfg.shards, s)
	case "tls":
		// As forward's: no argument (the system's CAs), CA, CERT KEY
		// (a client certificate, the system's CAs) or CERT KEY CA.
		if len(args) > 3 {
			return c.Errf("tls takes at most a certificate, its key and a CA: tls [CERT KEY] [CA]")
		}
		files := make([]string, len(args))
		for i, f := range args {
			files[i] = corefile.Rooted(c, f)
		}
		name := ""
		if cfg.tls != nil {
			name = cfg.tls.ServerName
		}
		if cfg.tls, err = pkgtls.NewTLSConfigFromArgs(files...); err != nil {
			return c.Errf("tls: %v", err)
		}
		cfg.tls.ServerName = name
		cfg.tls.ClientSessionCache = tls.NewLRUClientSessionCache(0)
	case "tls_servername":
		if len(args) != 1 {
			return c.Errf("tls_servername needs the name the members' certificates carry")
		}
		if cfg.tls == nil {
			cfg.tls = defaultTLS()
		}
		cfg.tls.ServerName = args[0]
	case "shard_api":
		if len(args) < 2 {
			return c.Errf("shard_api needs a shard name and at least one URL")
		}
		for _, u := range args[1:] {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return c.Errf("shard_api %q: not an http(s) URL", u)
			}
			apis[args[0]] = append(apis[args[0]], strings.TrimRight(u, "/"))
		}
	case "shard_map":
		var on bool
		if on, err = onOff(c, a.Prop, one); err == nil {
			cfg.mapMode = mapOff
			if on {
				cfg.mapMode = mapOn
			}
		}
	case "fast_path":
		var on bool
		if on, err = onOff(c, a.Prop, one); err == nil {
			cfg.slowOnly = !on
		}
	case "shard_seed":
		if len(args) == 0 {
			return c.Errf("shard_seed needs the API URL of at least one member")
		}
		for _, u := range args {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return c.Errf("shard_seed %q: not an http(s) URL", u)
			}
			cfg.mapSeeds = append(cfg.mapSeeds, strings.TrimRight(u, "/"))
		}
	case "key":
		var v string
		if v, err = one(); err == nil {
			if v != keyName && v != keyZone {
				return c.Errf("key must be %q or %q", keyName, keyZone)
			}
			cfg.key = v
		}
	case "timeout":
		cfg.timeout, err = duration(false)
	case "down_for":
		cfg.downFor, err = duration(false)
	case "probe":
		cfg.probe, err = duration(true)
	case "partitions":
		cfg.partitions, err = a.Int(shardmap.MinPartitions)
	case "load":
		var v string
		if v, err = one(); err == nil {
			cfg.load, err = strconv.ParseFloat(v, 64)
			if err == nil && cfg.load <= 1 {
				err = fmt.Errorf("load must be above 1")
			}
		}
	case "negative_cache":
		cfg.negCache, err = a.Int(0)
	case "name_filters":
		if cfg.filterMiB, err = a.Int(0); err == nil && cfg.filterMiB > 1<<16 {
			err = fmt.Errorf("name_filters %d: at most %d MiB", cfg.filterMiB, 1<<16)
		}
	case "max_zone_records":
		cfg.maxZone, err = a.Int(0)
	case "max_change_records":
		cfg.maxChange, err = a.Int(0)
	case "migrate_batch":
		if cfg.batch, err = a.Int(minMigrateBatch); err == nil && cfg.batch > maxMigrateBatch {
			err = fmt.Errorf("migrate_batch %d: at most %d records", cfg.batch, maxMigrateBatch)
		}
	case "tsig":
		var v string
		if v, err = one(); err == nil {
			err = readKeyFile(corefile.Rooted(c, v), cfg.keys, cfg.keyAlgs)
		}
	case "api":
		cfg.api, err = one()
	case "token":
		cfg.token, err = a.Secret(0)
	case "shard_token":
		cfg.shardToken, err = a.Secret(0)
	case "router_key":
		var secret string
		if secret, err = a.Secret(shardproto.MinSecret); err == nil {
			cr.leases.key = shardproto.NewKey(secret)
		}
	case "seed":
		if len(args) != 2 {
			return c.ArgErr()
		}
		cfg.seeds[dns.CanonicalName(args[0])] = corefile.Rooted(c, args[1])
	default:
		return c.Errf("unknown property %q", a.Prop)
	}
	return err
}

// memberAddr normalises a member address: host:port, port 53 by default.
// memberAddr is a shard line's member address as the router keeps it:
// IP:port (port 53 when left out), or tls://IP:port for a member asked over
// TLS (port 853 when left out).
func memberAddr(s string) (string, error) {
	hp, overTLS := shardmap.SplitAddr(s)
	scheme, port := "", "53"
	if overTLS {
		scheme, port = shardmap.TLSScheme, "853"
	}
	if strings.Contains(hp, "://") {
		return "", fmt.Errorf("member %q: the only scheme a member address takes is tls://", s)
	}
	if host, _, err := net.SplitHostPort(hp); err == nil && host != "" {
		return s, nil
	}
	if net.ParseIP(strings.Trim(hp, "[]")) == nil {
		return "", fmt.Errorf("member %q: not an IP address or IP:port (tls:// before it for a member asked over TLS)", s)
	}
	return scheme + net.JoinHostPort(strings.Trim(hp, "[]"), port), nil
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && httpapi.Loopback(host)
}

// readKeyFile reads TSIG keys in the format of the tsig plugin's secrets
// file (BIND's): key "name." { algorithm hmac-sha256; secret "base64"; };
func readKeyFile(path string, keys, algs map[string]string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var text strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#"); i >= 0 {
			line = line[:i]
		}
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		text.WriteString(line)
		text.WriteByte(' ')
	}
	if err := sc.Err(); err != nil {
		return err
	}
	toks := strings.Fields(strings.NewReplacer("{", " { ", "}", " } ", ";", " ; ").Replace(text.String()))
	for i := 0; i < len(toks); {
		if toks[i] == ";" {
			i++
			continue
		}
		if toks[i] != "key" || i+2 >= len(toks) || toks[i+2] != "{" {
			return fmt.Errorf("%s: expected key \"name\" { ... }", path)
		}
		name := dns.CanonicalName(strings.Trim(toks[i+1], `"`))
		alg, secret := dns.HmacSHA256, ""
		j := i + 3
		for ; j < len(toks) && toks[j] != "}"; j++ {
			switch toks[j] {
			case "algorithm":
				if j+1 < len(toks) {
					alg = dns.CanonicalName(strings.Trim(toks[j+1], `"`))
					j++
				}
			case "secret":
				if j+1 < len(toks) {
					secret = strings.Trim(toks[j+1], `"`)
					j++
				}
			}
		}
		if j == len(toks) {
			return fmt.Errorf("%s: key %s: missing }", path, name)
		}
		if secret == "" {
			return fmt.Errorf("%s: key %s has no secret", path, name)
		}
		keys[name], algs[name] = secret, alg
		i = j + 1
	}
	if len(keys) == 0 {
		return fmt.Errorf("%s: no keys", path)
	}
	return nil
}

// allAPIs reports whether every shard of shards has shard_api URLs.
func allAPIs(shards []*Shard) bool {
	for _, s := range shards {
		if len(s.APIs()) == 0 {
			return false
		}
	}
	return len(shards) > 0
}
