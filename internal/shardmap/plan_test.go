package shardmap

import (
	"fmt"
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
