package shardmap

import (
	"encoding/json"
	"strings"
	"testing"
)

func testMap() *Map {
	return &Map{Epoch: 1, Key: KeyName, Partitions: DefaultPartitions, Load: DefaultLoad, Shards: []Shard{
		{Name: "a", Members: []string{"127.0.0.1:1053", "127.0.0.2:1053"}, API: []string{"http://127.0.0.1:8080", "http://127.0.0.2:8080"}},
		{Name: "b", Members: []string{"[::1]:1053"}, API: []string{"https://b1.example:8443"}},
	}}
}

func TestValidate(t *testing.T) {
	if err := testMap().Validate(); err != nil {
		t.Fatalf("a good map: %v", err)
	}
	m := testMap()
	m.Shards[1].Members[0] = "tls://[::1]:853"
	if err := m.Validate(); err != nil {
		t.Fatalf("a map with a member asked over TLS: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(m *Map)
		want   string
	}{
		{"epoch 0", func(m *Map) { m.Epoch = 0 }, "epoch"},
		{"no key mode", func(m *Map) { m.Key = "" }, "key"},
		{"few partitions", func(m *Map) { m.Partitions = 100 }, "partitions"},
		{"load 1", func(m *Map) { m.Load = 1 }, "load"},
		{"no shards", func(m *Map) { m.Shards = nil }, "0 shards"},
		{"a shard named twice", func(m *Map) { m.Shards[1].Name = "a" }, "named twice"},
		{"an empty name", func(m *Map) { m.Shards[1].Name = "" }, "shard name"},
		{"a name with a space", func(m *Map) { m.Shards[1].Name = "b c" }, "shard name"},
		{"an empty member list", func(m *Map) { m.Shards[1].Members, m.Shards[1].API = nil, nil }, "0 members"},
		{"an API URL missing", func(m *Map) { m.Shards[0].API = m.Shards[0].API[:1] }, "one per member"},
		{"a member in two shards", func(m *Map) { m.Shards[1].Members[0] = "127.0.0.2:1053" }, "of shard \"a\" and of shard \"b\""},
		{"a member twice in one shard", func(m *Map) { m.Shards[0].Members[1] = "127.0.0.1:1053" }, "of shard \"a\" and of shard \"a\""},
		{"an API in two shards", func(m *Map) { m.Shards[1].API[0] = "http://127.0.0.1:8080" }, "of shard \"a\" and of shard \"b\""},
		{"an address without a port", func(m *Map) { m.Shards[0].Members[0] = "127.0.0.1" }, "host:port"},
		{"a TLS address without a port", func(m *Map) { m.Shards[0].Members[0] = "tls://127.0.0.1" }, "host:port"},
		{"another scheme", func(m *Map) { m.Shards[0].Members[0] = "https://127.0.0.1:443" }, "host:port"},
		{"a member over TLS and not", func(m *Map) { m.Shards[1].Members[0] = "tls://127.0.0.2:1053" }, "of shard \"a\" and of shard \"b\""},
		{"an API that is no URL", func(m *Map) { m.Shards[0].API[0] = "127.0.0.1:8080" }, "base URL"},
		{"an API with a path", func(m *Map) { m.Shards[0].API[0] = "http://127.0.0.1:8080/v1" }, "base URL"},
		{"owners for fewer partitions", func(m *Map) { m.Owners = []string{"a", "b"} }, "2 partition owners"},
		{"an owner not in the map", func(m *Map) {
			m.Owners = make([]string, m.Partitions)
			for i := range m.Owners {
				m.Owners[i] = "a"
			}
			m.Owners[5] = "c"
		}, "partition 5"},
	} {
		m := testMap()
		c.change(m)
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: expected an error saying %q, got %v", c.name, c.want, err)
		}
	}
}

func TestSameAndClone(t *testing.T) {
	m := testMap()
	c := m.Clone()
	c.Epoch = 7
	if !m.Same(c) {
		t.Error("a clone at another epoch is not the same")
	}
	c.Shards[0].Members[0] = "127.0.0.9:1053"
	if m.Shards[0].Members[0] != "127.0.0.1:1053" {
		t.Error("the clone shares its members with the map")
	}
	if m.Same(c) {
		t.Error("a map with another member is the same")
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Map
	if err := json.Unmarshal(b, &back); err != nil || !back.Same(m) || back.Epoch != m.Epoch {
		t.Errorf("JSON round trip: %v %+v", err, back)
	}
	if r, err := m.Ring(); err != nil || (r.Locate("www.example.org.") != "a" && r.Locate("www.example.org.") != "b") {
		t.Errorf("ring: %v", err)
	}
}

// TestOwners: explicit partition owners place names as they say; a table
// equal to the ring's places names as the ring does (the same placement),
// one that moves a partition does not; a shard may own none.
func TestOwners(t *testing.T) {
	m := testMap()
	ring, err := m.Ring()
	if err != nil {
		t.Fatal(err)
	}
	x := m.Clone()
	x.Owners = ring.Owners()
	if err := x.Validate(); err != nil {
		t.Fatal(err)
	}
	if !m.SamePlacement(x) || !x.SamePlacement(m) {
		t.Error("the ring's own table is another placement")
	}
	if m.Same(x) {
		t.Error("a map with explicit owners is the same as one without")
	}
	const name = "www.example.org."
	p := ring.Partition(name)
	other := "a"
	if ring.Owner(p) == "a" {
		other = "b"
	}
	x.Owners[p] = other
	xr, err := x.Ring()
	if err != nil {
		t.Fatal(err)
	}
	if xr.Locate(name) != other || xr.Partition(name) != p {
		t.Errorf("partition %d moved to %s: %s is placed on %s", p, other, name, xr.Locate(name))
	}
	if m.SamePlacement(x) {
		t.Error("a moved partition is the same placement")
	}
	// b owns nothing: still a valid map, and b owns no name.
	for i := range x.Owners {
		x.Owners[i] = "a"
	}
	if err := x.Validate(); err != nil {
		t.Fatalf("a shard that owns no partition: %v", err)
	}
	pl, err := NewPlace(x, "b", x.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Owns(name) {
		t.Error("a shard without partitions owns a name")
	}
	c := x.Clone()
	c.Owners[0] = "b"
	if x.Owners[0] != "a" {
		t.Error("the clone shares its owners with the map")
	}
}
