package shardmap

import (
	"fmt"
	"slices"
)

// Move is one partition that changes owner.
type Move struct {
	Partition int    `json:"partition"`
	From      string `json:"from"`
	To        string `json:"to"`
}

// AddPlan returns the partitions' owners once shard joins m, and the
// moves from m's placement to them: the partitions that the ring of m's
// shards and shard gives to shard move to it, every other partition stays
// where it is (a migration copies nothing between the old shards, whatever
// the bounded loads would shuffle among them). shard must not be in m.
func AddPlan(m *Map, shard string) ([]string, []Move, error) {
	if slices.Contains(m.Names(), shard) {
		return nil, nil, fmt.Errorf("shard %q is in the map already", shard)
	}
	if err := checkName(shard); err != nil {
		return nil, nil, err
	}
	cur, err := m.Ring()
	if err != nil {
		return nil, nil, err
	}
	next, err := NewRing(append(m.Names(), shard), m.Partitions, m.Load)
	if err != nil {
		return nil, nil, err
	}
	owners := cur.Owners()
	var moves []Move
	for p := range owners {
		if next.Owner(p) == shard {
			moves = append(moves, Move{Partition: p, From: owners[p], To: shard})
			owners[p] = shard
		}
	}
	return owners, moves, nil
}

// RemovePlan returns the partitions' owners once shard has left m, and the
// moves to them: each partition of shard goes to its owner on the ring of
// the other shards; every other partition stays where it is. shard must be
// in m, and not its only shard.
func RemovePlan(m *Map, shard string) ([]string, []Move, error) {
	names := m.Names()
	if !slices.Contains(names, shard) {
		return nil, nil, fmt.Errorf("no shard %q in the map", shard)
	}
	if len(names) == 1 {
		return nil, nil, fmt.Errorf("shard %q is the map's only shard: it cannot be removed", shard)
	}
	cur, err := m.Ring()
	if err != nil {
		return nil, nil, err
	}
	rest := slices.DeleteFunc(names, func(n string) bool { return n == shard })
	next, err := NewRing(rest, m.Partitions, m.Load)
	if err != nil {
		return nil, nil, err
	}
	owners := cur.Owners()
	var moves []Move
	for p := range owners {
		if owners[p] == shard {
			moves = append(moves, Move{Partition: p, From: shard, To: next.Owner(p)})
			owners[p] = next.Owner(p)
		}
	}
	return owners, moves, nil
}
