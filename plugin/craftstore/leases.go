package craftstore

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// Change leases (internal/shardproto/lease.go): the routers that hold an
// unexpired lease on this member get a NOTIFY for every write the member
// acknowledges, before it is acknowledged, so that no router keeps a
// negative answer, or a view of which zones exist, that the write made
// stale.

// noticeTry bounds one try of a notice; it is sent again until the router
// answers or its lease expires.
const noticeTry = 100 * time.Millisecond

// maxHolders bounds the leases a member holds at once (every router holds
// one on each member; a router that restarts takes new ones, and its old
// ones expire): a request past it is not granted.
const maxHolders = 256

// leases are the routers' leases on one member.
type leases struct {
	key     *shardproto.Key // the routers' key; nil: no lease is granted
	mu      sync.Mutex
	holders map[[shardproto.TokenLen]byte]holder // lease token → its lease
	started time.Time                            // leases granted before this (another run) may still hold
	client  *dns.Client                          // UDP
	tcp     *dns.Client                          // for notices over 512 bytes (many names)
	// saved is set once the leases were saved for the next run (save):
	// the member grants no more.
	saved bool
	// stopping is set when the member begins to stop (stop): a lease
	// request is then refused with Not Ready, which tells its router to
	// send the member no more writes (an UPDATE that reaches it after it
	// closed is cut off unanswered); told holds the holders refused since.
	stopping bool
	told     map[[shardproto.TokenLen]byte]bool
}

// holder is one router's lease. An expired one stays until its last
// request is older than MaxSkew, so that the request is not granted again.
type holder struct {
	addr  string
	until time.Time
	qname string // the lease query's name: the notices' question
	lease shardproto.Lease
}

// leasesFile is where a member that stops cleanly leaves the leases it
// granted, in its data directory, for its next run (loadLeases).
const leasesFile = "leases.json"

// savedHolder is a holder in leasesFile.
type savedHolder struct {
	Addr  string           `json:"addr"`
	Until time.Time        `json:"until"`
	QName string           `json:"qname"`
	Lease shardproto.Lease `json:"lease"`
}

// newLeases returns the leases of a member started at now, granted to
// routers that hold key; created says its data directory was new, so no
// earlier run granted a lease.
func newLeases(now time.Time, created bool, key *shardproto.Key) *leases {
	if created {
		now = now.Add(-shardproto.MaxLease)
	}
	return &leases{key: key, holders: map[[shardproto.TokenLen]byte]holder{}, started: now,
		client: &dns.Client{Net: "udp", Timeout: noticeTry},
		tcp:    &dns.Client{Net: "tcp", Timeout: noticeTry}}
}

// loadLeases returns the leases of a member started at now on data
// directory dir (created: the directory is new). A member waits one
// maximum lease duration after it starts before it acknowledges a write,
// for the leases its previous run granted (notify), unless that run
// stopped cleanly and left them in leasesFile: it then knows every lease
// that may still hold, and a restart under load (a rolling restart) stalls
// no write. The file is removed before the member grants a lease, so that
// a run that crashes leaves none and the next one waits.
func loadLeases(dir string, now time.Time, created bool, key *shardproto.Key) *leases {
	l := newLeases(now, created, key)
	path := filepath.Join(dir, leasesFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l
	case err != nil:
		log.Warningf("reading the leases of the previous run: %v; writes wait %v for them to expire", err, shardproto.MaxLease)
		return l
	}
	if err := removeSynced(path); err != nil {
		log.Warningf("removing %s: %v; writes wait %v for the leases of the previous run to expire", path, err, shardproto.MaxLease)
		return l
	}
	var saved []savedHolder
	if err := json.Unmarshal(data, &saved); err != nil {
		log.Warningf("reading %s: %v; writes wait %v for the leases of the previous run to expire", path, err, shardproto.MaxLease)
		return l
	}
	l.started = now.Add(-shardproto.MaxLease)
	for _, h := range saved {
		if h.Until.After(now) && h.Addr != "" && len(l.holders) < maxHolders {
			l.holders[h.Lease.Token] = holder{addr: h.Addr, until: h.Until, qname: dns.Fqdn(h.QName), lease: h.Lease}
		}
	}
	return l
}

// save writes the unexpired leases to dir's leasesFile for the member's
// next run; from then on the member grants no lease, so the file holds
// every lease that may still hold when it exits.
func (l *leases) save(dir string) error {
	l.mu.Lock()
	l.saved = true
	now := time.Now()
	saved := []savedHolder{}
	for _, h := range l.holders {
		if h.until.After(now) {
			saved = append(saved, savedHolder{Addr: h.addr, Until: h.until, QName: h.qname, Lease: h.lease})
		}
	}
	l.mu.Unlock()
	data, err := json.Marshal(saved)
	if err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, leasesFile), data)
}

// writeSynced writes data to path through a temporary file, synced and
// renamed, and syncs the directory: after a crash the file is whole or
// absent.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeSynced removes path and syncs its directory.
func removeSynced(path string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// grant records lease request r from remote, signed under the routers' key
// (shardproto.LeaseRequested), and returns the reply: the grant, signed, with
// the member's applied index index. It returns nil when it grants nothing:
// the request is not signed under the key (or the member has none), its
// time is not after the token's last request or is more than MaxSkew from
// the member's clock (a replay), the member holds maxHolders leases, or
// the leases were saved. The query is then answered as a plain one. A
// stopping member (stop) refuses a request it would grant: SERVFAIL with
// the Extended DNS Error Not Ready.
func (l *leases) grant(remote net.Addr, r *dns.Msg, index uint64) *dns.Msg {
	lease, ok := shardproto.LeaseRequested(r, l.key)
	if !ok {
		return nil
	}
	now := time.Now()
	if skew := lease.Time.Sub(now); skew > shardproto.MaxSkew || skew < -shardproto.MaxSkew {
		log.Warningf("lease request from %s is %v off this member's clock (at most %v): not granted", remote, skew.Round(time.Millisecond), shardproto.MaxSkew)
		return nil
	}
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(lease.Port)))
	l.mu.Lock()
	if l.saved && !l.stopping {
		l.mu.Unlock()
		return nil
	}
	h, held := l.holders[lease.Token]
	if held && !lease.Time.After(h.lease.Time) {
		l.mu.Unlock()
		return nil // a request granted already, or older: a replay
	}
	if l.stopping {
		if held {
			h.lease = lease // a replay of this request is not told again
			l.holders[lease.Token] = h
			l.told[lease.Token] = true
		}
		l.mu.Unlock()
		return ede.Reply(r, dns.RcodeServerFailure, dns.ExtendedErrorCodeNotReady, stoppingText)
	}
	if !held && len(l.holders) >= maxHolders {
		l.pruneLocked(now)
		if len(l.holders) >= maxHolders {
			l.mu.Unlock()
			log.Warningf("lease request from %s not granted: %d leases held, the most a member holds", remote, maxHolders)
			return nil
		}
	}
	until := now.Add(lease.Duration)
	if held && h.until.After(until) {
		until = h.until // a lease never shrinks
	}
	l.holders[lease.Token] = holder{addr: addr, until: until, qname: r.Question[0].Name, lease: lease}
	l.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	shardproto.GrantLease(m, lease, index, l.key)
	return m
}

// stoppingText is the Extended DNS Error text of a lease request refused
// by a stopping member.
const stoppingText = "member is shutting down: send writes to another member"

// stop refuses every lease request from now on (stopping): the member
// is about to stop.
func (l *leases) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopping, l.told = true, map[[shardproto.TokenLen]byte]bool{}
}

// allTold reports whether every router holding an unexpired lease asked
// again since stop and was refused: none of them sends the member writes
// any more.
func (l *leases) allTold() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for token, h := range l.holders {
		if h.until.After(now) && !l.told[token] {
			return false
		}
	}
	return true
}

// pruneLocked drops the holders whose lease expired and whose last request
// is too old to be granted again.
func (l *leases) pruneLocked(now time.Time) {
	for token, h := range l.holders {
		if !h.until.After(now) && now.Sub(h.lease.Time) > shardproto.MaxSkew {
			delete(l.holders, token)
		}
	}
}

// notify sends notice (shardproto.Notice) to every router whose lease
// has not expired and waits until each answered or its lease expired (or
// ctx ended). In the first MaxLease after the member started it waits for
// that to pass first: a lease granted by the member's previous run may
// still hold. It returns the routers that did not answer.
func (l *leases) notify(ctx context.Context, notice shardproto.Notice) []string {
	if wait := time.Until(l.started.Add(shardproto.MaxLease)); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	now := time.Now()
	var hs []holder
	l.mu.Lock()
	l.pruneLocked(now)
	for _, h := range l.holders {
		if h.until.After(now) {
			hs = append(hs, h)
		}
	}
	l.mu.Unlock()
	if len(hs) == 0 {
		return nil
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		missed []string
	)
	for _, h := range hs {
		wg.Go(func() {
			msg, sent := notice.Msg(h.qname, h.lease, l.key)
			// A DNS server reads at most 512 bytes of a UDP request
			// (miekg/dns, as CoreDNS runs it): a notice of many names goes
			// over TCP.
			client := l.client
			if msg.Len() > dns.MinMsgSize {
				client = l.tcp
			}
			for time.Now().Before(h.until) && ctx.Err() == nil {
				m := msg.Copy()
				m.Id = dns.Id()
				if resp, _, err := client.ExchangeContext(ctx, m, h.addr); err == nil && resp.Rcode == dns.RcodeSuccess && shardproto.NoticeAcked(resp, sent, l.key) {
					return
				}
				// A refused port fails at once: do not spin.
				select {
				case <-time.After(noticeTry / 5):
				case <-ctx.Done():
				}
			}
			mu.Lock()
			missed = append(missed, h.addr)
			mu.Unlock()
		})
	}
	wg.Wait()
	return missed
}

// noticeChange notifies the routers holding leases on the member of change
// c of zone, at names (none: the whole zone) (leases.notify), with the
// member's applied index after the change, logging the routers that did not
// answer.
func noticeChange(ctx context.Context, l *leases, rep *replica.Replica, zone string, c shardproto.Change, names ...string) {
	if l == nil {
		return
	}
	notice := shardproto.Notice{Zone: zone, Change: c, Names: names, Index: rep.Applied()}
	if z := rep.Zone(zone); z != nil {
		// Read after the index: at least the serial of the write.
		notice.Serial, notice.Base, _ = z.Serial()
	}
	for _, addr := range l.notify(ctx, notice) {
		log.Warningf("router %s did not answer the notice of a change to %s (%s) before its lease expired", addr, zone, c)
	}
}

// lateNotice returns ctx carrying the notice of change c of zone at names,
// sent if a write made with ctx times out and is applied later after all
// (replica.WithLate): the routers then learn of it, as of any write.
func lateNotice(ctx context.Context, l *leases, rep *replica.Replica, zone string, c shardproto.Change, names ...string) context.Context {
	if l == nil {
		return ctx
	}
	return replica.WithLate(ctx, func() {
		noticeChange(context.Background(), l, rep, zone, c, names...)
	})
}
