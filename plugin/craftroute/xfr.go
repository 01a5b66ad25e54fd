package craftroute

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/transfer"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/xfrnotify"
	"github.com/craftdns/craftdns/internal/xfrstream"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// Zone transfers through the router. With the transfer plugin in the
// router's server block, Transfer serves AXFR (RFC 5936) and IXFR (RFC
// 1995) of the zones the router fronts, and NOTIFY goes to the plugin's
// `to` hosts after every change the members notify (notify.go).
//
// The router reads the zone from the shards' transfer streams
// (internal/xfrstream), each from a member's state that holds a transfer
// fence (craftstore's replica/fence.go): a fence is one entry in the shard's
// log, so the member's state holds every write committed before it was
// asked for, and while fences hold on every shard no transaction commits on
// any of them. The router sets one fence ID on every shard, has each
// member's stream begin (its headers carry the state's serial and base),
// and only then removes the fences: the states the streams are read from
// are one cut through every transaction, the zone as one server would have
// held it at one moment. Fences are held for those round trips only, not
// for the transfer; the members stream from their read snapshots.
//
// Key mode "zone": the zone's shard streams the transfer as a member would
// serve it (full, incremental from its journal, or the SOA alone), and the
// router passes it on.
//
// Key mode "name": the shards' streams are full transfers in DNS canonical
// order. The router merges them by owner name (every shard holds the apex
// and the delegations: those come once, from the first shard by name), and
// frames the result with the apex SOA at the zone's serial: the highest
// serial base plus every shard's changes since its base (serial.go), of the
// cut's states. An IXFR from that serial or a newer one gets the SOA alone;
// from an older one the whole zone (RFC 1995 section 4 allows a full
// transfer in reply to an IXFR).
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
	shards := c.cfg.shards
	asked := serial
	if c.cfg.key == keyZone {
		shards = []*Shard{c.zoneShard(origin)}
	} else {
		asked = 0 // the router merges full transfers
	}
	xs, err := c.txc.openXfrs(ctx, shards, origin, asked)
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
			select {
			case ch <- rrs:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var err error
		if c.cfg.key == keyZone {
			err = xs[0].passOn(send)
		} else {
			err = c.mergeXfrs(origin, xs, serial, send)
		}
		if err != nil {
			// The closing SOA is missing: the secondary discards the transfer.
			xfrCount.WithLabelValues("failed").Inc()
			log.Errorf("transfer of %s (serial %d): %v", origin, serial, err)
			return
		}
		xfrCount.WithLabelValues("done").Inc()
	}()
	return ch, nil
}

// shardXfr is one shard's transfer stream.
type shardXfr struct {
	shard        *Shard
	body         io.ReadCloser
	rd           *xfrstream.Reader
	idle         *time.Timer // cancels the transfer when the shard stalls
	serial, base uint32      // of the state the stream is read from

	buf    []dns.RR // read, not taken yet
	opened *dns.SOA // the opening SOA (merge)
	closed bool     // the closing SOA was read (merge)
}

func (x *shardXfr) close() {
	x.idle.Stop()
	x.body.Close()
}

// frame reads the next frame; io.EOF after the end frame.
func (x *shardXfr) frame() ([]dns.RR, error) {
	rrs, err := x.rd.Next()
	x.idle.Reset(xfrIdle)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("shard %s: %w", x.shard.Name, err)
	}
	return rrs, err
}

// passOn hands the stream to send as it is (key mode "zone").
func (x *shardXfr) passOn(send func([]dns.RR) error) error {
	for {
		rrs, err := x.frame()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(rrs); err != nil {
			return err
		}
	}
}

// fill reads frames until buf holds a record or the closing SOA was read.
func (x *shardXfr) fill() error {
	for len(x.buf) == 0 && !x.closed {
		rrs, err := x.frame()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("shard %s: the transfer ended without its closing SOA", x.shard.Name)
		}
		if err != nil {
			return err
		}
		if len(rrs) == 0 {
			continue
		}
		if x.opened == nil {
			soa, ok := rrs[0].(*dns.SOA)
			if !ok {
				return fmt.Errorf("shard %s: the transfer does not begin with the SOA", x.shard.Name)
			}
			x.opened, rrs = soa, rrs[1:]
		}
		for i, rr := range rrs {
			if _, ok := rr.(*dns.SOA); !ok {
				continue
			}
			// The closing SOA (a full transfer has the SOA nowhere else).
			if i != len(rrs)-1 {
				return fmt.Errorf("shard %s: records after the closing SOA", x.shard.Name)
			}
			x.closed, rrs = true, rrs[:i]
			if _, err := x.frame(); !errors.Is(err, io.EOF) {
				return fmt.Errorf("shard %s: no end after the closing SOA (%v)", x.shard.Name, err)
			}
			break
		}
		x.buf = append(x.buf, rrs...)
	}
	return nil
}

// next returns the records of the stream's next owner name and its key
// (dnsname.CanonicalKey); nil at the end of the stream.
func (x *shardXfr) next() ([]byte, []dns.RR, error) {
	if err := x.fill(); err != nil || len(x.buf) == 0 {
		return nil, nil, err
	}
	owner := x.buf[0].Header().Name
	var group []dns.RR
	for {
		i := 0
		for i < len(x.buf) && equalNames(x.buf[i].Header().Name, owner) {
			i++
		}
		group = append(group, x.buf[:i]...)
		x.buf = x.buf[i:]
		if len(x.buf) > 0 {
			break
		}
		if err := x.fill(); err != nil {
			return nil, nil, err
		}
		if len(x.buf) == 0 {
			break
		}
	}
	return dnsname.CanonicalKey(owner), group, nil
}

func equalNames(a, b string) bool {
	return len(a) == len(b) && dnsname.Lower(a) == dnsname.Lower(b)
}

// mergeXfrs merges the full transfers of every shard (key mode "name") and
// hands send the zone's transfer for a secondary at serial.
func (c *Craftroute) mergeXfrs(origin string, xs []*shardXfr, serial uint32, send func([]dns.RR) error) error {
	keys := make([][]byte, len(xs))
	groups := make([][]dns.RR, len(xs))
	states := make([]shardSerial, len(xs))
	for i, x := range xs {
		var err error
		if keys[i], groups[i], err = x.next(); err != nil {
			return err
		}
		if x.opened == nil {
			return fmt.Errorf("shard %s: the transfer has no SOA", x.shard.Name)
		}
		states[i] = shardSerial{serial: x.serial, base: x.base}
	}
	soa := dns.Copy(xs[0].opened).(*dns.SOA)
	soa.Serial = sumSerials(states)
	if serial != 0 && !zoneapi.SerialAfter(soa.Serial, serial) {
		return send([]dns.RR{soa}) // up to date (RFC 1995 section 2)
	}
	batch := make([]dns.RR, 0, xfrBatch)
	batch = append(batch, soa)
	for {
		min := -1
		for i := range xs {
			if keys[i] != nil && (min < 0 || bytes.Compare(keys[i], keys[min]) < 0) {
				min = i
			}
		}
		if min < 0 {
			break
		}
		key := keys[min]
		batch = append(batch, groups[min]...)
		// The same name on other shards (the apex, a delegation, a name
		// below one) is the same copy: skip it.
		for i := range xs {
			if keys[i] != nil && bytes.Equal(keys[i], key) {
				var err error
				if keys[i], groups[i], err = xs[i].next(); err != nil {
					return err
				}
			}
		}
		if len(batch) >= xfrBatch {
			if err := send(batch); err != nil {
				return err
			}
			batch = make([]dns.RR, 0, xfrBatch)
		}
	}
	return send(append(batch, soa))
}

// openXfrs sets one fence on every shard of shards and opens their
// transfer streams of origin for a secondary at serial, then removes the
// fences. While transactions hold names of the zone it tries again, for
// xfrFenceFor. errZoneAbsent: a shard does not hold the zone.
func (sc *shardClient) openXfrs(ctx context.Context, shards []*Shard, origin string, serial uint32) ([]*shardXfr, error) {
	deadline := time.Now().Add(xfrFenceFor)
	for attempt := 0; ; attempt++ {
		xs, busy, err := sc.tryOpenXfrs(ctx, shards, origin, serial)
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

func (sc *shardClient) tryOpenXfrs(ctx context.Context, shards []*Shard, origin string, serial uint32) (xs []*shardXfr, busy bool, err error) {
	id := txn.NewID()
	query := "fence=" + id.String() + "&serial=" + strconv.FormatUint(uint64(serial), 10)
	xs = make([]*shardXfr, len(shards))
	errs := make([]error, len(shards))
	busies := make([]bool, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() {
			resp, err := sc.open(ctx, s, http.MethodPost, xfrstream.Path(origin), query, nil, "")
			if err != nil {
				errs[i] = err
				return
			}
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				rep := &shardReply{status: resp.StatusCode, body: b}
				errs[i] = rep.err(s)
				switch resp.StatusCode {
				case http.StatusNotFound:
					errs[i] = fmt.Errorf("%w: %v", errZoneAbsent, errs[i])
				case http.StatusServiceUnavailable:
					busies[i] = true
				}
				return
			}
			x := &shardXfr{shard: s, body: resp.Body, rd: xfrstream.NewReader(resp.Body)}
			x.serial, err = xfrstream.ParseUint32(resp.Header.Get(xfrstream.HeaderSerial))
			if err == nil {
				x.base, err = xfrstream.ParseUint32(resp.Header.Get(xfrstream.HeaderBase))
			}
			if err != nil {
				resp.Body.Close()
				errs[i] = fmt.Errorf("shard %s: transfer without its serial and base: %v", s.Name, err)
				return
			}
			xs[i] = x
		})
	}
	wg.Wait()
	// Every stream began (or failed): the fences have served.
	go sc.unfence(shards, origin, id)
	for i := range shards {
		if errs[i] != nil {
			for _, x := range xs {
				if x != nil {
					x.body.Close()
				}
			}
			return nil, busies[i], errs[i]
		}
	}
	for _, x := range xs {
		x.idle = time.AfterFunc(xfrIdle, func() { x.body.Close() })
	}
	return xs, false, nil
}

// unfence removes fence id of origin from every shard of shards; a fence
// not removed runs out on its own (replica.FenceTTL).
func (sc *shardClient) unfence(shards []*Shard, origin string, id txn.ID) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range shards {
		wg.Go(func() {
			rep, err := sc.do(ctx, s, http.MethodDelete, xfrstream.Path(origin)+"/"+id.String(), "", nil, "")
			if err == nil && rep.status >= 300 {
				err = rep.err(s)
			}
			if err != nil {
				log.Warningf("removing transfer fence %s of %s on shard %s: %v (it runs out on its own)", id, origin, s.Name, err)
			}
		})
	}
	wg.Wait()
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
