package craftroute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/transfer"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/xfrnotify"
	"github.com/craftdns/craftdns/internal/xfrstream"

	"github.com/miekg/dns"
)

// Zone transfers through the router. With the transfer plugin in the
// router's server block, Transfer serves AXFR (RFC 5936) and IXFR (RFC
// 1995) of the zones the router fronts, and NOTIFY goes to the plugin's
// `to` hosts after every change the members notify (notify.go).
//
// The router reads the zone from the shards' transfer streams
// (internal/xfrstream), each from a member's state that holds a transfer
// fence (craftstore's replica/fsm/fence.go): a fence is one entry in the shard's
// log, so the member's state holds every write committed before it was
// asked for; while it holds no transaction prepares in the zone on that
// shard, and the member reads once the parts prepared before it finished.
// The router sets one fence ID on every shard, has each member's stream
// begin (its headers carry the state's serial and base), and only then
// removes the fences: the states the streams are read from are one cut
// through every transaction, the zone as one server would have held it at
// one moment. That needs every fence to hold until the last one is set: in
// key mode name the router removes the fences before it sends anything,
// and when a shard says its fence had run out (a shard electing a leader
// held up the others for longer than replica.FenceTTL) it starts again. Fences are held for those round trips only, not
// for the transfer; the members stream from their read snapshots.
//
// Key mode "zone": the zone's shard streams the transfer as a member would
// serve it (full, incremental from its journal, or the SOA alone), and the
// router passes it on.
//
// Key mode "name": for AXFR the shards' streams are full transfers in DNS
// canonical order. The router merges them by owner name (every shard holds
// the apex and the delegations: those come once, from the first shard by
// name), and frames the result with the apex SOA at the zone's serial: the
// highest serial base plus every shard's changes since its base
// (serial.go), of the cut's states. Fences are exclusive (one transfer's
// cut at a time per zone), so cuts follow each other on every shard and a
// zone serial stands for one cut; every shard records it (each shard's
// serial in it) when the router removes the fences.
//
// IXFR (RFC 1995) from a serial the router presented in a transfer: the
// router finds that serial's cut on a shard, asks every shard for the one
// difference between its state in that cut and now (its journal's changes
// folded, in the order of xfrstream.Less), and merges them into one
// difference, a record every shard holds coming once. From the cut's
// serial or a newer one the answer is the SOA alone; when no shard keeps
// the cut or a shard's journal does not reach back to it, the whole zone
// (RFC 1995 section 4).
//
// Memory does not grow with the zone: one batch per shard is read ahead,
// and the transfer plugin takes one batch at a time.

const (
	// xfrFenceFor bounds the tries to set fences on every shard while
	// transactions hold names of the zone.
	xfrFenceFor = 10 * time.Second
	// xfrIdle ends a transfer whose shard sent nothing for that long.
	xfrIdle = 30 * time.Second
	// xfrBatch is how many records the router hands the transfer plugin at
	// a time.
	xfrBatch = 512
)

var _ transfer.Transferer = (*Craftroute)(nil)

// Transfer implements transfer.Transferer.
func (c *Craftroute) Transfer(name string, serial uint32) (<-chan []dns.RR, error) {
	origin := dnsname.Lower(dns.Fqdn(name))
	if plugin.Zones(c.Zones).Matches(origin) == "" || c.zones.longest(origin) != origin {
		return nil, transfer.ErrNotAuthoritative
	}
	ctx, cancel := context.WithCancel(context.Background())
	// A signed zone split by name goes out whole and signed as it
	// streams by (dnssec.go): the secondaries need its NSEC chain.
	var signed signStream
	from := serial
	if keys := c.sec.keysFor(origin); keys != nil && c.sec.cfg.Signs(origin) && c.keyMode() == keyName {
		from = 0
		signed = func(soa *dns.SOA, emit func(...dns.RR) error) (*dnssec.ZoneStream, error) {
			return c.sec.signer.NewZoneStream(keys, soa, time.Now(), emit)
		}
	}
	xs, kind, err := c.openTransfer(ctx, origin, from)
	if err != nil && c.refreshMap(ctx, err) {
		// A member fenced the transfer: the shards changed since the
		// router's map (a shard added): once more, by the map read now.
		xs, kind, err = c.openTransfer(ctx, origin, from)
	}
	if err != nil {
		cancel()
		if errors.Is(err, errZoneAbsent) {
			return nil, transfer.ErrNotAuthoritative
		}
		log.Errorf("transfer of %s: %v", origin, err)
		return nil, err
	}
	ch := make(chan []dns.RR)
	go func() {
		defer close(ch)
		defer cancel()
		defer func() {
			for _, x := range xs {
				x.close()
			}
		}()
		send := func(rrs []dns.RR) error {
			// Policies stay with the shards (internal/policy).
			if rrs = policy.Without(rrs); len(rrs) == 0 {
				return nil
			}
			select {
			case ch <- rrs:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var err error
		switch kind {
		case xfrPass:
			err = xs[0].passOn(send)
		case xfrFull:
			err = mergeFullSigned(xs, serial, send, signed)
		case xfrIncremental:
			err = mergeIncremental(xs, serial, send)
		}
		if err != nil {
			// The closing SOA is missing: the secondary discards the transfer.
			xfrCount.WithLabelValues(string(kind), "failed").Inc()
			log.Errorf("transfer of %s (serial %d): %v", origin, serial, err)
			return
		}
		xfrCount.WithLabelValues(string(kind), "done").Inc()
	}()
	return ch, nil
}

// Kinds of transfer through the router.
type xfrKind string

const (
	xfrPass        xfrKind = "zone"        // key mode zone: the shard's transfer passed on
	xfrFull        xfrKind = "full"        // key mode name: the shards' zones merged
	xfrIncremental xfrKind = "incremental" // key mode name: the shards' differences merged
)

// openTransfer opens the shards' streams of a transfer of origin to a
// secondary at serial.
func (c *Craftroute) openTransfer(ctx context.Context, origin string, serial uint32) ([]*shardXfr, xfrKind, error) {
	if c.keyMode() == keyZone {
		s := c.zoneShard(origin)
		xs, err := c.txc.openXfrs(ctx, []*Shard{s}, origin, func(*Shard) (uint32, bool) { return serial, false }, false)
		return xs, xfrPass, err
	}
	if serial != 0 {
		if cut := c.txc.findCut(ctx, origin, serial); cut != nil {
			from := func(s *Shard) (uint32, bool) { st := cut.Shards[s.Name]; return st.Serial, true }
			complete := true
			for _, s := range c.shards() {
				_, ok := cut.Shards[s.Name]
				complete = complete && ok
			}
			if complete {
				xs, err := c.txc.openXfrs(ctx, c.shards(), origin, from, true)
				if err != nil {
					return nil, "", err
				}
				incremental, err := startIncremental(xs)
				if err == nil && incremental {
					return xs, xfrIncremental, nil
				}
				for _, x := range xs {
					x.close()
				}
				if err != nil {
					return nil, "", err
				}
				// A shard's journal no longer reaches back: the whole zone.
			}
		}
	}
	xs, err := c.txc.openXfrs(ctx, c.shards(), origin, func(*Shard) (uint32, bool) { return 0, false }, true)
	if err == nil {
		err = startFull(xs)
	}
	if err != nil {
		for _, x := range xs {
			x.close()
		}
		return nil, "", err
	}
	return xs, xfrFull, nil
}

// findCut returns the cut recorded for zone serial on the first shard that
// keeps it, nil if none does (or none answers).
func (sc *shardClient) findCut(ctx context.Context, origin string, serial uint32) *xfrstream.Cut {
	ctx, cancel := context.WithTimeout(ctx, shardCallTimeout)
	defer cancel()
	for _, s := range sc.c.shards() {
		rep, err := sc.do(ctx, s, http.MethodGet, xfrstream.CutPath(origin, serial), "", nil, "")
		if err != nil || rep.status != http.StatusOK {
			continue
		}
		var cut xfrstream.Cut
		if json.Unmarshal(rep.body, &cut) == nil && cut.Serial == serial {
			return &cut
		}
	}
	return nil
}

// openXfrs sets one fence on every shard of shards and opens their
// transfer streams of origin, each for a secondary at the serial from
// gives it (with net, for one difference), then removes the fences; with
// record, each shard records the cut (for IXFR in key mode "name"). While
// transactions or another transfer hold the zone it tries again, for
// xfrFenceFor. errZoneAbsent: a shard does not hold the zone.
func (sc *shardClient) openXfrs(ctx context.Context, shards []*Shard, origin string, from func(*Shard) (uint32, bool), record bool) ([]*shardXfr, error) {
	deadline := time.Now().Add(xfrFenceFor)
	for attempt := 0; ; attempt++ {
		xs, busy, err := sc.tryOpenXfrs(ctx, shards, origin, from, record)
		if err == nil {
			return xs, nil
		}
		if !busy || time.Now().After(deadline) {
			return nil, err
		}
		pause := time.Duration(rand.Int64N(int64(txBusyBackoff) << min(attempt, 5)))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, err
		}
	}
}

func (sc *shardClient) tryOpenXfrs(ctx context.Context, shards []*Shard, origin string, from func(*Shard) (uint32, bool), record bool) (xs []*shardXfr, busy bool, err error) {
	id := txn.NewID()
	closeAll := func() {
		for _, x := range xs {
			x.body.Close()
		}
	}
	// One shard after the other, in the order of their names: two
	// transfers of a zone then never hold a fence each that the other
	// waits for.
	for _, s := range byName(shards) {
		serial, net := from(s)
		query := "fence=" + id.String() + "&serial=" + strconv.FormatUint(uint64(serial), 10)
		if net {
			query += "&net=1"
		}
		x, busy, err := sc.openXfr(ctx, s, origin, query)
		if err != nil {
			closeAll()
			go sc.unfence(shards, origin, id, nil)
			return nil, busy, err
		}
		xs = append(xs, x)
	}
	// Every stream began: the fences have served.
	if !record {
		// Key mode zone (one shard, no transactions): they go in the
		// background.
		go sc.unfence(shards, origin, id, nil)
	} else {
		// The cut is recorded as the fences go, before anything is sent,
		// so that an IXFR from its serial finds it.
		cut := &xfrstream.Cut{Shards: map[string]xfrstream.State{}}
		var sum serialSum
		for _, x := range xs {
			sum.add(shardSerial{serial: x.serial, base: x.base})
			cut.Shards[x.shard.Name] = xfrstream.State{Serial: x.serial, Base: x.base}
		}
		cut.Serial = sum.value()
		if !sc.unfence(shards, origin, id, cut) {
			// A fence ran out (or its removal failed) before every shard
			// held one: a transaction may have prepared on a shard read
			// before and committed on one read after. Try again with new
			// fences.
			closeAll()
			return nil, true, fmt.Errorf("a transfer fence of %s ran out before every shard held one", origin)
		}
		for _, x := range xs {
			x.zoneSerial = cut.Serial
		}
	}
	for _, x := range xs {
		x.idle = time.AfterFunc(xfrIdle, func() { x.body.Close() })
	}
	return xs, false, nil
}

// openXfr sets a fence on shard s and opens its transfer stream of origin
// (query: the fence and the secondary's serial); busy says the shard
// answered 503 (another transfer's fence, or transactions, held the zone
// too long; or no quorum).
func (sc *shardClient) openXfr(ctx context.Context, s *Shard, origin, query string) (x *shardXfr, busy bool, err error) {
	resp, err := sc.open(ctx, s, http.MethodPost, xfrstream.Path(origin), query, nil, "")
	if err != nil {
		return nil, false, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if f := sc.fenced(s, resp, b); f != nil {
			// Routed by a map older than the shards (the member judges
			// it on the state it would read): read the map, and again.
			noteFenced(ctx, f)
			return nil, false, f
		}
		err := (&shardReply{status: resp.StatusCode, body: b}).err(s)
		switch resp.StatusCode {
		case http.StatusNotFound:
			return nil, false, fmt.Errorf("%w: %v", errZoneAbsent, err)
		case http.StatusServiceUnavailable:
			return nil, true, err
		}
		return nil, false, err
	}
	x = &shardXfr{shard: s, body: resp.Body, rd: xfrstream.NewReader(resp.Body)}
	x.serial, err = xfrstream.ParseUint32(resp.Header.Get(xfrstream.HeaderSerial))
	if err == nil {
		x.base, err = xfrstream.ParseUint32(resp.Header.Get(xfrstream.HeaderBase))
	}
	if err != nil {
		resp.Body.Close()
		return nil, false, fmt.Errorf("shard %s: transfer without its serial and base: %v", s.Name, err)
	}
	return x, false, nil
}

// unfence removes fence id of origin from every shard of shards, which
// record cut (when not nil); a fence not removed runs out on its own
// (replica.FenceTTL). It reports whether every shard removed its fence and
// said it still held.
func (sc *shardClient) unfence(shards []*Shard, origin string, id txn.ID, cut *xfrstream.Cut) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var body []byte
	ctype := ""
	if cut != nil {
		body, _ = json.Marshal(cut)
		ctype = "application/json"
	}
	var wg sync.WaitGroup
	var lost atomic.Bool
	for _, s := range shards {
		wg.Go(func() {
			rep, err := sc.do(ctx, s, http.MethodDelete, xfrstream.Path(origin)+"/"+id.String(), "", body, ctype)
			if err == nil && rep.status >= 300 {
				err = rep.err(s)
			}
			if err != nil {
				lost.Store(true)
				log.Warningf("removing transfer fence %s of %s on shard %s: %v (it runs out on its own)", id, origin, s.Name, err)
				return
			}
			var rel xfrstream.Released
			if json.Unmarshal(rep.body, &rel) != nil || !rel.Held {
				lost.Store(true)
			}
		})
	}
	wg.Wait()
	return !lost.Load()
}

// startNotify finds the transfer plugin of the server block, if any: the
// router then sends NOTIFY to its `to` hosts after every change a member
// notifies (serveNotice).
func (c *Craftroute) startNotify(cfg *dnsserver.Config) {
	if t, ok := cfg.Handler("transfer").(*transfer.Transfer); ok && t != nil {
		c.notify.Store(xfrnotify.New(c.Zones, t.Notify, log))
	}
}

// stopNotify undoes startNotify; NOTIFYs in flight finish.
func (c *Craftroute) stopNotify() {
	if n := c.notify.Swap(nil); n != nil {
		n.Close()
	}
}
