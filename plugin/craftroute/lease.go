package craftroute

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// Change leases (internal/shardproto/lease.go): the router holds a lease on
// every member and gets a NOTIFY for every write a member acknowledges,
// before the write is acknowledged. What the notice says drops the cached
// negative answers the write may have made stale and, for a zone created
// or deleted, updates the set of known zones (key mode "zone" keys names
// by it). The router trusts its negative cache only while it holds an
// unexpired lease on every member: a member it cannot reach may take
// writes it is not told of. After a lapse the cache is emptied and the
// zone lists are read again.

// leaseFor is the lease duration the router asks for; it renews every
// leaseRenew, so a lease survives a lost request or two.
const (
	leaseFor   = 2 * time.Second
	leaseRenew = leaseFor / 4
)

// changeTracker records the changes the members notified, for the negative
// cache: a cached answer is valid only when no change at its name, above it
// or below it was notified since its resolution began (negcache.go).
type changeTracker struct {
	seq   atomic.Uint64 // the last change's number
	floor atomic.Uint64 // answers resolved before this are void (a lapse, a prune)
	mu    sync.RWMutex
	at    map[string]uint64 // canonical name → number of the last change at it (a zone: every name in it)
	below map[string]uint64 // canonical name → number of the last change below it
	wild  map[string]uint64 // canonical name → number of the last change of its wildcard ("*.<name>")
}

// maxTracked bounds the names tracked; beyond it they are dropped and the
// cache voided.
const maxTracked = 100000

func newChangeTracker() *changeTracker {
	return &changeTracker{at: map[string]uint64{}, below: map[string]uint64{}, wild: map[string]uint64{}}
}

// begin returns the number a resolution that begins now records.
func (ct *changeTracker) begin() uint64 { return ct.seq.Load() }

// changed records a change at each of names (canonical), or at zone, and so
// at every name in it, when names is empty.
func (ct *changeTracker) changed(zone string, names []string) {
	if len(names) == 0 {
		names = []string{zone}
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	n := ct.seq.Add(1)
	if len(ct.at)+len(ct.below) > maxTracked {
		clear(ct.at)
		clear(ct.below)
		clear(ct.wild)
		ct.floor.Store(n)
	}
	for _, name := range names {
		ct.at[name] = n
		if strings.HasPrefix(name, "*.") {
			ct.wild[name[2:]] = n
		}
		for off, end := dns.NextLabel(name, 0); !end; off, end = dns.NextLabel(name, off) {
			ct.below[name[off:]] = n
		}
		ct.below["."] = n
	}
}

// void makes every answer resolved so far invalid.
func (ct *changeTracker) void() { ct.floor.Store(ct.seq.Add(1)) }

// valid reports whether an answer for canonical name whose resolution
// began at start is still valid: since then nothing changed at name, at an
// ancestor (its zone, a delegation, a name that became its closest
// encloser), at the wildcard of an ancestor, or below name (which makes it
// an empty non-terminal or takes that away).
func (ct *changeTracker) valid(name string, start uint64) bool {
	if start < ct.floor.Load() {
		return false
	}
	ct.mu.RLock()
	defer ct.mu.RUnlock()
	if ct.below[name] > start {
		return false
	}
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		if ct.at[name[off:]] > start || ct.wild[name[off:]] > start {
			return false
		}
	}
	return ct.at["."] <= start && ct.wild["."] <= start
}

// leaseHolder is the router's side of the leases.
type leaseHolder struct {
	key   *shardproto.Key // shared with the members: signs requests, checks grants and notices
	port  uint16          // the router's DNS port, where notices come; 0: no leases
	qname string          // the lease queries' name (a name of the router's zones)
	// tokens are random per start and member: a notice must carry one,
	// which names the member's shard.
	tokens  atomic.Pointer[map[*Member][shardproto.TokenLen]byte]
	byToken atomic.Pointer[map[[shardproto.TokenLen]byte]*Shard]
	// voidUntil (unix nanoseconds) holds the leases void after a map
	// change dropped a member (followMap): until its lease has ended, a
	// write it took may not have been notified.
	voidUntil atomic.Int64
	// validUntil is the end (unix nanoseconds) of the earliest lease on
	// any member; 0 before every member granted one.
	validUntil atomic.Int64
	until      map[*Member]time.Time // run loop only
	warned     sync.Map              // *Member → true: said it grants no lease
}

// valid reports whether the router holds an unexpired lease on every member.
func (lh *leaseHolder) valid(now time.Time) bool {
	return lh.port != 0 && now.UnixNano() < lh.validUntil.Load() && now.UnixNano() >= lh.voidUntil.Load()
}

// startLeases requests leases from every member every leaseRenew until
// stop. lapsed is called when the leases were not all valid for a while and
// are again: what was not notified meanwhile must be learned otherwise.
func (c *Craftroute) startLeases(lapsed func()) (stop func()) {
	lh := &c.leases
	if lh.port == 0 {
		return func() {}
	}
	lh.until = map[*Member]time.Time{}
	lh.follow(c.shards())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(leaseRenew)
		defer t.Stop()
		held := false
		for {
			c.renewLeases(ctx)
			now := time.Now()
			ok := lh.valid(now)
			switch {
			case ok && !held:
				lapsed()
			case !ok && held:
				log.Warningf("change leases lapsed (a member did not grant one in time): negative cache off until they are renewed")
				c.changes.void()
			}
			held = ok
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// renewLeases asks every member for a lease, concurrently, and updates
// validUntil.
func (c *Craftroute) renewLeases(ctx context.Context) {
	lh := &c.leases
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range c.shards() {
		for _, m := range s.Members {
			wg.Go(func() {
				req := new(dns.Msg)
				req.SetQuestion(lh.qname, dns.TypeSOA)
				sent := time.Now()
				lease := shardproto.RequestLease(req, shardproto.Lease{Port: lh.port, Duration: leaseFor, Token: (*lh.tokens.Load())[m], Time: sent}, lh.key)
				c.markEpoch(ctx, nil, req, false)
				rctx, cancel := context.WithTimeout(ctx, leaseRenew)
				defer cancel()
				resp, err := m.exchange(rctx, req)
				if err != nil {
					return
				}
				// A grant says the member's map epoch: a newer one than the
				// router's makes it read the map (fence.go).
				c.checkEpoch(s, resp)
				// The member's applied index when it granted covers the
				// writes it acknowledged before: raised before the lease
				// counts.
				idx, ok := shardproto.LeaseGranted(resp, lease, lh.key)
				if resp.Rcode == dns.RcodeServerFailure && notCurrent(resp) {
					// A member that is stopping (or not ready): no writes
					// to it until it says otherwise.
					m.Failed(time.Now(), c.cfg.downFor)
					return
				}
				if !ok || resp.Rcode != dns.RcodeSuccess {
					// A member without the key (router_key), an older
					// craftstore, or a server block that does not cover the
					// name asked.
					if _, done := lh.warned.LoadOrStore(m, true); !done {
						log.Warningf("member %s of shard %s grants no change lease for %s (%s; is its router_key this router's?): the negative cache stays off",
							m.Addr, s.Name, lh.qname, dns.RcodeToString[resp.Rcode])
					}
					return
				}
				s.raise(idx)
				mu.Lock()
				lh.until[m] = sent.Add(leaseFor)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	var earliest time.Time
	for i, s := range c.shards() {
		for j, m := range s.Members {
			u, ok := lh.until[m]
			if !ok {
				lh.validUntil.Store(0)
				leasesValid.Set(0)
				return
			}
			if (i == 0 && j == 0) || u.Before(earliest) {
				earliest = u
			}
		}
	}
	lh.validUntil.Store(earliest.UnixNano())
	if lh.valid(time.Now()) {
		leasesValid.Set(1)
	} else {
		leasesValid.Set(0)
	}
}

// noticeAge bounds the age of the lease request a notice names (by this
// router's clock): a member notifies a lease for at most its duration after
// it received the request.
const noticeAge = leaseFor + time.Second

// serveNotice answers a member's change notice: it records the change and
// then says NOERROR, signed, which lets the member acknowledge the write. A
// notice not signed with the router's key, without a lease token of this
// router or for a lease it did not ask for lately (a replay) is refused.
func (c *Craftroute) serveNotice(w dns.ResponseWriter, r *dns.Msg) (int, error) {
	n, lease, ok := shardproto.NoticeOf(r, c.leases.key)
	if !ok {
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "change notice not signed with this router's key")
	}
	s := c.leases.shardOf(lease.Token)
	if age := time.Since(lease.Time); s == nil || age > noticeAge || age < -time.Second {
		return ede.Write(w, r, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited, "change notice without a current lease of this router")
	}
	s.raise(n.Index)
	zone := dnsname.Lower(n.Zone)
	for i, name := range n.Names {
		n.Names[i] = dnsname.Lower(name)
	}
	c.changes.changed(zone, n.Names)
	c.filters.noticed(zone, n.Names)
	if n.Change != shardproto.ZoneDeleted {
		c.soa.observe(zone, s.Name, n.Serial, n.Base, time.Now())
	}
	switch n.Change {
	case shardproto.ZonePut:
		c.zones.noticed.Add(1)
		c.zones.add(zone)
	case shardproto.ZoneDeleted:
		c.zones.noticed.Add(1)
		c.zones.remove(zone)
		c.neg.purge(zone)
		if c.negSigned != nil {
			c.negSigned.purge(zone)
		}
		c.soa.forget(zone)
	}
	if nt := c.notify.Load(); nt != nil && n.Change != shardproto.ZoneDeleted {
		nt.Changed(zone)
	}
	noticesCount.WithLabelValues(n.Change.String()).Inc()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	shardproto.AckNotice(m, n, c.leases.key)
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// follow gives every member of shards a lease token (the one it has, or
// a new random one) and points every token at its member's shard in
// shards, so that a notice raises the index of the Shard the router
// routes by. A member the shards no longer list keeps its token, pointed
// at the shard of the same name when there is one (the same group): its
// notices count until its lease ends. It reports whether a member got a
// token (it holds no lease yet) and whether one was dropped.
func (lh *leaseHolder) follow(shards []*Shard) (added, dropped bool) {
	var old map[*Member][shardproto.TokenLen]byte
	if p := lh.tokens.Load(); p != nil {
		old = *p
	}
	tokens, byToken := map[*Member][shardproto.TokenLen]byte{}, map[[shardproto.TokenLen]byte]*Shard{}
	for _, s := range shards {
		for _, m := range s.Members {
			t, ok := old[m]
			if !ok {
				rand.Read(t[:]) // crypto/rand: never fails (Go 1.24)
				added = true
			}
			tokens[m], byToken[t] = t, s
		}
	}
	for m, t := range old {
		if _, kept := tokens[m]; !kept {
			dropped = true
			if s := shardNamed(shards, m.Shard); s != nil {
				byToken[t] = s
			}
		}
	}
	lh.tokens.Store(&tokens)
	lh.byToken.Store(&byToken)
	return added, dropped
}

// followMap points the leases at the shards of a new routing (adopt): a
// member added holds no lease of this router yet, so the leases are void
// until the next renewal has one from every member; a member dropped may
// still take writes until its lease ends, unnotified once it is not
// renewed, so the leases stay void (no read without a round to the
// leader, no negative cache) for leaseFor.
func (c *Craftroute) followMap(shards []*Shard) {
	lh := &c.leases
	if lh.port == 0 || lh.tokens.Load() == nil {
		return // no leases, or not started: startLeases follows the shards
	}
	added, dropped := lh.follow(shards)
	if added || dropped {
		lh.validUntil.Store(0)
		leasesValid.Set(0)
		c.changes.void()
	}
	if dropped {
		lh.voidUntil.Store(time.Now().Add(leaseFor).UnixNano())
	}
}

// shardOf returns the shard of the member that token was given to, nil if
// none.
func (lh *leaseHolder) shardOf(token [shardproto.TokenLen]byte) *Shard {
	if p := lh.byToken.Load(); p != nil {
		return (*p)[token]
	}
	return nil
}
