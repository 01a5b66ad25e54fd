package shardmap

import (
	"fmt"
	"slices"
)

// Place is what a member knows of its shard's place in the map: the map
// it applied last, which of its shards it is, and the epoch since which
// the map has the shards it has (SameShards: a change of members, or
// partitions moving between shards, keeps them). Members fence routers by
// it (Fence); a write is judged again when it is applied, by the epochs at
// which the partitions of its names last moved (craftstore's fsm).
type Place struct {
	Map    *Map
	Shard  string // this member's shard in Map, "" when the map does not say
	Placed uint64 // the epoch of the last map that changed the shards
	ring   *Ring
}

// NewPlace returns the place of shard in m, placed as m places names since
// epoch placed.
func NewPlace(m *Map, shard string, placed uint64) (*Place, error) {
	ring, err := m.Ring()
	if err != nil {
		return nil, err
	}
	return &Place{Map: m, Shard: shard, Placed: placed, ring: ring}, nil
}

// SamePlacement reports whether m and o place every name on the same
// shards: the same key mode, partitions and shards (in key mode "name"
// every shard holds the names at the apex, cuts and DNAMEs), and the same
// owner for every partition (explicit, or the ring's: the ring is made
// from the shards' names, the partitions and the load alone).
func (m *Map) SamePlacement(o *Map) bool {
	if !m.SameShards(o) {
		return false
	}
	if m.Owners == nil && o.Owners == nil {
		if m.Load != o.Load {
			return false
		}
		for i := range m.Shards {
			if m.Shards[i].Name != o.Shards[i].Name {
				return false
			}
		}
		return true
	}
	rm, err1 := m.Ring()
	ro, err2 := o.Ring()
	return err1 == nil && err2 == nil && slices.Equal(rm.owners, ro.owners)
}

// SameShards reports whether m and o have the same shards (by name), key
// mode and partition count: a router routing by either asks the same
// shards for what every shard holds (the apex, cuts, DNAMEs) and for the
// facts of a name every shard is asked about, wherever the partitions are.
func (m *Map) SameShards(o *Map) bool {
	if m.Key != o.Key || m.Partitions != o.Partitions || len(m.Shards) != len(o.Shards) {
		return false
	}
	for _, s := range m.Shards {
		if !slices.ContainsFunc(o.Shards, func(t Shard) bool { return t.Name == s.Name }) {
			return false
		}
	}
	return true
}

// Owns reports whether the ring places key (a canonical owner name in key
// mode "name", a zone's origin in key mode "zone") on this member's shard.
func (p *Place) Owns(key string) bool {
	return p.Shard != "" && p.ring.Locate(key) == p.Shard
}

// Verdict is a member's answer to a router's epoch: Pass, or Fenced when
// the router's map is too old for what it asks.
type Verdict int

const (
	Pass Verdict = iota
	// Notice: served, but the member's map is newer than the router's:
	// the answer tells the router so.
	Notice
	// Fenced: refused; the router must read the map and ask again.
	Fenced
)

// Fence judges a request that a router routed by its map at epoch: owner
// is set when the router sent it to this shard as the owner of key (a
// routed query for the name, or a write), and clear for a question every
// shard is asked (a fan-out's facts). A request without an epoch (0), or
// from a router at this member's epoch or newer, passes (a member behind
// the router catches up first: craftstore's fence). A router with an
// older map is refused when it asks this shard as the owner of a key the
// shard does not own at its newest epoch, and for a question to every
// shard when the shards changed since its epoch (it may not know every
// shard: partitions that moved between the same shards leave every name
// on one of them, so the facts of all are complete); otherwise the answer
// carries a notice.
func (p *Place) Fence(epoch uint64, owner bool, key string) Verdict {
	if p == nil || epoch == 0 || epoch >= p.Map.Epoch {
		return Pass
	}
	switch {
	case owner && !p.Owns(key):
		return Fenced
	case !owner && epoch < p.Placed:
		return Fenced
	}
	return Notice
}

// FenceWrite judges a write a router routed by its map at epoch before it
// is proposed: refused when the shards changed since that epoch (the
// router sent the names every shard holds to the shards it knew).
// Whether the partitions of its names moved since is judged when it is
// applied.
func (p *Place) FenceWrite(epoch uint64) Verdict {
	switch {
	case p == nil || epoch == 0 || epoch >= p.Map.Epoch:
		return Pass
	case epoch < p.Placed:
		return Fenced
	}
	return Notice
}

// FencedText is the reason a member gives a router it fences.
func (p *Place) FencedText(epoch uint64) string {
	return fmt.Sprintf("stale shard map: routed by epoch %d, shard %q is at epoch %d (placement of epoch %d); read the map at %s on any member", epoch, p.Shard, p.Map.Epoch, p.Placed, MapPath)
}
