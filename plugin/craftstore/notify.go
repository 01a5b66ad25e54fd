package craftstore

import (
	"sync"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/transfer"

	"github.com/craftdns/craftdns/internal/xfrnotify"
)

// After a change to a zone is applied, every member sends NOTIFY (RFC 1996)
// through the transfer plugin of each server block that serves the zone
// (to its `to` hosts). The replica reports applied changes from its Ready
// loop (replica.Config.OnChange) to the member's notifyHub, which hands them
// to the notifiers (package internal/xfrnotify) of the server blocks using
// the member; none of it blocks the Ready loop.

// notifyHub fans the changed zones of one member out to its server blocks.
type notifyHub struct {
	mu   sync.Mutex
	subs map[*xfrnotify.Notifier]struct{}
}

// changed is the replica's OnChange: it must not block.
func (h *notifyHub) changed(zone string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n := range h.subs {
		n.Changed(zone)
	}
}

func (h *notifyHub) add(n *xfrnotify.Notifier) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[*xfrnotify.Notifier]struct{}{}
	}
	h.subs[n] = struct{}{}
}

func (h *notifyHub) remove(n *xfrnotify.Notifier) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, n)
}

// startNotify finds the transfer plugin of the server block, if any, and
// subscribes to the member's changes. It runs in OnStartup after start.
func (c *Craftstore) startNotify(cfg *dnsserver.Config) error {
	t, ok := cfg.Handler("transfer").(*transfer.Transfer)
	if !ok || t == nil || c.ref == nil {
		return nil
	}
	c.notify = xfrnotify.New(c.Zones, t.Notify, log)
	c.ref.notify.add(c.notify)
	return nil
}

// stopNotify ends the subscription; NOTIFYs in flight finish.
func (c *Craftstore) stopNotify() error {
	if c.notify != nil {
		c.ref.notify.remove(c.notify)
		c.notify.Close()
		c.notify = nil
	}
	return nil
}
