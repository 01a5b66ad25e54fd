package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
	bolt "go.etcd.io/bbolt"
)

// applyIn applies c to the generation in db, in one bbolt transaction: a
// refusal (*Error) is returned, any other failure fails the test.
func applyIn(t *testing.T, db *bolt.DB, c *Command) (Result, *Effect, error) {
	t.Helper()
	var (
		res Result
		eff *Effect
		err error
	)
	if uerr := db.Update(func(tx *bolt.Tx) error {
		res, eff, err = Apply(Generation(tx), c, 10)
		var ferr *Error
		if err != nil && !errors.As(err, &ferr) {
			return err
		}
		return nil
	}); uerr != nil {
		t.Fatal(uerr)
	}
	return res, eff, err
}

func testShardMap(epoch uint64, members ...string) []byte {
	m := &shardmap.Map{Epoch: epoch, Key: shardmap.KeyName, Partitions: shardmap.DefaultPartitions, Load: shardmap.DefaultLoad,
		Shards: []shardmap.Shard{{Name: "a", Members: members, API: nil}}}
	for i := range members {
		m.Shards[0].API = append(m.Shards[0].API, "http://127.0.0.1:"+string(rune('1'+i))+"080")
	}
	b, _ := json.Marshal(m)
	return b
}

// TestMapSet: a shard map is set only as a transaction's part, at the
// epoch after the shard's; its part holds the map lock, not a name, and a
// second map part waits for the first; commit writes it, abort does not.
func TestMapSet(t *testing.T) {
	db := openGeneration(t)
	run := func(c *Command) (Result, *Effect, error) { return applyIn(t, db, c) }
	current := func() *shardmap.Map {
		var m *shardmap.Map
		db.View(func(tx *bolt.Tx) error {
			var err error
			m, err = ShardMap(Generation(tx))
			return err
		})
		return m
	}
	part := func(m []byte) []byte {
		b, _ := (&Command{Op: OpMapSet, Map: m}).Marshal()
		return b
	}
	prepare := func(id byte, m []byte) error {
		_, _, err := run(&Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part(m), Meta: []byte(`{}`)})
		return err
	}

	if _, _, err := run(&Command{Op: OpMapSet, Map: testShardMap(1, "127.0.0.1:53")}); err == nil {
		t.Error("a map set outside a transaction was taken")
	}
	if err := prepare(1, testShardMap(2, "127.0.0.1:53")); err == nil {
		t.Error("epoch 2 on a shard without a map was taken")
	}
	if err := prepare(2, []byte(`{"epoch":1,"key":"name","partitions":1021,"load":1.25,"shards":[]}`)); err == nil {
		t.Error("a map without shards was taken")
	}
	if err := prepare(3, testShardMap(1, "127.0.0.1:53")); err != nil {
		t.Fatalf("prepare epoch 1: %v", err)
	}
	if current() != nil {
		t.Error("a prepared map was written")
	}
	if err := prepare(4, testShardMap(1, "127.0.0.2:53")); !errors.Is(err, ErrBusy) {
		t.Errorf("a second map part while one is prepared: expected busy, got %v", err)
	}
	_, eff, err := run(&Command{Op: OpTxCommit, Tx: [16]byte{3}})
	if err != nil || eff == nil || eff.Map == nil || eff.Map.Map.Epoch != 1 || eff.Tx == nil {
		t.Fatalf("commit: %v %+v", err, eff)
	}
	if m := current(); m == nil || m.Epoch != 1 || m.Shards[0].Members[0] != "127.0.0.1:53" {
		t.Fatalf("after commit: %+v", m)
	}
	if err := prepare(5, testShardMap(1, "127.0.0.3:53")); !errors.Is(err, ErrConflict) {
		t.Errorf("epoch 1 again: expected a conflict, got %v", err)
	}
	if err := prepare(6, testShardMap(2, "127.0.0.4:53")); err != nil {
		t.Fatalf("prepare epoch 2: %v", err)
	}
	if _, _, err := run(&Command{Op: OpTxAbort, Tx: [16]byte{6}}); err != nil {
		t.Fatal(err)
	}
	if m := current(); m.Epoch != 1 {
		t.Errorf("after an abort: epoch %d", m.Epoch)
	}
}

// TestMapFence: a map part names the shard it is for; a change of members
// keeps the placement's epoch, a change of the ring makes a new one; a
// write routed by an epoch before the placement's is refused with
// ErrStaleMap when it is applied (and only then: no epoch, or a newer one,
// pass); a transaction's decision and finish never are.
func TestMapFence(t *testing.T) {
	db := openGeneration(t)
	run := func(c *Command) error {
		// Through the log's encoding, as a member applies it.
		b, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if c, err = Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		_, _, err = applyIn(t, db, c)
		return err
	}
	mapOf := func(epoch uint64, partitions int, first string) []byte {
		m := &shardmap.Map{Epoch: epoch, Key: shardmap.KeyName, Partitions: partitions, Load: shardmap.DefaultLoad,
			Shards: []shardmap.Shard{
				{Name: "a", Members: []string{first}, API: []string{"http://127.0.0.1:8001"}},
				{Name: "b", Members: []string{"127.0.0.2:53"}, API: []string{"http://127.0.0.2:8001"}},
			}}
		b, _ := json.Marshal(m)
		return b
	}
	id := byte(0)
	set := func(m []byte, shard string) error {
		id++
		part, _ := (&Command{Op: OpMapSet, Map: m, Shard: shard}).Marshal()
		if err := run(&Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part, Meta: []byte(`{}`)}); err != nil {
			return err
		}
		return run(&Command{Op: OpTxCommit, Tx: [16]byte{id}})
	}
	place := func() *shardmap.Place {
		var p *shardmap.Place
		db.View(func(tx *bolt.Tx) error {
			var err error
			p, err = Placement(Generation(tx))
			return err
		})
		return p
	}
	write := func(epoch uint64) error {
		return run(&Command{Op: OpChange, Zone: "example.org.", Epoch: epoch})
	}

	if err := set(mapOf(1, 1021, "127.0.0.1:53"), "z"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a part for a shard the map lacks: expected invalid, got %v", err)
	}
	if err := set(mapOf(1, 1021, "127.0.0.1:53"), "a"); err != nil {
		t.Fatal(err)
	}
	if p := place(); p == nil || p.Shard != "a" || p.Placed != 1 || p.Map.Epoch != 1 {
		t.Fatalf("epoch 1: %+v", p)
	}
	if err := set(mapOf(2, 1021, "127.0.0.9:53"), "a"); err != nil {
		t.Fatal(err)
	}
	if p := place(); p.Placed != 1 || p.Map.Epoch != 2 {
		t.Errorf("a member replaced: placed %d at epoch %d, expected 1 at 2", p.Placed, p.Map.Epoch)
	}
	// The zone does not exist: a write that passes the fence is not found.
	if err := write(1); !errors.Is(err, ErrNotFound) {
		t.Errorf("epoch 1, same placement: expected not found, got %v", err)
	}
	if err := set(mapOf(3, 1031, "127.0.0.9:53"), "a"); err != nil {
		t.Fatal(err)
	}
	if p := place(); p.Placed != 3 {
		t.Errorf("a new ring: placed %d, expected 3", p.Placed)
	}
	for _, e := range []uint64{1, 2} {
		if err := write(e); !errors.Is(err, ErrStaleMap) || !errors.Is(err, ErrConflict) {
			t.Errorf("epoch %d after the placement of 3: expected a stale map, got %v", e, err)
		}
	}
	for _, e := range []uint64{0, 3, 4} {
		if err := write(e); !errors.Is(err, ErrNotFound) {
			t.Errorf("epoch %d: expected not found (not fenced), got %v", e, err)
		}
	}
	// A transfer read from this state for a router whose map is older
	// than the shards' last change is refused (StaleTransfer); any later
	// epoch, or none, reads.
	for _, tc := range []struct {
		epoch uint64
		stale bool
	}{{1, true}, {2, true}, {0, false}, {3, false}, {4, false}} {
		db.View(func(tx *bolt.Tx) error {
			if err := StaleTransfer(Generation(tx), tc.epoch); errors.Is(err, ErrStaleMap) != tc.stale {
				t.Errorf("a transfer routed by epoch %d: %v, expected stale %v", tc.epoch, err, tc.stale)
			}
			return nil
		})
	}
	// A prepare routed by epoch 2 is refused; a commit or an abort is
	// never fenced.
	part, _ := (&Command{Op: OpChange, Zone: "example.org."}).Marshal()
	if err := run(&Command{Op: OpTxPrepare, Tx: [16]byte{99}, Part: part, Meta: []byte(`{}`), Epoch: 2}); !errors.Is(err, ErrStaleMap) {
		t.Errorf("a prepare routed by epoch 2: expected a stale map, got %v", err)
	}
	if err := run(&Command{Op: OpTxAbort, Tx: [16]byte{98}, Epoch: 1}); errors.Is(err, ErrStaleMap) {
		t.Errorf("an abort was fenced: %v", err)
	}
	p := place()
	for _, tc := range []struct {
		epoch uint64
		owner bool
		want  shardmap.Verdict
	}{
		{0, true, shardmap.Pass}, {3, true, shardmap.Pass}, {4, false, shardmap.Pass},
		{2, false, shardmap.Fenced},
	} {
		if got := p.Fence(tc.epoch, tc.owner, "x.example.org."); got != tc.want {
			t.Errorf("Fence(%d, %v): %v, expected %v", tc.epoch, tc.owner, got, tc.want)
		}
	}
	// As the owner: fenced for a name the ring gives b, a notice for one it
	// gives a.
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		n := "n" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + ".example.org."
		if p.Owns(n) {
			mine = n
		} else {
			theirs = n
		}
	}
	if got := p.Fence(2, true, mine); got != shardmap.Notice {
		t.Errorf("an owned name at an old epoch: %v, expected a notice", got)
	}
	if got := p.Fence(2, true, theirs); got != shardmap.Fenced {
		t.Errorf("a name of shard b sent to a at an old epoch: %v, expected fenced", got)
	}
}

// TestMapHold: a prepared map part that holds partitions makes every write
// of a name in them busy (a change, an UPDATE, another transaction's
// part), and lets the others through; its commit or abort lets them
// through again. A hold needs a map whose partition count stays, and a
// part written before holds existed decodes as one without.
func TestMapHold(t *testing.T) {
	db := openGeneration(t)
	const origin = "example.org."
	apex := []dns.RR{
		mustTestRR(t, origin+" 300 IN SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300"),
		mustTestRR(t, origin+" 300 IN NS ns1.example.org."),
	}
	importTestZone(t, db, origin, 1, apex)
	m1 := testShardMap(1, "127.0.0.1:53")
	id := byte(0)
	prepareMap := func(m []byte, hold ...uint32) error {
		id++
		part, _ := (&Command{Op: OpMapSet, Map: m, Shard: "a", Hold: hold}).Marshal()
		_, _, err := applyIn(t, db, &Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part, Meta: []byte(`{}`)})
		return err
	}
	if err := prepareMap(m1, 3); !errors.Is(err, ErrInvalid) {
		t.Errorf("a hold on a shard without a map: expected invalid, got %v", err)
	}
	if err := prepareMap(m1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpTxCommit, Tx: [16]byte{id}}); err != nil {
		t.Fatal(err)
	}
	// Two names in different partitions; hold the first one's.
	var held, free string
	var p uint32
	for i := 0; held == "" || free == ""; i++ {
		n := fmt.Sprintf("n%d.%s", i, origin)
		q := uint32(shardmap.PartitionOf(n, shardmap.DefaultPartitions))
		switch {
		case held == "":
			held, p = n, q
		case q != p:
			free = n
		}
	}
	if err := prepareMap(testShardMap(2, "127.0.0.2:53"), p); err != nil {
		t.Fatal(err)
	}
	holdTx := id
	add := func(name string) error {
		_, _, err := applyIn(t, db, &Command{Op: OpChange, Zone: origin, Add: []dns.RR{mustTestRR(t, name+" 60 IN A 192.0.2.1")}})
		return err
	}
	if err := add(held); !errors.Is(err, ErrBusy) {
		t.Errorf("a write of %s in held partition %d: expected busy, got %v", held, p, err)
	}
	if err := add(free); err != nil {
		t.Errorf("a write of %s outside the held partition: %v", free, err)
	}
	upd := new(dns.Msg)
	upd.SetUpdate(origin)
	upd.Insert([]dns.RR{mustTestRR(t, held+" 60 IN TXT x")})
	packed, _ := upd.Pack()
	if _, _, err := applyIn(t, db, &Command{Op: OpUpdate, Zone: origin, Update: packed}); !errors.Is(err, ErrBusy) {
		t.Errorf("an UPDATE of %s in the held partition: expected busy, got %v", held, err)
	}
	part, _ := (&Command{Op: OpChange, Zone: origin, Add: []dns.RR{mustTestRR(t, held+" 60 IN A 192.0.2.2")}}).Marshal()
	if _, _, err := applyIn(t, db, &Command{Op: OpTxPrepare, Zone: origin, Tx: [16]byte{200}, Part: part, Meta: []byte(`{}`)}); !errors.Is(err, ErrBusy) {
		t.Errorf("a transaction's part in the held partition: expected busy, got %v", err)
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpTxAbort, Tx: [16]byte{holdTx}}); err != nil {
		t.Fatal(err)
	}
	if err := add(held); err != nil {
		t.Errorf("after the hold's abort, a write of %s: %v", held, err)
	}

	// The encoding: holds round-trip, and a part without them (as written
	// before they existed: the Hold count left off) decodes.
	c := &Command{Op: OpMapSet, Map: m1, Shard: "a", Hold: []uint32{3, 1020}}
	b, _ := c.Marshal()
	got, err := Unmarshal(b)
	if err != nil || !slices.Equal(got.Hold, c.Hold) || got.Shard != "a" {
		t.Errorf("round trip: %+v %v", got, err)
	}
	old, _ := (&Command{Op: OpMapSet, Map: m1, Shard: "a"}).Marshal()
	if got, err := Unmarshal(old[:len(old)-1]); err != nil || got.Hold != nil || got.Shard != "a" {
		t.Errorf("a part without the hold count: %+v %v", got, err)
	}
}

func mustTestRR(t *testing.T, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

// TestMapMoves: a map part carries the record changes that move names
// with it (a migration's batch), in several zones: prepared, they are
// evaluated (a move into a zone the shard lacks is refused), lock their
// names in their zones (a write waits), preview as their commit will
// leave them; committed, they apply with the map, their effects before
// the map's; aborted, nothing changes. A hold is refused while another
// transaction's part holds a name in the partition; moves round-trip in
// the encoding, and only record changes of a zone are moves.
func TestMapMoves(t *testing.T) {
	db := openGeneration(t)
	zones := []string{"example.org.", "example.net."}
	for i, origin := range zones {
		rrs := []dns.RR{
			mustTestRR(t, origin+" 300 IN SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300"),
			mustTestRR(t, origin+" 300 IN NS ns1.example.org."),
			mustTestRR(t, "x."+origin+" 300 IN A 192.0.2.1"),
		}
		for _, c := range []*Command{
			{Op: OpImportBegin, Zone: origin, Import: uint64(i + 1)},
			{Op: OpImportChunk, Zone: origin, Import: uint64(i + 1), Add: rrs},
			{Op: OpImportCommit, Zone: origin, Import: uint64(i + 1)},
		} {
			if _, _, err := applyIn(t, db, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	id := byte(0)
	prepare := func(m []byte, hold []uint32, moves ...*Command) error {
		id++
		part, err := (&Command{Op: OpMapSet, Map: m, Shard: "a", Hold: hold, Moves: moves}).Marshal()
		if err != nil {
			return err
		}
		_, _, err = applyIn(t, db, &Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part, Meta: []byte(`{}`)})
		return err
	}
	finish := func(op Op) *Effect {
		t.Helper()
		_, eff, err := applyIn(t, db, &Command{Op: op, Tx: [16]byte{id}})
		if err != nil {
			t.Fatal(err)
		}
		return eff
	}
	rrsAt := func(origin, name string) (rrs []dns.RR) {
		db.View(func(tx *bolt.Tx) error {
			rrs, _ = RRsAt(Generation(tx).Bucket(BucketZones).Bucket([]byte(origin)), name)
			return nil
		})
		return rrs
	}
	if err := prepare(testShardMap(1, "127.0.0.1:53"), nil); err != nil {
		t.Fatal(err)
	}
	finish(OpTxCommit)

	// Hand x over in one zone and take y in the other.
	x := "x." + zones[0]
	px := uint32(shardmap.PartitionOf(x, shardmap.DefaultPartitions))
	give := &Command{Op: OpChange, Zone: zones[0], Del: []Deletion{{Name: x}}}
	take := &Command{Op: OpChange, Zone: zones[1], Add: []dns.RR{mustTestRR(t, "y."+zones[1]+" 300 IN TXT moved")}}
	if err := prepare(testShardMap(2, "127.0.0.1:53"), nil, &Command{Op: OpChange, Zone: "example.com.", Add: take.Add}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a move into a zone the shard lacks: expected not found, got %v", err)
	}
	if err := prepare(testShardMap(2, "127.0.0.1:53"), []uint32{px}, give, take); err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error {
		g := Generation(tx)
		for _, l := range []LockRef{{zones[0], x}, {zones[1], "y." + zones[1]}, {"", MapLock}} {
			if by, ok := lockedBy(g, l.Zone, l.Name); !ok || by[0] != id {
				t.Errorf("%v: not locked by the map part", l)
			}
		}
		return nil
	})
	if _, _, err := applyIn(t, db, &Command{Op: OpChange, Zone: zones[1], Add: []dns.RR{mustTestRR(t, "y."+zones[1]+" 300 IN A 192.0.2.9")}}); !errors.Is(err, ErrBusy) {
		t.Errorf("a write of a moving name: expected busy, got %v", err)
	}
	db.Update(func(tx *bolt.Tx) error {
		g := Generation(tx)
		got, err := PreviewPart(g, []byte{id, 15: 0}, zones[1])
		if err != nil || len(got) != 1 || len(got[0].RRs) != 1 {
			t.Errorf("preview of %s: %v %v", zones[1], got, err)
		}
		got, err = PreviewPart(g, []byte{id, 15: 0}, "example.com.")
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("preview of a zone without a move: %v %v, want none (not nil)", got, err)
		}
		return errors.New("rolled back")
	})
	eff := finish(OpTxCommit)
	if eff == nil || eff.Map == nil || len(eff.More) != 2 || eff.More[0].Zone != zones[0] || eff.More[1].Zone != zones[1] {
		t.Fatalf("commit's effect: %+v", eff)
	}
	if rrsAt(zones[0], x) != nil || len(rrsAt(zones[1], "y."+zones[1])) != 1 {
		t.Errorf("after the commit: %s %v, y %v", x, rrsAt(zones[0], x), rrsAt(zones[1], "y."+zones[1]))
	}

	// An aborted move changes nothing, and unlocks.
	back := &Command{Op: OpChange, Zone: zones[0], Add: []dns.RR{mustTestRR(t, x+" 300 IN A 192.0.2.1")}}
	if err := prepare(testShardMap(3, "127.0.0.1:53"), nil, back); err != nil {
		t.Fatal(err)
	}
	finish(OpTxAbort)
	if rrsAt(zones[0], x) != nil {
		t.Errorf("an aborted move wrote %s", x)
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpChange, Zone: zones[0], Add: back.Add}); err != nil {
		t.Errorf("after the abort, a write of %s: %v", x, err)
	}

	// A hold waits for another transaction's part in its partition.
	part, _ := (&Command{Op: OpChange, Zone: zones[1], Add: []dns.RR{mustTestRR(t, "z."+zones[1]+" 60 IN A 192.0.2.3")}}).Marshal()
	if _, _, err := applyIn(t, db, &Command{Op: OpTxPrepare, Zone: zones[1], Tx: [16]byte{200}, Part: part, Meta: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	pz := uint32(shardmap.PartitionOf("z."+zones[1], shardmap.DefaultPartitions))
	if err := prepare(testShardMap(3, "127.0.0.1:53"), []uint32{pz}); !errors.Is(err, ErrBusy) {
		t.Errorf("a hold of a partition a prepared part writes in: expected busy, got %v", err)
	}

	// The encoding.
	c := &Command{Op: OpMapSet, Map: testShardMap(3), Shard: "a", Hold: []uint32{px}, Moves: []*Command{give, take}}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil || len(got.Moves) != 2 || got.Moves[0].Del[0].Name != x || got.Moves[1].Add[0].String() != take.Add[0].String() || got.Moves[1].Zone != zones[1] {
		t.Errorf("round trip: %+v %v", got, err)
	}
	if _, err := (&Command{Op: OpMapSet, Map: testShardMap(3), Moves: []*Command{{Op: OpDeleteZone, Zone: zones[0]}}}).Marshal(); err == nil {
		t.Errorf("a zone's deletion encoded as a move")
	}
}

// indexEntries returns the partition index as "partition zone name".
func indexEntries(t *testing.T, db *bolt.DB) []string {
	var out []string
	db.View(func(tx *bolt.Tx) error {
		g := Generation(tx)
		parts := make([]uint32, IndexedParts(g))
		for i := range parts {
			parts[i] = uint32(i)
		}
		_, err := EachInPartitions(g, parts, func(origin, name string) error {
			out = append(out, fmt.Sprintf("%d %s %s", shardmap.PartitionOf(name, len(parts)), origin, name))
			return nil
		})
		return err
	})
	slices.Sort(out)
	return out
}

// TestPartIndex: the first map of key mode "name" indexes every name by
// its partition, and record changes, imports and zone deletions keep the
// index as a rebuild from the zones would make it. A map part that drops
// held partitions deletes, when it commits, the records only their owner
// holds (not the apex, a cut and what is below it, a DNAME), as one change
// per zone; without a hold it is refused.
func TestPartIndex(t *testing.T) {
	db := openGeneration(t)
	const origin = "example.org."
	text := []string{
		origin + " 300 IN SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300",
		origin + " 300 IN NS ns1.example.org.",
		"sub.example.org. 300 IN NS ns.sub.example.org.",
		"ns.sub.example.org. 300 IN A 192.0.2.7",
		"d.example.org. 300 IN DNAME example.net.",
		"d.example.org. 300 IN TXT beside",
	}
	for i := range 40 {
		text = append(text, fmt.Sprintf("h%d.example.org. 300 IN A 192.0.2.%d", i, i))
	}
	var rrs []dns.RR
	for _, s := range text {
		rrs = append(rrs, mustTestRR(t, s))
	}
	importZone := func(id uint64, rrs []dns.RR) {
		for _, c := range []*Command{
			{Op: OpImportBegin, Zone: origin, Import: id},
			{Op: OpImportChunk, Zone: origin, Import: id, Add: rrs},
			{Op: OpImportCommit, Zone: origin, Import: id},
		} {
			if _, _, err := applyIn(t, db, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	importZone(1, rrs)
	if got := indexEntries(t, db); got != nil {
		t.Fatalf("an index before any map: %v", got)
	}
	id := byte(0)
	mapPart := func(c *Command) error {
		id++
		part, err := c.Marshal()
		if err != nil {
			return err
		}
		_, _, err = applyIn(t, db, &Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part, Meta: []byte(`{}`)})
		if err == nil {
			_, _, err = applyIn(t, db, &Command{Op: OpTxCommit, Tx: [16]byte{id}})
		}
		return err
	}
	if err := mapPart(&Command{Op: OpMapSet, Map: testShardMap(1, "127.0.0.1:53"), Shard: "a"}); err != nil {
		t.Fatal(err)
	}
	rebuilt := func() []string {
		db.Update(func(tx *bolt.Tx) error { return buildIndex(Generation(tx), shardmap.DefaultPartitions) })
		return indexEntries(t, db)
	}
	check := func(when string) {
		t.Helper()
		kept := indexEntries(t, db)
		if want := rebuilt(); !slices.Equal(kept, want) || len(kept) == 0 {
			t.Errorf("%s: the index kept %d entries, a rebuild makes %d", when, len(kept), len(want))
		}
	}
	check("after the first map")
	for _, c := range []*Command{
		{Op: OpChange, Zone: origin, Add: []dns.RR{mustTestRR(t, "new.example.org. 60 IN A 192.0.2.99")}},
		{Op: OpChange, Zone: origin, Del: []Deletion{{Name: "h1.example.org."}}},
		{Op: OpChange, Zone: origin, Del: []Deletion{{RR: rrs[7]}}, Add: []dns.RR{mustTestRR(t, "h2.example.org. 60 IN TXT two")}},
	} {
		if _, _, err := applyIn(t, db, c); err != nil {
			t.Fatal(err)
		}
	}
	check("after changes")
	importZone(2, rrs[:20])
	check("after a replacing import")

	// Drop the partitions of every name: what only an owner holds goes.
	var all []uint32
	for p := range shardmap.DefaultPartitions {
		all = append(all, uint32(p))
	}
	if err := mapPart(&Command{Op: OpMapSet, Map: testShardMap(2, "127.0.0.1:53"), Shard: "a", Drop: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a drop without a hold: expected invalid, got %v", err)
	}
	// A drop is not prepared while a transfer's fence holds (of any
	// zone), and a transfer of any zone waits for a prepared drop
	// (ZoneLocked), which no write meets.
	fence := &Command{Op: OpTxFence, Zone: origin, Tx: [16]byte{0xfe}}
	if _, _, err := applyIn(t, db, fence); err != nil {
		t.Fatal(err)
	}
	drop := &Command{Op: OpMapSet, Map: testShardMap(2, "127.0.0.1:53"), Shard: "a", Hold: all, Drop: true}
	if err := mapPart(drop); !errors.Is(err, ErrBusy) {
		t.Errorf("a drop while a transfer's fence holds: expected busy, got %v", err)
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpTxUnfence, Zone: origin, Tx: fence.Tx}); err != nil {
		t.Fatal(err)
	}
	id++
	part, err := drop.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part, Meta: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	zoneLocked := func() (locked bool) {
		db.View(func(tx *bolt.Tx) error {
			locked = ZoneLocked(Generation(tx), "example.net.")
			return nil
		})
		return locked
	}
	if !zoneLocked() {
		t.Errorf("a prepared drop: a transfer would not wait for it")
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpTxCommit, Tx: [16]byte{id}}); err != nil {
		t.Fatal(err)
	}
	if zoneLocked() {
		t.Errorf("a committed drop: a transfer still waits")
	}
	var left []string
	db.View(func(tx *bolt.Tx) error {
		return EachName(Generation(tx).Bucket(BucketZones).Bucket([]byte(origin)), func(rrs []dns.RR) error {
			for _, rr := range rrs {
				left = append(left, rr.Header().Name+" "+dns.TypeToString[rr.Header().Rrtype])
			}
			return nil
		})
	})
	slices.Sort(left)
	if want := []string{"d.example.org. DNAME", "example.org. NS", "ns.sub.example.org. A", "sub.example.org. NS"}; !slices.Equal(left, want) {
		t.Errorf("after the drop: %v, want %v", left, want)
	}
	check("after the drop")

	if _, _, err := applyIn(t, db, &Command{Op: OpDeleteZone, Zone: origin}); err != nil {
		t.Fatal(err)
	}
	if got := indexEntries(t, db); len(got) != 0 {
		t.Errorf("after the zone's deletion: %v", got)
	}
}

// TestMapJoin: a shard outside the map (none yet, or one it left) takes
// the deployment's epoch, whatever it is, from a part that names it; a
// shard of the map takes the next epoch only, and so does an unnamed part.
func TestMapJoin(t *testing.T) {
	db := openGeneration(t)
	id := byte(0)
	set := func(epoch uint64, shard string) error {
		id++
		m := testShardMap(epoch, "127.0.0.1:53")
		part, _ := (&Command{Op: OpMapSet, Map: m, Shard: shard}).Marshal()
		_, _, err := applyIn(t, db, &Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part, Meta: []byte(`{}`)})
		if err == nil {
			_, _, err = applyIn(t, db, &Command{Op: OpTxCommit, Tx: [16]byte{id}})
		}
		return err
	}
	if err := set(7, ""); !errors.Is(err, ErrConflict) {
		t.Errorf("epoch 7 unnamed on a shard without a map: expected a conflict, got %v", err)
	}
	if err := set(7, "a"); err != nil {
		t.Errorf("epoch 7 joining: %v", err)
	}
	if err := set(9, "a"); !errors.Is(err, ErrConflict) {
		t.Errorf("epoch 9 on a shard of the map at 7: expected a conflict, got %v", err)
	}
	if err := set(8, "a"); err != nil {
		t.Errorf("epoch 8: %v", err)
	}
}

// TestMapMovedFence: partitions that move between the same shards fence
// only the writes of their names: a write routed by an older epoch lands
// when its names' partitions stayed, and is refused when one moved since
// (or, for an import, when any did); a change of the shards refuses every
// write routed before it.
func TestMapMovedFence(t *testing.T) {
	db := openGeneration(t)
	const origin = "example.org."
	for _, c := range []*Command{
		{Op: OpImportBegin, Zone: origin, Import: 1},
		{Op: OpImportChunk, Zone: origin, Import: 1, Add: []dns.RR{
			mustTestRR(t, origin+" 300 IN SOA ns1.example.org. h.example.org. 1 7200 3600 1209600 300"),
			mustTestRR(t, origin+" 300 IN NS ns1.example.org.")}},
		{Op: OpImportCommit, Zone: origin, Import: 1},
	} {
		if _, _, err := applyIn(t, db, c); err != nil {
			t.Fatal(err)
		}
	}
	base := &shardmap.Map{Epoch: 1, Key: shardmap.KeyName, Partitions: shardmap.MinPartitions, Load: shardmap.DefaultLoad,
		Shards: []shardmap.Shard{
			{Name: "a", Members: []string{"127.0.0.1:53"}, API: []string{"http://127.0.0.1:8001"}},
			{Name: "b", Members: []string{"127.0.0.2:53"}, API: []string{"http://127.0.0.2:8001"}},
		}}
	ring, _ := base.Ring()
	base.Owners = ring.Owners()
	id := byte(0)
	set := func(m *shardmap.Map) {
		t.Helper()
		id++
		b, _ := json.Marshal(m)
		part, _ := (&Command{Op: OpMapSet, Map: b, Shard: "a"}).Marshal()
		if _, _, err := applyIn(t, db, &Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part, Meta: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := applyIn(t, db, &Command{Op: OpTxCommit, Tx: [16]byte{id}}); err != nil {
			t.Fatal(err)
		}
	}
	set(base)
	// Two names in different partitions; move the first one's to b.
	var moved, stayed string
	for i := 0; moved == "" || stayed == ""; i++ {
		n := fmt.Sprintf("n%d.%s", i, origin)
		switch p := shardmap.PartitionOf(n, base.Partitions); {
		case moved == "" && base.Owners[p] == "a":
			moved = n
		case stayed == "" && base.Owners[p] == "a" && p != shardmap.PartitionOf(moved, base.Partitions):
			stayed = n
		}
	}
	m2 := base.Clone()
	m2.Epoch = 2
	m2.Owners[shardmap.PartitionOf(moved, base.Partitions)] = "b"
	set(m2)
	write := func(name string, epoch uint64) error {
		_, _, err := applyIn(t, db, &Command{Op: OpChange, Zone: origin, Epoch: epoch, Add: []dns.RR{mustTestRR(t, name+" 60 IN A 192.0.2.1")}})
		return err
	}
	if err := write(stayed, 1); err != nil {
		t.Errorf("a write of %s (its partition stayed) routed by epoch 1: %v", stayed, err)
	}
	if err := write(moved, 1); !errors.Is(err, ErrStaleMap) {
		t.Errorf("a write of %s (its partition moved at 2) routed by epoch 1: expected a stale map, got %v", moved, err)
	}
	if err := write(moved, 2); err != nil {
		t.Errorf("a write of %s routed by epoch 2: %v", moved, err)
	}
	if _, _, err := applyIn(t, db, &Command{Op: OpImportBegin, Zone: "example.net.", Import: 9, Epoch: 1}); !errors.Is(err, ErrStaleMap) {
		t.Errorf("an import routed by epoch 1 after a move: expected a stale map, got %v", err)
	}
	m3 := m2.Clone()
	m3.Epoch = 3
	m3.Shards = append(m3.Shards, shardmap.Shard{Name: "c", Members: []string{"127.0.0.3:53"}, API: []string{"http://127.0.0.3:8001"}})
	set(m3)
	if err := write(stayed, 2); !errors.Is(err, ErrStaleMap) {
		t.Errorf("a write routed by epoch 2 after a shard joined at 3: expected a stale map, got %v", err)
	}
}
