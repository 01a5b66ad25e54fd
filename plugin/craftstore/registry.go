package craftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
)

// A Corefile reload starts the new instance before the old one shuts down,
// and one process can name the same data directory in several server
// blocks. Members are therefore shared through a process-wide registry keyed
// by data directory, with a reference count: the bbolt file and the Raft port
// are opened once and closed with the last reference (CoreDNS's dynupdate
// does the same for its database in plugin/dynupdate/store.go).
var (
	registryMu sync.Mutex
	registry   = map[string]*member{}
)

// member is one running replica with its API server.
type member struct {
	cfg  config
	dir  string
	rep  *replica.Replica
	api  *apiServer
	refs int
	// notify hands the zones the replica changed to the server blocks
	// that send NOTIFY (notify.go).
	notify *notifyHub
	// leases are the routers' change leases (leases.go).
	leases *leases
	stop   chan struct{}
	// sec is the member's online signing (dnssec.go); nil without dnssec.
	sec *signing
	// makeKeys's state: the group's versions checked, the last error
	// said.
	versionsOK bool
	versionErr string
}

// start acquires the member of c's data directory, opening it if needed.
func (c *Craftstore) start() error {
	steerGC(c.cfg.headroom)
	registryMu.Lock()
	defer registryMu.Unlock()
	if m, ok := registry[c.cfg.dir]; ok {
		if m.rep.ID() != c.cfg.id {
			return fmt.Errorf("data directory %s already runs member %d, not %d", c.cfg.dir, m.rep.ID(), c.cfg.id)
		}
		changedTLS, err := m.rep.SetTLS(c.cfg.raftTLS)
		if err != nil {
			return fmt.Errorf("craftstore: raft_tls: %w", err)
		}
		if changedTLS {
			log.Infof("member %d: raft_tls certificates changed; peer connections are made again with them", m.rep.ID())
		}
		if changed := m.cfg.differs(c.cfg); changed != "" {
			log.Warningf("member %d keeps running with its %s; restart the process to change it", m.rep.ID(), changed)
		}
		m.refs++
		c.ref = m
		c.sec.Store(m.sec)
		c.leases.Store(m.leases)
		c.rep.Store(m.rep)
		return nil
	}

	if c.cfg.join && len(c.cfg.joinURLs) > 0 {
		self := replica.Member{ID: c.cfg.id, Raft: c.cfg.raft, Learner: true}
		if err := joinGroup(context.Background(), c.cfg.dir, c.cfg.joinURLs, c.cfg.token, self); err != nil {
			return fmt.Errorf("craftstore: %w", err)
		}
	}
	hub := &notifyHub{}
	rep, err := replica.Open(replica.Config{
		ID:              c.cfg.id,
		Cluster:         c.cfg.cluster,
		Dir:             c.cfg.dir,
		RaftAddr:        c.cfg.listen,
		Peers:           c.cfg.peers,
		Join:            c.cfg.join,
		SnapshotEntries: c.cfg.snapshot,
		Journal:         c.cfg.journal,
		Logger:          log,
		Observer:        observer{strconv.FormatUint(c.cfg.id, 10)},
		OnChange:        hub.changed,
		TLS:             c.cfg.raftTLS,
		PagedCache:      c.cfg.paged,
	})
	if err != nil {
		return fmt.Errorf("craftstore: %w", err)
	}
	m := &member{cfg: c.cfg, dir: c.cfg.dir, rep: rep, refs: 1, stop: make(chan struct{}), notify: hub,
		leases: loadLeases(c.cfg.dir, time.Now(), rep.Created(), shardproto.NewKey(c.cfg.routerKey)),
		sec:    newSigning(c.cfg.dnssec, c.cfg.id)}
	if c.cfg.api != "" {
		acfg := c.apiConfig()
		acfg.sec = m.sec
		m.api, err = startAPI(acfg, rep, m.leases)
		if err != nil {
			rep.Close()
			return fmt.Errorf("craftstore: api: %w", err)
		}
	}
	registry[c.cfg.dir] = m
	c.ref = m
	c.sec.Store(m.sec)
	c.leases.Store(m.leases)
	c.rep.Store(rep)
	log.Infof("member %d of %q started: data %s, raft %s, peers %s", c.cfg.id, c.cfg.cluster, c.cfg.dir, rep.RaftAddr(), peerList(c.cfg.id, c.cfg.peers, c.cfg.join))
	if host, _, _ := net.SplitHostPort(c.cfg.raft); c.cfg.raftTLS == nil && !httpapi.Loopback(host) {
		log.Warningf("member %d: the Raft transport on %s is plain TCP: whoever reaches it can write to the group; set raft_tls", c.cfg.id, c.cfg.raft)
	}

	go m.background(c.cfg)
	go m.checkPolicies(c.cfg.id)
	return nil
}

// shutdown releases the member; the last release closes it.
func (c *Craftstore) shutdown() error {
	registryMu.Lock()
	defer registryMu.Unlock()
	m := c.ref
	if m == nil {
		return nil
	}
	c.ref = nil
	m.refs--
	if m.refs > 0 {
		return nil
	}
	delete(registry, m.dir)
	close(m.stop)
	m.handOff()
	if m.cfg.stateful != nil {
		m.leaveIfScaledDown()
	}
	if m.api != nil {
		m.api.close()
	}
	// UPDATEs in flight: the DNS servers stop only after this returns.
	// The routers are told by their lease requests, refused from now on.
	m.leases.stop()
	if n := m.rep.Drain(drainTimeout); n > 0 {
		log.Warningf("member %d stops with %d writes in flight; their clients learn no outcome", m.rep.ID(), n)
	}
	m.rep.Quiet(lameDuckQuiet, lameDuckMax, m.leases.allTold)
	if err := m.leases.save(m.dir); err != nil {
		log.Warningf("saving the routers' leases for the next run: %v; it will wait %v before it acknowledges a write", err, shardproto.MaxLease)
	}
	return m.rep.Close()
}

// peerList names the peers of a member's configuration for its start line.
func peerList(id uint64, peers []replica.Member, join bool) string {
	if join {
		return "(joining the group)"
	}
	var out []string
	for _, p := range peers {
		if p.ID != id {
			out = append(out, fmt.Sprintf("%d=%s", p.ID, p.Raft))
		}
	}
	if len(out) == 0 {
		return "none (a group of one)"
	}
	return strings.Join(out, " ")
}

// handOffTimeout bounds the wait for another member to take over the
// leadership when a leader stops; raft gives up a transfer after an
// election timeout (1s) too.
const handOffTimeout = time.Second

// drainTimeout bounds the wait for the writes in flight when a member
// stops (the API's shutdown waits as long for its requests).
const drainTimeout = 2 * time.Second

// A stopping member refuses writes (Not Ready) until none came for
// lameDuckQuiet and every router holding a change lease asked for it
// again and was refused (a router renews every 500ms), at most
// lameDuckMax, before it closes (Replica.Quiet).
const (
	lameDuckQuiet = 100 * time.Millisecond
	lameDuckMax   = time.Second
)

// handOff passes the leadership on before the member stops (SIGTERM, or a
// reload whose Corefile no longer runs it), so that writes stall for a
// round trip or two instead of an election timeout. The API and DNS
// servers still take writes meanwhile: raft drops proposals during the
// transfer, and the member offers them again until the new leader takes
// them. Writes already in flight are then finished by the API's shutdown.
func (m *member) handOff() {
	if !m.rep.IsLeader() {
		return
	}
	start := time.Now()
	next, err := m.rep.HandOff(handOffTimeout)
	if errors.Is(err, replica.ErrLoneVoter) {
		return // a lone member: nobody waits for a leader
	}
	if err != nil {
		log.Warningf("member %d stops while leading: %v; the group elects a new leader after its election timeout", m.rep.ID(), err)
		return
	}
	log.Infof("member %d handed leadership to member %d in %v", m.rep.ID(), next, time.Since(start).Round(time.Millisecond))
}

// background does what a member does once it is up: seed zones into a new
// group, advertise its addresses, and keep the metrics current.
func (m *member) background(cfg config) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	seeded := cfg.join || len(cfg.seeds) == 0
	advertised := false
	// A member of a group it joins by itself (join URL...) joined as a
	// learner, or was demoted by a scale-down and is back: it asks to vote
	// once it has caught up.
	promoted := len(cfg.joinURLs) == 0
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		updateGauges(m.rep)
		if !m.rep.Ready() {
			continue
		}
		if !promoted {
			promoted = m.promote()
		}
		if m.rep.TxHeld() && m.rep.IsLeader() {
			resolvePrepared(m.rep, m.leases, cfg.token, cfg.timeout)
		}
		m.makeKeys(cfg)
		if !seeded {
			// Only the leader imports seeds: imports of one zone from several
			// members supersede each other and a large one would never finish.
			if m.rep.IsLeader() {
				seeded = m.seed(cfg)
			} else {
				seeded = m.seedsPresent(cfg)
			}
		}
		if !advertised {
			api := ""
			if m.api != nil {
				api = m.api.addr()
			}
			ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
			advertised = m.rep.AdvertiseSelf(ctx, cfg.dnsListen, api) == nil
			cancel()
		}
	}
}

// seed imports the configured zone files for zones the group does not have
// yet. It runs on the leader; the import is conditional on the zone being
// absent, so a seed racing with another (after a change of leader) is a no-op.
func (m *member) seed(cfg config) bool {
	done := true
	for origin, src := range cfg.seeds {
		if m.rep.Seeded(origin) {
			continue
		}
		// The zone goes into the import as it is read: memory holds a
		// chunk, not the zone. Each proposal has the write timeout, each
		// message of a transfer its read timeout; the whole has none (a
		// zone of 50M records takes a quarter of an hour).
		im := m.rep.NewImport(origin, true, cfg.timeout)
		retry, err := src.feed(context.Background(), origin, cfg.maxZone, im)
		if err != nil {
			im.Abort()
			// The zone's faults stay until the Corefile changes; the
			// group's (no leader, a timeout, another import) pass.
			var rerr *replica.Error
			if retry || errors.As(err, &rerr) && !errors.Is(err, replica.ErrInvalid) && !errors.Is(err, replica.ErrTooLarge) {
				log.Warningf("seed %s from %s: %v (will retry)", origin, src, err)
				done = false
			} else {
				log.Errorf("seed %s from %s: %v", origin, src, err)
			}
			continue
		}
		res, err := im.Commit(context.Background())
		im.Abort()
		if err == nil && !res.Skipped {
			noticeChange(context.Background(), m.leases, m.rep, origin, shardproto.ZonePut)
		}
		switch {
		case err != nil:
			log.Warningf("seed %s: %v (will retry)", origin, err)
			done = false
		case res.Skipped:
			log.Infof("seed %s: zone already present", origin)
		default:
			log.Infof("seeded zone %s from %s: %d records, serial %d", origin, src, res.Records, res.Serial)
		}
	}
	return done
}

// seedsPresent reports whether the group has seeded every seed zone (or
// found it present).
func (m *member) seedsPresent(cfg config) bool {
	for origin := range cfg.seeds {
		if !m.rep.Seeded(origin) {
			return false
		}
	}
	return true
}

// differs names the settings of o that a running member cannot take over
// from a reloaded Corefile, or returns "".
func (cfg config) differs(o config) string {
	var diff []string
	if cfg.raft != o.raft || cfg.listen != o.listen {
		diff = append(diff, "raft address")
	}
	if cfg.api != o.api {
		diff = append(diff, "api address")
	}
	if cfg.token != o.token {
		diff = append(diff, "api token")
	}
	if cfg.routerKey != o.routerKey {
		diff = append(diff, "router key")
	}
	if cfg.cluster != o.cluster {
		diff = append(diff, "cluster name")
	}
	if cfg.snapshot != o.snapshot || cfg.timeout != o.timeout || cfg.journal != o.journal {
		diff = append(diff, "snapshot, journal and timeout settings")
	}
	if !cfg.dnssec.Equal(&o.dnssec) {
		diff = append(diff, "dnssec settings")
	}
	return strings.Join(diff, ", ")
}
