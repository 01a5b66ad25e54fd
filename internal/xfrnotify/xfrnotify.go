// Package xfrnotify sends the NOTIFYs (RFC 1996) of one server block after
// its zones change, for both plugins: craftstore after a change it
// applied, craftroute after a change a member notified it of. The sending
// itself is the transfer plugin's (transfer.Transfer.Notify, to the
// block's `to` hosts).
//
// A Notifier keeps at most one NOTIFY per zone in flight and one pending, so
// a burst of changes costs two rounds of NOTIFY and never blocks the caller.
// One more NOTIFY follows a quiet second later: a secondary that gets a
// NOTIFY (without SOA, as the transfer plugin sends it) while it transfers
// the zone may take it as answered by that transfer (NSD does), and would
// miss the changes after it until its refresh timer.
package xfrnotify

import (
	"sync"
	"time"

	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
)

// Settle is the quiet time before the trailing NOTIFY.
const Settle = time.Second

// Notifier sends the NOTIFYs of one server block.
type Notifier struct {
	zones []string // the server block's zones
	send  func(zone string) error
	log   clog.P
	// Settle is the quiet time before the trailing NOTIFY (tests lower it).
	Settle time.Duration

	mu      sync.Mutex
	pending map[string]bool // zone -> in flight; true: another one is due after it
	closed  bool
}

// New returns a Notifier for the zones of a server block that sends with
// send and logs failures to log.
func New(zones []string, send func(string) error, log clog.P) *Notifier {
	return &Notifier{zones: zones, send: send, log: log, Settle: Settle, pending: map[string]bool{}}
}

// Changed schedules a NOTIFY for zone (canonical) if the block serves it.
// It never blocks.
func (n *Notifier) Changed(zone string) {
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

// Idle reports whether no NOTIFY is in flight or due.
func (n *Notifier) Idle() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.pending) == 0
}

// run sends NOTIFY for zone until no change came in meanwhile, then once
// more after the settle time.
func (n *Notifier) run(zone string) {
	trailing := false
	for {
		if err := n.send(zone); err != nil {
			n.log.Warningf("NOTIFY for %s: %v", zone, err)
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
			time.Sleep(n.Settle) // changes meanwhile are covered by the next NOTIFY
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

// Close stops the NOTIFYs; those in flight finish.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
}
