package craftroute

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/dnssec"
	"github.com/craftdns/craftdns/internal/policy"
	"github.com/craftdns/craftdns/internal/xfrstream"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
)

// shardXfr is one shard's transfer stream.
type shardXfr struct {
	shard        *Shard
	body         io.ReadCloser
	rd           *xfrstream.Reader
	idle         *time.Timer // ends the stream when the shard stalls
	serial, base uint32      // of the state the stream is read from
	zoneSerial   uint32      // key mode "name": of the cut (recorded on the shards before the transfer goes out)

	raw []dns.RR // records read from frames, not taken yet
	end bool     // the end frame was read

	opened *dns.SOA // the opening SOA
	old    *dns.SOA // incremental: the SOA of the secondary's copy
}

func (x *shardXfr) close() {
	x.idle.Stop()
	x.body.Close()
}

// pull reads the next frame into raw; false after the end frame.
func (x *shardXfr) pull() (bool, error) {
	if x.end {
		return false, nil
	}
	rrs, err := x.rd.Next()
	x.idle.Reset(xfrIdle)
	if errors.Is(err, io.EOF) {
		x.end = true
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("shard %s: %w", x.shard.Name, err)
	}
	x.raw = append(x.raw, rrs...)
	return true, nil
}

// peek returns the next record without taking it; nil at the end.
func (x *shardXfr) peek() (dns.RR, error) {
	for len(x.raw) == 0 {
		more, err := x.pull()
		if err != nil || !more {
			return nil, err
		}
	}
	return x.raw[0], nil
}

// take returns the next record; nil at the end.
func (x *shardXfr) take() (dns.RR, error) {
	rr, err := x.peek()
	if rr != nil {
		x.raw[0] = nil
		x.raw = x.raw[1:]
	}
	return rr, err
}

// soa takes the next record, which must be an SOA.
func (x *shardXfr) soa(what string) (*dns.SOA, error) {
	rr, err := x.take()
	if err != nil {
		return nil, err
	}
	soa, ok := rr.(*dns.SOA)
	if !ok {
		return nil, fmt.Errorf("shard %s: expected the %s SOA, got %v", x.shard.Name, what, rr)
	}
	return soa, nil
}

// ended checks that the stream ends here.
func (x *shardXfr) ended() error {
	rr, err := x.take()
	if err != nil {
		return err
	}
	if rr != nil {
		return fmt.Errorf("shard %s: records after the closing SOA: %v", x.shard.Name, rr)
	}
	if !x.end {
		return fmt.Errorf("shard %s: the transfer ended without its end", x.shard.Name)
	}
	return nil
}

// passOn hands the stream to send as it is (key mode "zone").
func (x *shardXfr) passOn(send func([]dns.RR) error) error {
	for {
		if len(x.raw) > 0 {
			if err := send(x.raw); err != nil {
				return err
			}
			x.raw = nil
		}
		more, err := x.pull()
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// startFull reads the opening SOA of every stream of a full transfer.
func startFull(xs []*shardXfr) error {
	for _, x := range xs {
		var err error
		if x.opened, err = x.soa("opening"); err != nil {
			return err
		}
		if next, err := x.peek(); err != nil {
			return err
		} else if next == nil {
			return fmt.Errorf("shard %s: a full transfer of the SOA alone", x.shard.Name)
		}
	}
	return nil
}

// startIncremental reads the opening of every stream of an incremental
// transfer: the shard's SOA and the SOA of the secondary's copy, or the SOA
// alone (the shard did not change since). It is false when a shard sends
// the whole zone instead (its journal does not reach back).
func startIncremental(xs []*shardXfr) (bool, error) {
	for _, x := range xs {
		var err error
		if x.opened, err = x.soa("opening"); err != nil {
			return false, err
		}
		next, err := x.peek()
		if err != nil {
			return false, err
		}
		switch soa, ok := next.(*dns.SOA); {
		case next == nil: // up to date: no difference
		case ok:
			x.old = soa
			x.take()
		default:
			return false, nil
		}
	}
	return true, nil
}

// group returns the records of the stream's next owner name and its
// canonical key; nil at the closing SOA, after which the stream must end.
func (x *shardXfr) group() ([]byte, []dns.RR, error) {
	first, err := x.take()
	if err != nil {
		return nil, nil, err
	}
	if first == nil {
		return nil, nil, fmt.Errorf("shard %s: the transfer ended without its closing SOA", x.shard.Name)
	}
	if _, ok := first.(*dns.SOA); ok {
		// The closing SOA: a full transfer has the SOA nowhere else.
		return nil, nil, x.ended()
	}
	owner := first.Header().Name
	group := []dns.RR{first}
	for {
		next, err := x.peek()
		if err != nil {
			return nil, nil, err
		}
		if next == nil || next.Header().Rrtype == dns.TypeSOA || !equalNames(next.Header().Name, owner) {
			break
		}
		x.take()
		group = append(group, next)
	}
	return dnsname.CanonicalKey(owner), group, nil
}

// union returns the records of a and those of b that a does not hold (the
// records of one owner name: a few).
func union(a, b []dns.RR) []dns.RR {
	out := a
	for _, rr := range b {
		if !slices.ContainsFunc(a, func(x dns.RR) bool { return xfrstream.Compare(x, rr) == 0 }) {
			if len(out) == len(a) {
				out = slices.Clone(a) // a's array belongs to a shard's group
			}
			out = append(out, rr)
		}
	}
	return out
}

func equalNames(a, b string) bool {
	return len(a) == len(b) && dnsname.Lower(a) == dnsname.Lower(b)
}

// zoneSOA is the SOA a merged transfer presents: the first shard's, with
// the zone serial of the cut.
func zoneSOA(xs []*shardXfr) *dns.SOA {
	soa := dns.Copy(xs[0].opened).(*dns.SOA)
	soa.Serial = xs[0].zoneSerial
	return soa
}

// batcher hands records to send xfrBatch at a time.
type batcher struct {
	send  func([]dns.RR) error
	batch []dns.RR
}

func (b *batcher) add(rrs ...dns.RR) error {
	b.batch = append(b.batch, rrs...)
	if len(b.batch) < xfrBatch {
		return nil
	}
	return b.flush()
}

func (b *batcher) flush() error {
	if len(b.batch) == 0 {
		return nil
	}
	err := b.send(b.batch)
	b.batch = make([]dns.RR, 0, xfrBatch)
	return err
}

// mergeFull merges the full transfers of every shard (key mode "name") by
// owner name and hands send the zone's transfer for a secondary at serial:
// the SOA alone when that is the cut's serial or newer (RFC 1995 section
// 2), else the whole zone (RFC 5936; in reply to an IXFR as RFC 1995
// section 4 allows). A name held by several shards comes once, with every
// record any of them holds there once: the apex, delegations and names
// below them are the same copy on every shard, and the owner of a DNAME
// holds its other RRsets on its own shard only.
func mergeFull(xs []*shardXfr, serial uint32, send func([]dns.RR) error) error {
	return mergeFullSigned(xs, serial, send, nil)
}

// signStream starts the signing of a transfer whose SOA is soa, its
// records going to emit (dnssec.ZoneStream).
type signStream func(soa *dns.SOA, emit func(...dns.RR) error) (*dnssec.ZoneStream, error)

// mergeFullSigned is mergeFull whose zone, when signed is not nil, goes
// out signed as it streams by (a signed zone: the router holds its keys).
func mergeFullSigned(xs []*shardXfr, serial uint32, send func([]dns.RR) error, signed signStream) error {
	soa := zoneSOA(xs)
	if serial != 0 && !zonerules.SerialAfter(soa.Serial, serial) {
		return send([]dns.RR{soa})
	}
	keys := make([][]byte, len(xs))
	groups := make([][]dns.RR, len(xs))
	for i, x := range xs {
		var err error
		if keys[i], groups[i], err = x.group(); err != nil {
			return err
		}
	}
	out := &batcher{send: send, batch: make([]dns.RR, 0, xfrBatch)}
	var zs *dnssec.ZoneStream
	if signed != nil {
		var err error
		if zs, err = signed(soa, out.add); err != nil {
			return err
		}
	} else {
		out.batch = append(out.batch, soa)
	}
	for {
		low := -1
		for i := range xs {
			if keys[i] != nil && (low < 0 || bytes.Compare(keys[i], keys[low]) < 0) {
				low = i
			}
		}
		if low < 0 {
			break
		}
		key, group := keys[low], groups[low]
		for i := low + 1; i < len(xs); i++ {
			if keys[i] != nil && bytes.Equal(keys[i], key) {
				group = union(group, groups[i])
			}
		}
		var err error
		if zs != nil {
			// Policies stay with the shards (Transfer's send drops
			// them): not signed, not in the NSEC bitmaps.
			err = zs.Add(policy.Without(group))
		} else {
			err = out.add(group...)
		}
		if err != nil {
			return err
		}
		for i := range xs {
			if keys[i] != nil && bytes.Equal(keys[i], key) {
				var err error
				if keys[i], groups[i], err = xs[i].group(); err != nil {
					return err
				}
			}
		}
	}
	if zs != nil {
		if err := zs.Close(); err != nil {
			return err
		}
	}
	out.batch = append(out.batch, soa)
	return out.flush()
}

// section returns the next record of the current section of an
// incremental stream; nil at its end (the SOA that closes it, taken).
func (x *shardXfr) section() (dns.RR, error) {
	if x.old == nil {
		return nil, nil // no difference on this shard
	}
	rr, err := x.take()
	if err != nil {
		return nil, err
	}
	if rr == nil {
		return nil, fmt.Errorf("shard %s: the difference ended early", x.shard.Name)
	}
	if _, ok := rr.(*dns.SOA); ok {
		return nil, nil
	}
	return rr, nil
}

// mergeIncremental merges the shards' differences since the cut of the
// secondary's serial (each shard's records removed, then added, in the
// order of xfrstream.Less) into one difference (RFC 1995 section 4): the
// SOA, the secondary's SOA, the records removed, the SOA, the records
// added, the SOA. A record every shard holds comes once.
func mergeIncremental(xs []*shardXfr, serial uint32, send func([]dns.RR) error) error {
	soa := zoneSOA(xs)
	if !zonerules.SerialAfter(soa.Serial, serial) {
		return send([]dns.RR{soa})
	}
	old := xs[0].old
	if old == nil {
		old = xs[0].opened
	}
	old = dns.Copy(old).(*dns.SOA)
	old.Serial = serial
	out := &batcher{send: send, batch: make([]dns.RR, 0, xfrBatch)}
	out.batch = append(out.batch, soa, old)
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			if err := out.add(soa); err != nil {
				return err
			}
		}
		heads := make([]dns.RR, len(xs))
		for i, x := range xs {
			var err error
			if heads[i], err = x.section(); err != nil {
				return err
			}
		}
		for {
			low := -1
			for i := range xs {
				if heads[i] != nil && (low < 0 || xfrstream.Less(heads[i], heads[low])) {
					low = i
				}
			}
			if low < 0 {
				break
			}
			rr := heads[low]
			if err := out.add(rr); err != nil {
				return err
			}
			for i, x := range xs {
				if heads[i] != nil && xfrstream.Compare(heads[i], rr) == 0 {
					var err error
					if heads[i], err = x.section(); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, x := range xs {
		if x.old != nil {
			if err := x.ended(); err != nil {
				return err
			}
		}
	}
	out.batch = append(out.batch, soa)
	return out.flush()
}
