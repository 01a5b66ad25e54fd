package shardmap

import (
	"fmt"
	"slices"
	"testing"
)

// TestPlans: adding a third shard to two moves partitions to it alone,
// and leaves each shard within 10% of a third of the partitions and of
// 100,000 names; removing it again moves its partitions alone, back to
// where the two-shard ring puts them; a name in the map, an unknown shard
// and the last shard are refused.
func TestPlans(t *testing.T) {
	m := testMap()
	owners, moves, err := AddPlan(m, "c")
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := m.Ring()
	count := map[string]int{}
	for p, o := range owners {
		count[o]++
		if o != cur.Owner(p) && o != "c" {
			t.Errorf("partition %d moved from %s to %s, not to the new shard", p, cur.Owner(p), o)
		}
	}
	if len(moves) != count["c"] {
		t.Errorf("%d moves for %d partitions of c", len(moves), count["c"])
	}
	third := float64(m.Partitions) / 3
	for _, s := range []string{"a", "b", "c"} {
		if f := float64(count[s]) / third; f < 0.9 || f > 1.1 {
			t.Errorf("shard %s: %d partitions, %.2f of a third", s, count[s], f)
		}
	}
	// Names follow the partitions.
	x := m.Clone()
	x.Shards = append(x.Shards, Shard{Name: "c", Members: []string{"127.0.0.3:1053"}, API: []string{"http://127.0.0.3:8080"}})
	x.Owners = owners
	if err := x.Validate(); err != nil {
		t.Fatal(err)
	}
	r, _ := x.Ring()
	names := map[string]int{}
	const n = 100000
	for i := range n {
		names[r.Locate(fmt.Sprintf("host-%d.example.org.", i))]++
	}
	for s, k := range names {
		if f := float64(k) / (n / 3); f < 0.9 || f > 1.1 {
			t.Errorf("shard %s: %d of %d names, %.2f of a third", s, k, n, f)
		}
	}

	back, moves, err := RemovePlan(x, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != count["c"] {
		t.Errorf("removing c moved %d partitions, it had %d", len(moves), count["c"])
	}
	for p, o := range back {
		switch {
		case o == "c":
			t.Errorf("partition %d still on c", p)
		case owners[p] != "c" && o != owners[p]:
			t.Errorf("partition %d of %s moved to %s", p, owners[p], o)
		}
	}
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"adding a shard in the map", func() error { _, _, err := AddPlan(x, "b"); return err }()},
		{"adding a bad name", func() error { _, _, err := AddPlan(x, "c d"); return err }()},
		{"removing an unknown shard", func() error { _, _, err := RemovePlan(x, "z"); return err }()},
		{"removing the last shard", func() error {
			one := testMap()
			one.Shards = one.Shards[:1]
			_, _, err := RemovePlan(one, "a")
			return err
		}()},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.what)
		}
	}
}

// TestMigration: a map carries the shard it adds (outside its shards
// until it joins, with members of its own) or removes, and the target
// owners; Remaining lists what has not moved; a migration that names a
// member of another shard, removes the only shard or keeps a partition on
// the removed shard is refused; joining changes the placement (every
// shard holds the apex) though no partition moved.
func TestMigration(t *testing.T) {
	m := testMap()
	target, moves, err := AddPlan(m, "c")
	if err != nil {
		t.Fatal(err)
	}
	c := Shard{Name: "c", Members: []string{"127.0.0.3:1053"}, API: []string{"http://127.0.0.3:8080"}}
	cur, _ := m.Ring()
	x := m.Clone()
	x.Epoch++
	x.Owners = cur.Owners()
	x.Migration = &Migration{Kind: MigrateAdd, Shard: c, Target: target, Moves: len(moves), Since: x.Epoch}
	if err := x.Validate(); err != nil {
		t.Fatal(err)
	}
	if x.Joined() || len(x.Remaining()) != len(moves) {
		t.Errorf("joined %v, %d remaining: want false, %d", x.Joined(), len(x.Remaining()), len(moves))
	}
	if !x.SamePlacement(m) || x.Same(m) || !x.Same(x.Clone()) {
		t.Errorf("a migration's start changes the map, not the placement")
	}
	y := x.Clone()
	y.Epoch++
	y.Shards = append(y.Shards, c)
	if err := y.Validate(); err != nil {
		t.Fatal(err)
	}
	if !y.Joined() || y.SamePlacement(x) {
		t.Errorf("joined %v, same placement %v: want true, false", y.Joined(), y.SamePlacement(x))
	}
	y.Owners = slices.Clone(target)
	if len(y.Remaining()) != 0 {
		t.Errorf("%d partitions remain at the target", len(y.Remaining()))
	}

	bad := func(why string, f func(*Map)) {
		t.Helper()
		z := x.Clone()
		f(z)
		if err := z.Validate(); err == nil {
			t.Errorf("%s: valid", why)
		}
	}
	bad("a member of a", func(z *Map) { z.Migration.Shard.Members[0] = m.Shards[0].Members[0] })
	bad("unknown kind", func(z *Map) { z.Migration.Kind = "move" })
	bad("short target", func(z *Map) { z.Migration.Target = z.Migration.Target[1:] })
	bad("unknown target", func(z *Map) { z.Migration.Target[0] = "d" })
	bad("remove the only shard", func(z *Map) {
		z.Shards = z.Shards[:1]
		z.Owners = nil
		z.Migration = &Migration{Kind: MigrateRemove, Shard: z.Shards[0], Target: slices.Repeat([]string{"a"}, z.Partitions), Since: 1}
	})
	bad("keep a partition on the removed shard", func(z *Map) {
		z.Migration = &Migration{Kind: MigrateRemove, Shard: z.Shards[1], Target: slices.Clone(z.Owners), Since: 1}
	})
}
