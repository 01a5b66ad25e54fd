package craftroute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/xfrstream"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// Whole zones move in key mode "zone" (issue 52), where a zone lives on
// the shard of its origin's partition. A batch of partitions moves the
// zones whose origins they hold, as MongoDB's balancer moves a chunk:
//
//   - clone: each zone is read from the old owner (its export, one
//     consistent read) and staged on the new owner (PUT /v1/stage/{zone}:
//     an import in Raft that no query sees), before the critical section;
//   - critical section: the old owner's map part holds the partitions
//     (writes to their zones wait, as for a name a transaction holds) and
//     will delete the zones when it commits (Drop);
//   - catch-up: once that is prepared, what changed on the old owner
//     since each clone is read from its journal (an incremental transfer
//     from the clone's serial, from a member confirmed current), and the
//     new owner's part commits the staged zones and then those changes
//     (Imports, Moves), the new SOA serial among them;
//   - commit: the map at the next epoch gives the partitions to the new
//     owner, on both shards at once, all or nothing.
//
// A zone whose journal does not reach back to its clone (replaced
// meanwhile) fails the step, which clones it again.

// maxCatchUp bounds the records of one zone's catch-up: more changed
// since the clone than a change may hold, and the step clones again.
const maxCatchUp = 10000

// errCloneStale: a zone changed too much since it was cloned, or its
// journal no longer reaches back to the clone.
var errCloneStale = errors.New("the zone changed too much since it was cloned")

// moveZones commits next, whose batch moves partitions from src to dst,
// through parts (src's holds them and drops their zones), cloning the
// zones of those partitions to dst first; it returns the records moved.
func (c *Craftroute) moveZones(ctx context.Context, m, next *shardmap.Map, batch []int, parts map[*Shard]txn.Prepare, src, dst *Shard) (int, error) {
	held := map[int]bool{}
	for _, p := range batch {
		held[p] = true
	}
	zonesOn := func(ctx context.Context) ([]string, error) {
		lists, errs := c.txc.zoneListsOf(ctx, []*Shard{src})
		if errs[0] != nil {
			return nil, errs[0]
		}
		var zones []string
		for _, z := range lists[0] {
			if held[shardmap.PartitionOf(z.Zone, m.Partitions)] {
				zones = append(zones, z.Zone)
			}
		}
		slices.Sort(zones)
		return zones, nil
	}
	zones, err := zonesOn(ctx)
	if err != nil {
		return 0, err
	}
	staged := make([]txn.Staged, 0, len(zones))
	records := 0
	for _, z := range zones {
		st, err := c.cloneZone(ctx, src, dst, z)
		if err != nil {
			return 0, fmt.Errorf("cloning zone %s: %w", z, err)
		}
		staged = append(staged, st)
		records += st.Records
	}
	err = c.commitStep(ctx, next, parts, []*Shard{src}, func(ctx context.Context, parts map[*Shard]txn.Prepare) error {
		// The partitions are held: no zone of theirs comes or goes, no
		// record changes. Every zone must have been cloned.
		now, err := zonesOn(ctx)
		if err != nil {
			return err
		}
		if !slices.Equal(now, zones) {
			return fmt.Errorf("the zones of partitions %s changed while they were cloned (%d, now %d): cloning again", partitionText(batch), len(zones), len(now))
		}
		dp := parts[dst]
		dp.Imports = staged
		dp.Moves = nil
		for _, st := range staged {
			mv, err := c.catchUp(ctx, src, st)
			if err != nil {
				return fmt.Errorf("zone %s: %w", st.Zone, err)
			}
			if mv != nil {
				dp.Moves = append(dp.Moves, *mv)
			}
		}
		parts[dst] = dp
		return nil
	})
	return records, err
}

// cloneZone stages zone, read from shard src, on shard dst.
func (c *Craftroute) cloneZone(ctx context.Context, src, dst *Shard, zone string) (txn.Staged, error) {
	rep, err := c.txc.do(ctx, src, http.MethodGet, zonePath(zone), "", nil, "")
	if err != nil {
		return txn.Staged{}, err
	}
	if rep.status != http.StatusOK {
		return txn.Staged{}, rep.err(src)
	}
	put, err := c.txc.do(ctx, dst, http.MethodPut, txn.StagePath(zone), "", rep.body, "text/dns")
	if err != nil {
		return txn.Staged{}, err
	}
	if put.status != http.StatusOK {
		return txn.Staged{}, put.err(dst)
	}
	var st txn.Staged
	if err := json.Unmarshal(put.body, &st); err != nil || st.Import == 0 {
		return txn.Staged{}, fmt.Errorf("shard %s: staging %s: %q (%v)", dst.Name, zone, put.body, err)
	}
	return st, nil
}

// catchUp reads what changed in staged's zone on shard src since the
// serial it was cloned at, from a member confirmed current: the change
// that brings the clone to src's state (its SOA included), nil when
// nothing changed.
func (c *Craftroute) catchUp(ctx context.Context, src *Shard, st txn.Staged) (*txn.Move, error) {
	query := "serial=" + strconv.FormatUint(uint64(st.Serial), 10) + "&net=1&fresh=1"
	resp, err := c.txc.open(ctx, src, http.MethodGet, xfrstream.Path(st.Zone), query, nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, (&shardReply{status: resp.StatusCode, body: b}).err(src)
	}
	rd := xfrstream.NewReader(resp.Body)
	var rrs []dns.RR
	for {
		batch, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break // the end frame
		}
		if err != nil {
			return nil, fmt.Errorf("shard %s: the difference since serial %d: %w", src.Name, st.Serial, err)
		}
		if rrs = append(rrs, batch...); len(rrs) > maxCatchUp+4 {
			return nil, errCloneStale
		}
	}
	removed, added, ok := netDifference(rrs)
	if !ok {
		return nil, errCloneStale // a full transfer: the journal does not reach back
	}
	if removed == nil && added == nil {
		return nil, nil
	}
	var ch zoneapi.Change
	for _, rr := range removed {
		if rr.Header().Rrtype == dns.TypeSOA {
			continue // replaced by the new SOA, added
		}
		text, _ := json.Marshal(rr.String())
		ch.Delete = append(ch.Delete, text)
	}
	for _, rr := range added {
		ch.Add = append(ch.Add, rr.String())
	}
	return &txn.Move{Zone: st.Zone, Change: ch}, nil
}

// netDifference reads an incremental transfer folded into one difference
// (RFC 1995 section 4: the SOA, the old SOA, the records removed, the new
// SOA, the records added, the SOA): the records removed and added, the
// new SOA among the latter; both nil when the SOA alone says nothing
// changed. ok is false for anything else (a full transfer).
func netDifference(rrs []dns.RR) (removed, added []dns.RR, ok bool) {
	if len(rrs) == 0 {
		return nil, nil, false
	}
	cur, isSOA := rrs[0].(*dns.SOA)
	if !isSOA {
		return nil, nil, false
	}
	if len(rrs) == 1 {
		return nil, nil, true
	}
	if _, isSOA := rrs[1].(*dns.SOA); !isSOA || len(rrs) < 4 {
		return nil, nil, false
	}
	removed = []dns.RR{rrs[1]}
	i := 2
	for ; i < len(rrs) && rrs[i].Header().Rrtype != dns.TypeSOA; i++ {
		removed = append(removed, rrs[i])
	}
	if i >= len(rrs)-1 {
		return nil, nil, false
	}
	added = []dns.RR{rrs[i]}
	for i++; i < len(rrs)-1; i++ {
		if rrs[i].Header().Rrtype == dns.TypeSOA {
			return nil, nil, false
		}
		added = append(added, rrs[i])
	}
	if last, isSOA := rrs[len(rrs)-1].(*dns.SOA); !isSOA || last.Serial != cur.Serial {
		return nil, nil, false
	}
	return removed, added, true
}
