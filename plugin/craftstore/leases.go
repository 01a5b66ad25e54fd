package craftstore

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/partition"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// Change leases (internal/partition/lease.go): the routers that hold an
// unexpired lease on this member get a NOTIFY for every write the member
// acknowledges, before it is acknowledged, so that no router keeps a
// negative answer, or a view of which zones exist, that the write made
// stale.

// noticeTry bounds one try of a notice; it is sent again until the router
// answers or its lease expires.
const noticeTry = 100 * time.Millisecond

// leases are the routers' leases on one member.
type leases struct {
	mu      sync.Mutex
	holders map[string]holder // router DNS address (host:port) → its lease
	started time.Time         // leases granted before this (another run) may still hold
	client  *dns.Client       // UDP
	tcp     *dns.Client       // for notices over 512 bytes (many names)
}

// holder is one router's lease.
type holder struct {
	addr  string
	until time.Time
	qname string // the lease query's name: the notices' question
	lease partition.Lease
}

// newLeases returns the leases of a member started at now; created says
// its data directory was new, so no earlier run granted a lease.
func newLeases(now time.Time, created bool) *leases {
	if created {
		now = now.Add(-partition.MaxLease)
	}
	return &leases{holders: map[string]holder{}, started: now,
		client: &dns.Client{Net: "udp", Timeout: noticeTry},
		tcp:    &dns.Client{Net: "tcp", Timeout: noticeTry}}
}

// grant records lease request r from remote, and returns the reply: the
// option in lease mode echoed, so that the router knows the lease was
// granted (a member without leases answers the query as a plain one).
func (l *leases) grant(remote net.Addr, r *dns.Msg) *dns.Msg {
	lease, _ := partition.LeaseRequested(r)
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(lease.Port)))
	until := time.Now().Add(lease.Duration)
	l.mu.Lock()
	if h, ok := l.holders[addr]; !ok || until.After(h.until) || h.lease.Token != lease.Token {
		l.holders[addr] = holder{addr: addr, until: until, qname: r.Question[0].Name, lease: lease}
	}
	l.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	partition.RequestLease(m, lease)
	return m
}

// notify sends notice (partition.Notice) to every router whose lease
// has not expired and waits until each answered or its lease expired (or
// ctx ended). In the first MaxLease after the member started it waits for
// that to pass first: a lease granted by the member's previous run may
// still hold. It returns the routers that did not answer.
func (l *leases) notify(ctx context.Context, notice partition.Notice) []string {
	if wait := time.Until(l.started.Add(partition.MaxLease)); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	now := time.Now()
	var hs []holder
	l.mu.Lock()
	for addr, h := range l.holders {
		if h.until.After(now) {
			hs = append(hs, h)
		} else {
			delete(l.holders, addr)
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
			msg := notice.Msg(h.qname, h.lease)
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
				if resp, _, err := client.ExchangeContext(ctx, m, h.addr); err == nil && resp.Rcode == dns.RcodeSuccess {
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
func noticeChange(ctx context.Context, l *leases, rep *replica.Replica, zone string, c partition.Change, names ...string) {
	if l == nil {
		return
	}
	notice := partition.Notice{Zone: zone, Change: c, Names: names, Index: rep.Applied()}
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
func lateNotice(ctx context.Context, l *leases, rep *replica.Replica, zone string, c partition.Change, names ...string) context.Context {
	if l == nil {
		return ctx
	}
	return replica.WithLate(ctx, func() {
		noticeChange(context.Background(), l, rep, zone, c, names...)
	})
}
