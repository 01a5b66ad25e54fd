package craftroute

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// Elastic shards (issue 52; docs/design.md, "Elastic shards"): a shard is
// added to the map, or removed from it, online, a batch of partitions at
// each epoch. The migration lives in the map (shardmap.Migration), so in
// every shard's Raft state: the router that started it drives it, and any
// other takes over when the map has not moved for migrateStall (that
// router died). Each step is one map transaction:
//
//   - Join (an added shard): the shard enters the map owning no
//     partition. The first shard's part holds every partition (no write
//     of a name every shard holds can commit meanwhile), the names every
//     shard holds are read from it then, and the new shard's part carries
//     what it lacks of them (its zones were created before, from the same
//     names). From that epoch routers send it those writes and its facts.
//   - Batch: the partitions' old owner's part holds them and drops, when
//     it commits, their names (Drop); once it is prepared their names are
//     read from it (GET /v1/partitions, from a member confirmed current)
//     and the new owner's part adds them (Moves). The map at the next
//     epoch gives the partitions to the new owner: all or nothing, the
//     names never on neither shard, and on both only as the same records
//     (writes to them are held, not refused, until the commit: they wait
//     as for a name a transaction holds, and then meet the new epoch).
//   - The last batch clears the migration; removing a shard also drops it
//     from the map's shards, and then deletes its zones.
//
// The fencing of the map does the rest: a router with an older map is
// refused by the shards where the batch's names left, reads the map and
// asks again. In key mode "zone" whole zones move (migratezone.go).

const (
	// maxBatchPartitions bounds the partitions of one batch.
	maxBatchPartitions = 16
	// defaultMigrateBatch is migrate_batch's default: the records a
	// batch moves at most. A batch whose names hold more moves fewer
	// partitions. Every member of the two shards applies a batch in one
	// Raft entry, during which routed queries to the shard wait for it
	// (they must see what the shard acknowledged) and writes to its
	// partitions are held: smaller batches hold both for less, and make
	// the migration longer (bench/README.md, "migrate.sh").
	defaultMigrateBatch = 2000
	// minMigrateBatch and maxMigrateBatch bound migrate_batch (the
	// members' max_change_records, per zone, is 10,000 by default: a
	// batch's move to one zone must fit it).
	minMigrateBatch, maxMigrateBatch = 100, 10000
	// migrateStall is how long a router waits for a migration's map to
	// move before it drives the migration itself.
	migrateStall = 10 * time.Second
	// migrateStepTimeout bounds one step.
	migrateStepTimeout = 30 * time.Second
	// maxExportLine bounds a line of a member's export.
	maxExportLine = 64 << 10
)

// errBatchTooBig: the batch's names hold more records than migrate_batch.
var errBatchTooBig = errors.New("the batch holds too many records")

// migrator is a router's side of migrations.
type migrator struct {
	mu      sync.Mutex
	ctx     context.Context // the router's, while it runs (start)
	wg      sync.WaitGroup
	running bool
	seen    uint64    // the last epoch seen with a migration
	since   time.Time // when it was first seen
	batch   int       // partitions per batch now: halved when too big, else as many as hold migrate_batch records
	moving  []int     // the batch this router moves now
	lastErr string    // the last step's error, "" after a step that worked
}

// consider starts driving the migration of map m, unless this router
// drives it already, or another router does: m's epoch changed within
// migrateStall. own starts it at once (this router started it).
func (mg *migrator) consider(c *Craftroute, m *shardmap.Map, own bool) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if m == nil || m.Migration == nil || mg.ctx == nil {
		mg.seen = 0
		return
	}
	if mg.running {
		return
	}
	if m.Epoch != mg.seen {
		mg.seen, mg.since = m.Epoch, time.Now()
		if !own {
			return
		}
	}
	if !own && time.Since(mg.since) < migrateStall {
		return
	}
	mg.running = true
	ctx := mg.ctx
	mg.wg.Go(func() {
		c.migrate(ctx)
		mg.mu.Lock()
		mg.running, mg.moving = false, nil
		mg.mu.Unlock()
	})
}

// start lets consider drive migrations until ctx ends.
func (mg *migrator) start(ctx context.Context) {
	mg.mu.Lock()
	mg.ctx = ctx
	mg.mu.Unlock()
}

// wait waits for the migration this router drives to stop (its context
// ended).
func (mg *migrator) wait() { mg.wg.Wait() }

// state returns what this router knows of the migration it drives: the
// batch it moves and the last step's error.
func (mg *migrator) state() (moving []int, lastErr string, running bool) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return slices.Clone(mg.moving), mg.lastErr, mg.running
}

// migrate drives the migration of the router's map step by step until it
// ends, or ctx does.
func (c *Craftroute) migrate(ctx context.Context) {
	mg := &c.migr
	failures := 0
	checked := false // the members' versions, once per drive
	for ctx.Err() == nil {
		m := c.routes().m
		if m == nil || m.Migration == nil {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, migrateStepTimeout)
		var err error
		if !checked {
			// A router taking over may find members upgraded meanwhile
			// (or not): the migration waits until they agree.
			if err = c.checkVersions(sctx, m, nil, false); err == nil {
				checked = true
			}
		}
		if err == nil {
			err = c.migrateStep(sctx, m)
		}
		cancel()
		mg.mu.Lock()
		mg.moving = nil
		if err == nil {
			mg.lastErr = ""
		} else {
			mg.lastErr = err.Error()
		}
		mg.mu.Unlock()
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		f, fenced := fencedBy(err)
		if fenced || errors.Is(err, errMapRefused) {
			// The map moved on (another router, or a member change):
			// read it and go on from there.
			var epoch uint64
			if fenced {
				epoch = f.epoch
			}
			c.mapsf.refresh(ctx, c, epoch)
			if best, _, err := c.fetchMap(ctx); err == nil && best != nil {
				c.adopt(best)
			}
		} else {
			log.Warningf("migration of shard %s: %v", m.Migration.Shard.Name, err)
		}
		failures++
		select {
		case <-time.After(min(50*time.Millisecond<<min(failures, 7), 5*time.Second)):
		case <-ctx.Done():
			return
		}
	}
}

// migrateStep takes the next step of m's migration.
func (c *Craftroute) migrateStep(ctx context.Context, m *shardmap.Map) error {
	c.mapst.change.Lock() // one change of the map at a time from this router
	defer c.mapst.change.Unlock()
	if cur := c.routes().m; cur == nil || cur.Epoch != m.Epoch {
		return nil // moved on meanwhile
	}
	g := m.Migration
	if g.Kind == shardmap.MigrateAdd && !m.Joined() {
		return c.joinShard(ctx, m)
	}
	rem := m.Remaining()
	if len(rem) == 0 {
		return c.endMigration(ctx, m)
	}
	return c.moveBatch(ctx, m, rem)
}

// nextMap returns m at the next epoch, with owners given to the moved
// partitions; the map ends the migration when no partition remains (and
// leaves out a removed shard).
func nextMap(m *shardmap.Map, moved []int) *shardmap.Map {
	n := m.Clone()
	n.Epoch++
	for _, p := range moved {
		n.Owners[p] = n.Migration.Target[p]
	}
	if len(n.Remaining()) == 0 {
		if n.Migration.Kind == shardmap.MigrateRemove {
			gone := n.Migration.Shard.Name
			n.Shards = slices.DeleteFunc(n.Shards, func(s shardmap.Shard) bool { return s.Name == gone })
		}
		n.Migration = nil
	}
	return n
}

// mapParts returns the map parts of next over the shards of the routing
// and the migration's shard (made from the map when it is in neither):
// each names its shard when next has it.
func (c *Craftroute) mapParts(m, next *shardmap.Map) map[*Shard]txn.Prepare {
	parts := map[*Shard]txn.Prepare{}
	add := func(s *Shard) {
		p := txn.Prepare{Map: next}
		if slices.Contains(next.Names(), s.Name) {
			p.Shard = s.Name
		}
		parts[s] = p
	}
	for _, s := range c.shards() {
		add(s)
	}
	if g := m.Migration; g != nil && c.shard(g.Shard.Name) == nil {
		add(shardFromMap(g.Shard, c.cfg.timeout, c.cfg.tls))
	}
	return parts
}

// partShard returns the shard of parts called name.
func partShard(parts map[*Shard]txn.Prepare, name string) *Shard {
	for s := range parts {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// commitStep commits next through parts (staged: first, then fill) and
// adopts it.
func (c *Craftroute) commitStep(ctx context.Context, next *shardmap.Map, parts map[*Shard]txn.Prepare, first []*Shard, fill func(context.Context, map[*Shard]txn.Prepare) error) error {
	res := c.txc.runTxStaged(ctx, "", parts, first, fill)
	switch {
	case res.committed:
	case res.err != nil && res.failed == nil:
		return res.err
	case res.err != nil:
		return fmt.Errorf("shard %s: %w", res.failed.Name, res.err)
	case res.failed != nil && res.vote.Status >= 500:
		return fmt.Errorf("shard %s could not take the map at epoch %d: %s", res.failed.Name, next.Epoch, res.vote.Error)
	case res.failed != nil:
		return fmt.Errorf("shard %s %w at epoch %d: %s", res.failed.Name, errMapRefused, next.Epoch, res.vote.Error)
	default:
		return fmt.Errorf("the map at epoch %d was not committed", next.Epoch)
	}
	return c.adopt(next)
}

// joinShard makes the added shard one of m's shards, owning no partition,
// holding the names every shard holds.
func (c *Craftroute) joinShard(ctx context.Context, m *shardmap.Map) error {
	g := m.Migration
	next := m.Clone()
	next.Epoch++
	next.Shards = append(next.Shards, g.Shard)
	parts := c.mapParts(m, next)
	joining := partShard(parts, g.Shard.Name)
	if m.Key == shardmap.KeyZone {
		// Whole zones: no shard holds what every shard does. The shard
		// joins holding no zone (those it held before are deleted).
		if err := c.mirrorZones(ctx, joining, zoneRecords{}); err != nil {
			return err
		}
		if err := c.commitStep(ctx, next, parts, nil, nil); err != nil {
			return fmt.Errorf("joining shard %s: %w", g.Shard.Name, err)
		}
		log.Infof("shard %s joined the map at epoch %d; %d partitions move to it", g.Shard.Name, next.Epoch, len(next.Remaining()))
		return nil
	}
	barrier := byName(c.shards())[0]
	// Its zones first, made from the names every shard holds (they are
	// brought up to date in the join's transaction).
	want, err := c.sharedNames(ctx, barrier)
	if err != nil {
		return err
	}
	if err := c.mirrorZones(ctx, joining, want); err != nil {
		return err
	}
	hold := make([]uint32, m.Partitions)
	for p := range hold {
		hold[p] = uint32(p)
	}
	bp := parts[barrier]
	bp.Hold = hold
	parts[barrier] = bp
	start := time.Now()
	err = c.commitStep(ctx, next, parts, []*Shard{barrier}, func(ctx context.Context, parts map[*Shard]txn.Prepare) error {
		want, err := c.sharedNames(ctx, barrier)
		if err != nil {
			return err
		}
		have, err := c.sharedNames(ctx, joining)
		if err != nil {
			return err
		}
		jp := parts[joining]
		jp.Moves = diffMoves(want, have)
		parts[joining] = jp
		return nil
	})
	if err != nil {
		return fmt.Errorf("joining shard %s: %w", g.Shard.Name, err)
	}
	migrateHold.Observe(time.Since(start).Seconds())
	log.Infof("shard %s joined the map at epoch %d (%d zones); %d partitions move to it", g.Shard.Name, next.Epoch, len(want), len(next.Remaining()))
	return nil
}

// moveBatch moves the next batch of rem, m's remaining partitions: from
// one owner to one target, at most the migrator's batch size.
func (c *Craftroute) moveBatch(ctx context.Context, m *shardmap.Map, rem []int) error {
	mg := &c.migr
	g := m.Migration
	from, to := m.Owners[rem[0]], g.Target[rem[0]]
	mg.mu.Lock()
	if mg.batch <= 0 {
		mg.batch = maxBatchPartitions
	}
	size := mg.batch
	mg.mu.Unlock()
	var batch []int
	for _, p := range rem {
		if len(batch) < size && m.Owners[p] == from && g.Target[p] == to {
			batch = append(batch, p)
		}
	}
	next := nextMap(m, batch)
	parts := c.mapParts(m, next)
	src, dst := partShard(parts, from), partShard(parts, to)
	if src == nil || dst == nil {
		return fmt.Errorf("partition %d moves from %q to %q: not shards of the map", batch[0], from, to)
	}
	hold := make([]uint32, len(batch))
	for i, p := range batch {
		hold[i] = uint32(p)
	}
	sp := parts[src]
	sp.Hold, sp.Drop = hold, true
	parts[src] = sp
	mg.mu.Lock()
	mg.moving = batch
	mg.mu.Unlock()
	records := 0
	start := time.Now()
	var err error
	if m.Key == shardmap.KeyZone {
		// Whole zones, cloned before the critical section (migratezone.go).
		records, err = c.moveZones(ctx, m, next, batch, parts, src, dst)
	} else {
		err = c.commitStep(ctx, next, parts, []*Shard{src}, func(ctx context.Context, parts map[*Shard]txn.Prepare) error {
			names, n, err := c.partitionNames(ctx, src, hold, m.Partitions, len(batch) > 1)
			if err != nil {
				return err
			}
			records = n
			dp := parts[dst]
			dp.Moves = diffMoves(names, nil)
			parts[dst] = dp
			return nil
		})
	}
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if errors.Is(err, errBatchTooBig) {
		mg.batch = max(1, len(batch)/2)
		return fmt.Errorf("partitions %s from shard %s: %w: %d partitions a batch now", partitionText(batch), from, err, mg.batch)
	}
	if err != nil {
		return fmt.Errorf("partitions %s from shard %s to %s: %w", partitionText(batch), from, to, err)
	}
	// The next batch: as many partitions as hold migrate_batch records at
	// this one's records per partition.
	mg.batch = maxBatchPartitions
	if records > 0 && m.Key == shardmap.KeyName {
		mg.batch = max(1, min(maxBatchPartitions, c.cfg.batch*len(batch)/records))
	}
	hold2 := time.Since(start)
	migrateHold.Observe(hold2.Seconds())
	migratedPartitions.Add(float64(len(batch)))
	migratedRecords.Add(float64(records))
	log.Infof("partitions %s (%d records) moved from shard %s to %s at map epoch %d in %v; %d remain", partitionText(batch), records, from, to, next.Epoch, hold2.Round(time.Millisecond), len(next.Remaining()))
	if next.Migration == nil {
		c.endedMigration(ctx, g)
	}
	return nil
}

// endMigration commits the map without m's migration (none of its
// partitions remains: an added shard the ring gives none).
func (c *Craftroute) endMigration(ctx context.Context, m *shardmap.Map) error {
	next := nextMap(m, nil)
	if err := c.commitStep(ctx, next, c.mapParts(m, next), nil, nil); err != nil {
		return err
	}
	c.endedMigration(ctx, m.Migration)
	return nil
}

// endedMigration logs the end of migration g and, for a removed shard,
// deletes the zones it still holds (the names every shard holds): it is
// out of the map, no router asks it any more.
func (c *Craftroute) endedMigration(ctx context.Context, g *shardmap.Migration) {
	migrationState.Set(0)
	if g.Kind == shardmap.MigrateAdd {
		log.Infof("shard %s added: the migration ended", g.Shard.Name)
		return
	}
	gone := shardFromMap(g.Shard, c.cfg.timeout, c.cfg.tls)
	lists, errs := c.txc.zoneListsOf(ctx, []*Shard{gone})
	if errs[0] != nil {
		log.Warningf("shard %s removed; its zones were not deleted: %v", g.Shard.Name, errs[0])
		return
	}
	for _, z := range lists[0] {
		if _, err := c.txc.do(ctx, gone, http.MethodDelete, zonePath(z.Zone), "", nil, ""); err != nil {
			log.Warningf("shard %s removed; deleting its zone %s: %v", g.Shard.Name, z.Zone, err)
		}
	}
	log.Infof("shard %s removed: the migration ended; it holds no zone and can be stopped", g.Shard.Name)
}

// zoneRecords are records by zone (canonical origin).
type zoneRecords map[string][]dns.RR

// sharedNames reads the records every shard holds from shard s (a member
// confirmed current).
func (c *Craftroute) sharedNames(ctx context.Context, s *Shard) (zoneRecords, error) {
	out, _, err := c.readExport(ctx, s, "shared=1", 0)
	return out, err
}

// partitionNames reads the records of partitions (of a map of of) that
// only their owner holds from shard s; with bounded set, more than
// migrate_batch records is errBatchTooBig.
func (c *Craftroute) partitionNames(ctx context.Context, s *Shard, partitions []uint32, of int, bounded bool) (zoneRecords, int, error) {
	list := make([]string, len(partitions))
	for i, p := range partitions {
		list[i] = strconv.FormatUint(uint64(p), 10)
	}
	limit := 0
	if bounded {
		limit = c.cfg.batch
	}
	return c.readExport(ctx, s, "partitions="+strings.Join(list, ",")+"&of="+strconv.Itoa(of), limit)
}

// readExport reads a member's export at shardmap.PartitionsPath with
// query from shard s, at most limit records (0: no limit).
func (c *Craftroute) readExport(ctx context.Context, s *Shard, query string, limit int) (zoneRecords, int, error) {
	resp, err := c.txc.open(ctx, s, http.MethodGet, shardmap.PartitionsPath, query, nil, "")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, 0, (&shardReply{status: resp.StatusCode, body: b}).err(s)
	}
	out := zoneRecords{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxExportLine)
	origin, n, ended := "", 0, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == shardmap.ExportEnd:
			ended = true
			continue
		case strings.HasPrefix(line, "$ORIGIN "):
			origin = dnsname.Lower(dns.Fqdn(strings.TrimPrefix(line, "$ORIGIN ")))
			continue
		case line == "":
			continue
		}
		rr, err := dns.NewRR(line)
		if err != nil || rr == nil || origin == "" || !dns.IsSubDomain(origin, rr.Header().Name) {
			return nil, 0, fmt.Errorf("shard %s: export: bad line %q (%v)", s.Name, line, err)
		}
		n++
		if limit > 0 && n > limit {
			return nil, 0, errBatchTooBig
		}
		out[origin] = append(out[origin], rr)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("shard %s: export: %w", s.Name, err)
	}
	if !ended {
		return nil, 0, fmt.Errorf("shard %s: export cut short", s.Name)
	}
	return out, n, nil
}

// diffMoves returns the changes, one per zone, that make have's records
// want's: the records of want that have lacks are added, those of have
// that want lacks are deleted (never the SOA: a new one replaces it).
func diffMoves(want, have zoneRecords) []txn.Move {
	zones := make([]string, 0, len(want))
	for z := range want {
		zones = append(zones, z)
	}
	for z := range have {
		if _, ok := want[z]; !ok {
			zones = append(zones, z)
		}
	}
	slices.Sort(zones)
	var out []txn.Move
	for _, z := range zones {
		wantSet := map[string]bool{}
		for _, rr := range want[z] {
			wantSet[rr.String()] = true
		}
		haveSet := map[string]bool{}
		for _, rr := range have[z] {
			haveSet[rr.String()] = true
		}
		var ch zoneapi.Change
		for _, rr := range have[z] {
			if !wantSet[rr.String()] && rr.Header().Rrtype != dns.TypeSOA {
				text, _ := json.Marshal(rr.String())
				ch.Delete = append(ch.Delete, text)
			}
		}
		for _, rr := range want[z] {
			if !haveSet[rr.String()] {
				ch.Add = append(ch.Add, rr.String())
			}
		}
		if len(ch.Add)+len(ch.Delete) > 0 {
			out = append(out, txn.Move{Zone: z, Change: ch})
		}
	}
	return out
}

// mirrorZones makes shard s (outside the map) hold the zones of want,
// each created from want's records, and no other zone.
func (c *Craftroute) mirrorZones(ctx context.Context, s *Shard, want zoneRecords) error {
	lists, errs := c.txc.zoneListsOf(ctx, []*Shard{s})
	if errs[0] != nil {
		return errs[0]
	}
	have := map[string]bool{}
	for _, z := range lists[0] {
		have[z.Zone] = true
		if _, ok := want[z.Zone]; !ok {
			if _, err := c.txc.do(ctx, s, http.MethodDelete, zonePath(z.Zone), "", nil, ""); err != nil {
				return err
			}
		}
	}
	for z, rrs := range want {
		if have[z] {
			continue
		}
		rep, err := c.txc.do(ctx, s, http.MethodPut, zonePath(z), "", zoneText(rrs), "text/dns")
		if err != nil {
			return err
		}
		if rep.status != http.StatusOK {
			return rep.err(s)
		}
	}
	return nil
}

// partitionText lists partitions as "3,7-9".
func partitionText(ps []int) string {
	var b strings.Builder
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ps[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(ps[j]))
		}
		i = j + 1
	}
	return b.String()
}
