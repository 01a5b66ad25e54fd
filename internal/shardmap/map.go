// Package shardmap is the map of a craftdns deployment's shards: which
// shards there are, the DNS addresses and API URLs of their members, and how
// names are placed on them (the key mode, and the ring's partitions and
// load: Ring), at an epoch that only rises. Routers route by it; shards keep
// it in their Raft state.
package shardmap

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Key modes: what the ring places on shards.
const (
	KeyName = "name" // each name, by its own hash
	KeyZone = "zone" // whole zones, by the zone's name
)

// The ring's defaults and the fewest partitions a map may have.
const (
	DefaultPartitions = 1021
	DefaultLoad       = 1.25
	MinPartitions     = 271
)

// Map is one epoch of the shard map.
type Map struct {
	Epoch      uint64  `json:"epoch"`
	Key        string  `json:"key"`
	Partitions int     `json:"partitions"`
	Load       float64 `json:"load"`
	Shards     []Shard `json:"shards"`
	// Owners, when set, places names explicitly: the shard that owns each
	// partition, Partitions of them. Without it the ring of the shards'
	// names, Partitions and Load places them (Ring). A shard added or
	// removed moves partitions from one owner to another, a few at each
	// epoch, by changing it: a shard may then own none.
	Owners []string `json:"owners,omitempty"`
	// Migration is the shard being added or removed, while it is: in the
	// map, so that every shard's Raft state holds it and any router
	// resumes it (plugin/craftroute's migrate.go). A second one waits.
	Migration *Migration `json:"migration,omitempty"`
}

// Migration kinds.
const (
	MigrateAdd    = "add"
	MigrateRemove = "remove"
)

// Migration is a shard added to or removed from the map, a batch of
// partitions at each epoch. An added shard is in the migration only
// until it joins the map's shards (owning nothing: the names every shard
// holds are copied to it then), and then receives its partitions; a
// removed shard hands its partitions to the others and then leaves the
// shards. Owners changes batch by batch towards Target.
type Migration struct {
	Kind  string `json:"kind"`  // MigrateAdd or MigrateRemove
	Shard Shard  `json:"shard"` // the shard added or removed
	// Target is the partitions' owners once the migration ends.
	Target []string `json:"target"`
	// Moves counts the partitions that change owner, from the start.
	Moves int `json:"moves"`
	// Since is the epoch the migration started at.
	Since uint64 `json:"since"`
}

// Joined reports whether the migration's shard is one of m's shards.
func (m *Map) Joined() bool {
	return m.Migration != nil && slices.ContainsFunc(m.Shards, func(s Shard) bool { return s.Name == m.Migration.Shard.Name })
}

// Remaining returns the partitions whose owner is not the migration's
// target yet, in order; none without a migration.
func (m *Map) Remaining() []int {
	if m.Migration == nil {
		return nil
	}
	owners := m.Owners
	if owners == nil {
		r, err := m.Ring()
		if err != nil {
			return nil
		}
		owners = r.Owners()
	}
	var out []int
	for p, o := range owners {
		if p < len(m.Migration.Target) && o != m.Migration.Target[p] {
			out = append(out, p)
		}
	}
	return out
}

// Shard is one shard: its name and its members, each with its DNS address
// (host:port) and its API base URL, in the same order.
type Shard struct {
	Name    string   `json:"name"`
	Members []string `json:"members"`
	API     []string `json:"api"`
}

// Answer is a member's answer to GET /v1/map (MapPath): the map it applied
// last, and whether it read it from a state confirmed current with its
// leader.
type Answer struct {
	Map       *Map `json:"map"`
	Confirmed bool `json:"confirmed"`
}

// MapPath is the path of a member's shard map on its API.
const MapPath = "/v1/map"

// PartitionsPath is the path of a member's export of what moves when
// partitions change owner: zone file text, each zone's records behind a
// "$ORIGIN <zone>" line, ended by a line ExportEnd (a cut-short body has
// none).
const (
	PartitionsPath = "/v1/partitions"
	ExportEnd      = "; end"
)

// maxShards and maxMembers bound a map's size: a map travels in every
// shard's Raft log and in answers to routers.
const (
	maxShards  = 1024
	maxMembers = 15
)

// Validate reports what is wrong with m, nil when nothing is: an epoch of
// at least 1, a key mode, partitions and load the ring takes, and shards
// with distinct names, each with one to maxMembers members whose DNS
// addresses and API URLs are well formed and belong to no other member.
func (m *Map) Validate() error {
	if m.Epoch == 0 {
		return errors.New("the epoch must be 1 or more")
	}
	if m.Key != KeyName && m.Key != KeyZone {
		return fmt.Errorf("key %q: must be %q or %q", m.Key, KeyName, KeyZone)
	}
	if m.Partitions < MinPartitions {
		return fmt.Errorf("partitions %d: at least %d", m.Partitions, MinPartitions)
	}
	if !(m.Load > 1) {
		return fmt.Errorf("load %v: must be above 1", m.Load)
	}
	names, err := m.validateShards()
	if err != nil {
		return err
	}
	if err := m.validateMigration(names); err != nil {
		return err
	}
	if m.Owners != nil {
		if len(m.Owners) != m.Partitions {
			return fmt.Errorf("%d partition owners for %d partitions: one a partition", len(m.Owners), m.Partitions)
		}
		for p, o := range m.Owners {
			if !names[o] {
				return fmt.Errorf("partition %d: owner %q is not a shard of the map", p, o)
			}
		}
		return nil
	}
	if len(m.Shards) > m.Partitions {
		return fmt.Errorf("%d shards for %d partitions: at least one partition per shard", len(m.Shards), m.Partitions)
	}
	return nil
}

// validateShards checks m's shards: distinct names, each with one to
// maxMembers members whose DNS addresses and API URLs are well formed and
// belong to no other member. It returns their names.
func (m *Map) validateShards() (map[string]bool, error) {
	if len(m.Shards) == 0 || len(m.Shards) > maxShards {
		return nil, fmt.Errorf("%d shards: 1 to %d", len(m.Shards), maxShards)
	}
	names := map[string]bool{}
	addrs := map[string]string{} // member address or API URL → its shard
	for _, s := range m.Shards {
		if err := checkName(s.Name); err != nil {
			return nil, err
		}
		if names[s.Name] {
			return nil, fmt.Errorf("shard %q is named twice", s.Name)
		}
		names[s.Name] = true
		if len(s.Members) == 0 || len(s.Members) > maxMembers {
			return nil, fmt.Errorf("shard %q: %d members, 1 to %d", s.Name, len(s.Members), maxMembers)
		}
		if len(s.API) != len(s.Members) {
			return nil, fmt.Errorf("shard %q: %d API URLs for %d members: one per member, in their order", s.Name, len(s.API), len(s.Members))
		}
		for i, a := range s.Members {
			if err := checkAddr(a); err != nil {
				return nil, fmt.Errorf("shard %q: %w", s.Name, err)
			}
			if err := checkURL(s.API[i]); err != nil {
				return nil, fmt.Errorf("shard %q: %w", s.Name, err)
			}
			hp, _ := SplitAddr(a) // one host:port is one member, over TLS or not
			for _, k := range []string{hp, s.API[i]} {
				if other, dup := addrs[k]; dup {
					return nil, fmt.Errorf("%s is a member of shard %q and of shard %q", k, other, s.Name)
				}
				addrs[k] = s.Name
			}
		}
	}
	return names, nil
}

// validateMigration checks m's migration, if any: its kind, its shard (an
// added shard that has not joined has members no shard of the map has; a
// removed one is in the map, not its only shard), and a target that names
// an owner of the map (or the added shard) for every partition, the
// removed shard for none.
func (m *Map) validateMigration(names map[string]bool) error {
	g := m.Migration
	if g == nil {
		return nil
	}
	s := g.Shard
	if err := checkName(s.Name); err != nil {
		return fmt.Errorf("migration: %w", err)
	}
	switch g.Kind {
	case MigrateAdd:
		if !names[s.Name] {
			probe := m.Clone()
			probe.Migration = nil
			probe.Owners = nil
			probe.Shards = append(probe.Shards, s)
			if _, err := probe.validateShards(); err != nil {
				return fmt.Errorf("migration: shard %q: %w", s.Name, err)
			}
		}
	case MigrateRemove:
		if !names[s.Name] {
			return fmt.Errorf("migration: shard %q to remove is not in the map", s.Name)
		}
		if len(names) < 2 {
			return fmt.Errorf("migration: shard %q is the map's only shard: it cannot be removed", s.Name)
		}
	default:
		return fmt.Errorf("migration: kind %q: must be %q or %q", g.Kind, MigrateAdd, MigrateRemove)
	}
	if len(g.Target) != m.Partitions {
		return fmt.Errorf("migration: %d target owners for %d partitions", len(g.Target), m.Partitions)
	}
	for p, o := range g.Target {
		switch {
		case g.Kind == MigrateRemove && o == s.Name:
			return fmt.Errorf("migration: partition %d stays on shard %q, which is removed", p, o)
		case !names[o] && !(g.Kind == MigrateAdd && o == s.Name):
			return fmt.Errorf("migration: partition %d: target owner %q is not a shard of the map", p, o)
		}
	}
	if g.Moves < 0 || g.Moves > m.Partitions || g.Since == 0 || g.Since > m.Epoch {
		return fmt.Errorf("migration: %d moves since epoch %d: out of range", g.Moves, g.Since)
	}
	return nil
}

// checkName: a shard's name is a label of letters, digits, '-' and '_'.
func checkName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("shard name %q: 1 to 63 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("shard name %q: letters, digits, '-' and '_' only", name)
		}
	}
	return nil
}

// TLSScheme begins the address of a member that routers ask over DNS over
// TLS (RFC 7858): tls://host:port. An address without it is plain DNS,
// UDP and TCP.
const TLSScheme = "tls://"

// SplitAddr returns the host:port of a member's DNS address and whether
// routers ask it over TLS.
func SplitAddr(a string) (hostport string, overTLS bool) {
	if h, ok := strings.CutPrefix(a, TLSScheme); ok {
		return h, true
	}
	return a, false
}

// checkAddr: a member's DNS address is host:port with a port, tls:// before
// it when the member is asked over TLS.
func checkAddr(a string) error {
	hp, _ := SplitAddr(a)
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" || port == "" || strings.ContainsAny(hp, " /") {
		return fmt.Errorf("member %q: not host:port or tls://host:port", a)
	}
	return nil
}

// checkURL: a member's API is an http(s) URL with a host, no path beyond
// "/", no query, no trailing slash.
func checkURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.Path != "" || p.RawQuery != "" || p.Fragment != "" || p.User != nil {
		return fmt.Errorf("API %q: not an http(s) base URL (scheme://host:port)", u)
	}
	return nil
}

// Same reports whether m and o place names, reach members and migrate the
// same way: equal but for the epoch.
func (m *Map) Same(o *Map) bool {
	return m.Key == o.Key && m.Partitions == o.Partitions && m.Load == o.Load && slices.Equal(m.Owners, o.Owners) &&
		slices.EqualFunc(m.Shards, o.Shards, sameShard) && sameMigration(m.Migration, o.Migration)
}

func sameShard(a, b Shard) bool {
	return a.Name == b.Name && slices.Equal(a.Members, b.Members) && slices.Equal(a.API, b.API)
}

func sameMigration(a, b *Migration) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Kind == b.Kind && sameShard(a.Shard, b.Shard) && slices.Equal(a.Target, b.Target) && a.Moves == b.Moves && a.Since == b.Since
}

func (s Shard) Clone() Shard {
	return Shard{Name: s.Name, Members: slices.Clone(s.Members), API: slices.Clone(s.API)}
}

// Names returns the shards' names, in the map's order.
func (m *Map) Names() []string {
	names := make([]string, len(m.Shards))
	for i, s := range m.Shards {
		names[i] = s.Name
	}
	return names
}

// Ring returns the ring that places names on m's shards: its Owners when
// it has them, else the consistent-hash ring of its shards.
func (m *Map) Ring() (*Ring, error) {
	if m.Owners != nil {
		if len(m.Owners) != m.Partitions || m.Partitions == 0 {
			return nil, fmt.Errorf("ring: %d owners for %d partitions", len(m.Owners), m.Partitions)
		}
		return &Ring{owners: slices.Clone(m.Owners)}, nil
	}
	return NewRing(m.Names(), m.Partitions, m.Load)
}

// Clone returns a copy of m that shares nothing with it.
func (m *Map) Clone() *Map {
	c := *m
	c.Owners = slices.Clone(m.Owners)
	c.Shards = make([]Shard, len(m.Shards))
	for i, s := range m.Shards {
		c.Shards[i] = s.Clone()
	}
	if m.Migration != nil {
		g := *m.Migration
		g.Shard = g.Shard.Clone()
		g.Target = slices.Clone(g.Target)
		c.Migration = &g
	}
	return &c
}

// EpochHeader is the HTTP header with a shard map epoch: in a router's
// request to a member's API the epoch of the map the router routed it by,
// in a member's answer the epoch of the member's map.
const EpochHeader = "Craftdns-Map-Epoch"

// FSMVersion is the version of the members' state machine this build
// runs (craftstore's fsm.Version says what each version applies): its
// routers add or remove shards only while every member says it (GET
// /v1/cluster, "fsm_version"), so that no member applies a migration's
// entries otherwise than the others of its group (a rolling upgrade).
const FSMVersion = 4

// Unmapped is the epoch a router that routes by its Corefile, not by the
// agreed map (craftroute's shard_map off: a router of another key mode over
// the same shards), says for its writes: routed, by no map's placement, so
// a member judges them by none (newer than any epoch, never stale) and
// does not refuse them as a client's direct writes of names its shard does
// not hold alone. Never sent with a query.
const Unmapped uint64 = math.MaxUint64

// Stale is a member's 409 answer to an API request routed by a map older
// than the placement of names on its shard (a router reads the map at
// MapPath and sends the request again).
type Stale struct {
	Error    string `json:"error"`
	StaleMap bool   `json:"stale_map"` // always true: tells it from other conflicts
	Epoch    uint64 `json:"epoch"`     // the member's
	Map      string `json:"map"`       // MapPath
}
