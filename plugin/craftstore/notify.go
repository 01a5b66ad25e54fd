package craftstore

import (
	"sync"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/transfer"
)

// After a change to a zone is applied, every member sends NOTIFY (RFC 1996)
// through the transfer plugin of each server block that serves the zone
// (to its `to` hosts). The replica reports applied changes from its Ready
// loop (replica.Config.OnChange) to the member's notifyHub, which hands them
// to the notifiers of the server blocks using the member; a notifier keeps
// at most one NOTIFY per zone in flight and one pending, so a burst of
// changes costs two rounds of NOTIFY and never blocks the Ready loop. One
// more NOTIFY follows a quiet second later: a secondary that gets a NOTIFY
// (without SOA, as the transfer plugin sends it) while it transfers the
// zone may take it as answered by that transfer (NSD does), and would miss
// the changes after it until its refresh timer.

// notifyHub fans the changed zones of one member out to its server blocks.
type notifyHub struct {
	mu   sync.Mutex
	subs map[*notifier]struct{}
}

// changed is the replica's OnChange: it must not block.
func (h *notifyHub) changed(zone string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n := range h.subs {
		n.changed(zone)
	}
}

func (h *notifyHub) add(n *notifier) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[*notifier]struct{}{}
	}
	h.subs[n] = struct{}{}
}

func (h *notifyHub) remove(n *notifier) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, n)
}

// notifier sends the NOTIFYs of one server block.
type notifier struct {
	hub   *notifyHub
	zones []string // the server block's zones
	send  func(zone string) error
	// settle is the quiet time before the trailing NOTIFY.
	settle time.Duration

	mu      sync.Mutex
	pending map[string]bool // zone -> in flight; true: another one is due after it
	closed  bool
}

func newNotifier(hub *notifyHub, zones []string, send func(string) error) *notifier {
	return &notifier{hub: hub, zones: zones, send: send, settle: time.Second, pending: map[string]bool{}}
}

// changed schedules a NOTIFY for zone.
func (n *notifier) changed(zone string) {
	if plugin.Zones(n.zones).Matches(zone) == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if _, inFlight := n.pending[zone]; inFlight {
		n.pending[zone] = true
		return
	}
	n.pending[zone] = false
	go n.run(zone)
}

// run sends NOTIFY for zone until no change came in meanwhile, then once
// more after the settle time.
func (n *notifier) run(zone string) {
	trailing := false
	for {
		if err := n.send(zone); err != nil {
			log.Warningf("NOTIFY for %s: %v", zone, err)
		}
		n.mu.Lock()
		switch {
		case n.closed || (trailing && !n.pending[zone]):
			delete(n.pending, zone)
			n.mu.Unlock()
			return
		case n.pending[zone]:
			n.pending[zone] = false
			trailing = false
			n.mu.Unlock()
		default:
			trailing = true
			n.mu.Unlock()
			time.Sleep(n.settle) // changes meanwhile are covered by the next NOTIFY
			n.mu.Lock()
			closed := n.closed
			if closed {
				delete(n.pending, zone)
			}
			n.mu.Unlock()
			if closed {
				return
			}
		}
	}
}

func (n *notifier) close() {
	n.hub.remove(n)
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
}

// startNotify finds the transfer plugin of the server block, if any, and
// subscribes to the member's changes. It runs in OnStartup after start.
func (c *Craftstore) startNotify(cfg *dnsserver.Config) error {
	t, ok := cfg.Handler("transfer").(*transfer.Transfer)
	if !ok || t == nil || c.ref == nil {
		return nil
	}
	c.notify = newNotifier(c.ref.notify, c.Zones, t.Notify)
	c.ref.notify.add(c.notify)
	return nil
}

// stopNotify ends the subscription; NOTIFYs in flight finish.
func (c *Craftstore) stopNotify() error {
	if c.notify != nil {
		c.notify.close()
		c.notify = nil
	}
	return nil
}
