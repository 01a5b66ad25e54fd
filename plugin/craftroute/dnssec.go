package craftroute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/plugin"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// DNSSEC through the router (README, "DNSSEC"). A zone whose names are
// spread over shards has one key set, on every shard that holds the zone
// (the fsm's keys bucket), which the routers make and roll: each reads
// every shard's set, makes the first keys when no shard has any and takes
// a rollover's steps when they are due, each as one transaction over the
// shards (a txn.Keys part on each: all or none of them hold it), so that
// a router that sees the zone's keys on one shard sees them on all. Of
// two routers that take a step at once one commits: the other's parts
// name a set that is gone (Prev) and vote no. The routers sign the
// answers they merge, with the keys opened by their own copy of the
// key-encryption key: a member can sign none of them, since the router
// merges the shards' answers, presents the zone's serial and decides
// existence over every shard. What only a member can tell (the types at a
// denied name, a referral's DS, which names are glue) it adds to its
// answer when the router asks (shardproto.RequestSigned).

// keysRefresh is how often a router reads the signed zones' key sets and
// takes the rollover steps that are due: well below any rollover's wait,
// so that every router signs with a new key long before the old one
// leaves the DNSKEY RRset.
const keysRefresh = 5 * time.Second

// routerSigning is a router's online signing.
type routerSigning struct {
	cfg    dnssec.Config
	signer *dnssec.Signer
	keys   sync.Map // zone → *zoneKeys
	// versionsOK: every member said the state machine version whose
	// transactions carry key sets; checked before the first keys.
	versionsOK atomic.Bool
	said       sync.Map // zone → the last problem logged of it
}

// zoneKeys are a zone's keys as the router read them from the shards.
type zoneKeys struct {
	hash string
	keys *dnssec.Keys
}

func newRouterSigning(cfg dnssec.Config) *routerSigning {
	if !cfg.On {
		return nil
	}
	s := &routerSigning{cfg: cfg, signer: dnssec.NewSigner(signatureCache)}
	hit, miss := signaturesCount.WithLabelValues("hit"), signaturesCount.WithLabelValues("miss")
	s.signer.Counted = func(h bool) {
		if h {
			hit.Inc()
		} else {
			miss.Inc()
		}
	}
	return s
}

// signatureCache is how many signatures a router keeps (about 100 bytes
// each with their keys).
const signatureCache = 100000

// keysFor returns zone's keys, nil while the router has none for it.
func (s *routerSigning) keysFor(zone string) *dnssec.Keys {
	if s == nil {
		return nil
	}
	if zk, ok := s.keys.Load(zone); ok {
		return zk.(*zoneKeys).keys
	}
	return nil
}

// say logs a problem with zone's keys once, until it changes.
func (s *routerSigning) say(zone string, err error) {
	if prev, ok := s.said.Swap(zone, err.Error()); !ok || prev != err.Error() {
		log.Warningf("zone %s: DNSSEC keys: %v", zone, err)
	}
}

// runKeys keeps the signed zones' keys: at start and every keysRefresh
// (with some jitter, so that routers started together do not race).
func (c *Craftroute) runKeys(ctx context.Context, sc *shardClient) {
	for {
		for _, z := range c.signedZones() {
			cctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
			err := c.syncKeys(cctx, sc, z, time.Now())
			if errors.Is(err, errKeysChanged) {
				// Another router's keys or step went first: take them.
				err = c.syncKeys(cctx, sc, z, time.Now())
			}
			if err != nil {
				c.sec.say(z, err)
			} else {
				c.sec.said.Delete(z)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(keysRefresh + rand.N(keysRefresh/5)):
		}
	}
}

// signedZones are the zones the router routes that it signs.
func (c *Craftroute) signedZones() []string {
	var out []string
	for _, z := range append(c.zones.list(), c.Zones...) {
		z = dnsname.Lower(dns.Fqdn(z))
		if c.sec.cfg.Signs(z) && !slices.Contains(out, z) {
			out = append(out, z)
		}
	}
	return out
}

// shardKeys is one shard's answer for a zone's key set.
type shardKeys struct {
	s    *Shard
	held bool // the shard holds the zone
	zk   txn.ZoneKeys
}

// readKeys reads zone's key set from every shard of the map; an error when
// a shard's API did not answer (nothing is decided then).
func (c *Craftroute) readKeys(ctx context.Context, sc *shardClient, zone string) ([]shardKeys, error) {
	shards := c.routes().shards
	out := make([]shardKeys, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() {
			out[i].s = s
			rep, err := sc.do(ctx, s, http.MethodGet, txn.KeysPath(zone), "", nil, "")
			switch {
			case err != nil:
				errs[i] = err
			case rep.status == http.StatusNotFound:
			case rep.status != http.StatusOK:
				errs[i] = rep.err(s)
			case json.Unmarshal(rep.body, &out[i].zk) != nil:
				errs[i] = fmt.Errorf("shard %s: an unreadable key set answer", s.Name)
			default:
				out[i].held = true
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// syncKeys brings zone's keys up to date at now: reads the shards' sets,
// makes the first keys, copies the set to a shard that holds the zone
// without it (one joined since), takes a due rollover step, and opens
// the set the shards agree on.
func (c *Craftroute) syncKeys(ctx context.Context, sc *shardClient, zone string, now time.Time) error {
	got, err := c.readKeys(ctx, sc, zone)
	if err != nil {
		return err
	}
	var holders, lacking []*Shard
	var raw []byte
	hashes := map[string]bool{}
	for _, g := range got {
		if !g.held {
			continue
		}
		holders = append(holders, g.s)
		if g.zk.Set == nil {
			lacking = append(lacking, g.s)
			continue
		}
		if raw == nil {
			raw = g.zk.Set // the first shard's by name: shards are in name order
		}
		hashes[dnssec.SetHash(g.zk.Set)] = true
	}
	switch {
	case len(holders) == 0:
		// No shard holds the zone (yet, or any more: a zone made
		// again gets new keys).
		c.sec.keys.Delete(zone)
		return nil
	case len(hashes) > 1:
		// Not made by routers (a set restored on one shard): signing
		// goes on with the first shard's; an operator decides.
		err = fmt.Errorf("the shards hold %d different key sets: signing with shard %s's", len(hashes), holders[0].Name)
	case raw == nil:
		if !c.sec.versionsOK.Load() {
			if m := c.routes().m; m != nil {
				if verr := c.checkVersions(ctx, m, nil, true); verr != nil {
					return fmt.Errorf("not making keys yet: %w", verr)
				}
			}
			c.sec.versionsOK.Store(true)
		}
		set, err := c.sec.cfg.NewKeySet(zone, now)
		if err != nil {
			return err
		}
		if err := c.commitKeys(ctx, sc, zone, holders, set, true); err != nil {
			return err
		}
		log.Infof("zone %s: DNSSEC keys made (algorithm %d) on shards %s", zone, c.sec.cfg.Algorithm, shardNames(holders))
		raw = set
	case len(lacking) > 0:
		if err := c.commitKeys(ctx, sc, zone, lacking, raw, true); err != nil {
			return err
		}
		log.Infof("zone %s: its DNSSEC keys copied to shards %s", zone, shardNames(lacking))
	default:
		step, kind, serr := c.sec.cfg.Step(zone, raw, now)
		switch {
		case serr != nil:
			err = fmt.Errorf("its %s rollover: %w", kind, serr)
		case step != nil:
			if cerr := c.commitKeys(ctx, sc, zone, holders, step, false); cerr != nil {
				err = fmt.Errorf("committing a %s rollover step: %w", kind, cerr)
				break
			}
			log.Infof("zone %s: %s rollover: %s", zone, kind, dnssec.DescribeKeys(step))
			raw = step
		}
	}
	if oerr := c.openKeys(zone, raw); oerr != nil {
		return oerr
	}
	return err
}

// openKeys makes raw zone's keys, opened, unless they are already.
func (c *Craftroute) openKeys(zone string, raw []byte) error {
	h := dnssec.SetHash(raw)
	if zk, ok := c.sec.keys.Load(zone); ok && zk.(*zoneKeys).hash == h {
		return nil
	}
	keys, err := dnssec.OpenKeySet(zone, raw, c.sec.cfg.KEK)
	if err != nil {
		return fmt.Errorf("opening the shards' key set: %w (its answers go unsigned)", err)
	}
	c.sec.keys.Store(zone, &zoneKeys{hash: h, keys: keys})
	return nil
}

// errKeysChanged: another router's step committed first.
var errKeysChanged = errors.New("another router changed the keys first")

// commitKeys sets zone's key set set on shards in one transaction; with
// absent only where they have none.
func (c *Craftroute) commitKeys(ctx context.Context, sc *shardClient, zone string, shards []*Shard, set []byte, absent bool) error {
	parts := map[*Shard]txn.Prepare{}
	for _, s := range shards {
		parts[s] = txn.Prepare{Keys: &txn.Keys{Set: set, Absent: absent}}
	}
	res := sc.runTx(ctx, zone, parts)
	switch {
	case res.committed:
		return nil
	case res.failed != nil && res.err == nil && res.vote.Status == http.StatusConflict:
		return errKeysChanged
	case res.failed != nil && res.err == nil:
		return fmt.Errorf("shard %s refused: %s", res.failed.Name, res.vote.Error)
	case res.err != nil:
		return res.err
	}
	return errors.New("the key set's transaction ended undecided")
}

// shardNames lists shards' names.
func shardNames(shards []*Shard) string {
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// signState is what one query's resolution learns for signing its answer:
// ctx carries it (signKey) to every exchange with the members.
type signState struct {
	mu   sync.Mutex
	glue []string // owner names at or below a zone cut, from the members
	// incomplete: a member's answer did not say it completed it (an
	// older member): the answer cannot be signed right.
	incomplete bool
}

type signKey struct{}

// signing returns the sign state of ctx's resolution, nil when its answer
// is not signed.
func signing(ctx context.Context) *signState {
	st, _ := ctx.Value(signKey{}).(*signState)
	return st
}

// note records what member answer resp says for signing.
func (st *signState) note(resp *dns.Msg) {
	glue, err := shardproto.GlueOf(resp)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		if resp.Rcode == dns.RcodeSuccess || resp.Rcode == dns.RcodeNameError {
			st.incomplete = true
		}
		return
	}
	for _, g := range glue {
		if !slices.Contains(st.glue, g) {
			st.glue = append(st.glue, g)
		}
	}
}

// signKeys returns the keys that sign the answer to client query r: those
// of its zone when the router signs it, r has DO set and the keys are
// made; nil otherwise.
func (c *Craftroute) signKeys(r *dns.Msg) *dnssec.Keys {
	opt := r.IsEdns0()
	if c.sec == nil || opt == nil || !opt.Do() {
		return nil
	}
	zone := c.zoneOf(dnsname.Lower(r.Question[0].Name))
	if zone == "" || !c.sec.cfg.Signs(zone) {
		return nil
	}
	return c.sec.keysFor(zone)
}

// keysAnswer answers r when it asks for a signed zone's DNSKEY, CDS or
// CDNSKEY RRset at its apex, which the router serves from the keys it
// holds (signed when r has DO set); nil for any other query.
func (c *Craftroute) keysAnswer(r *dns.Msg) *dns.Msg {
	q := r.Question[0]
	if c.sec == nil || (q.Qtype != dns.TypeDNSKEY && q.Qtype != dns.TypeCDS && q.Qtype != dns.TypeCDNSKEY) {
		return nil
	}
	name := dnsname.Lower(q.Name)
	if c.zoneOf(name) != name || !c.sec.cfg.Signs(name) {
		return nil
	}
	keys := c.sec.keysFor(name)
	if keys == nil {
		return nil
	}
	m := keys.KeysReply(r)
	if m == nil {
		return nil // none: the zone's NODATA
	}
	if opt := r.IsEdns0(); opt != nil && opt.Do() {
		if err := c.sec.signer.SignSections(m, keys, time.Now(), nil); err != nil {
			log.Errorf("zone %s: signing its %s RRset: %v", name, dns.TypeToString[q.Qtype], err)
			return nil
		}
	}
	return m
}

// errUnsignable: a member did not complete its answer for signing.
var errUnsignable = errors.New("a member did not complete its answer for signing (it runs an older version)")

// sign signs resp, the router's answer to a query with DO set in a zone
// with keys, from what the resolution's st learned.
func (c *Craftroute) sign(resp *dns.Msg, keys *dnssec.Keys, st *signState) error {
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return nil // a refusal or failure: nothing of the zone's to sign
	}
	// The resolution is over: no member's answer comes any more.
	st.mu.Lock()
	incomplete, glue := st.incomplete, st.glue
	st.mu.Unlock()
	if _, neg := dnssec.Denied(resp); neg && !hasNSEC(resp.Ns) || incomplete {
		return errUnsignable
	}
	return c.sec.signer.SignSections(resp, keys, time.Now(), func(name string) bool {
		return slices.Contains(glue, dnsname.Lower(name))
	})
}

// hasNSEC reports whether rrs hold an NSEC record.
func hasNSEC(rrs []dns.RR) bool {
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeNSEC {
			return true
		}
	}
	return false
}

// zoneDS serves GET /v1/zones/{zone}/ds from the keys the router signs
// with: 404 for a zone it does not sign, 503 while it has no keys for it
// (the routers make them once the zone is on the shards).
func (a *apiServer) zoneDS(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	sec := a.c.sec
	if sec == nil || !sec.cfg.Signs(origin) || plugin.Zones(a.c.Zones).Matches(origin) == "" {
		fail(w, zoneapi.Errorf(http.StatusNotFound, "zone %q is not signed by this router: no dnssec line names it", origin))
		return
	}
	keys := sec.keysFor(origin)
	if keys == nil {
		fail(w, zoneapi.Errorf(http.StatusServiceUnavailable, "zone %q has no DNSSEC keys yet (the routers make them once it is on the shards): try again", origin))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, keys.Info())
}
