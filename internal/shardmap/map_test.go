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
		{"an API that is no URL", func(m *Map) { m.Shards[0].API[0] = "127.0.0.1:8080" }, "base URL"},
		{"an API with a path", func(m *Map) { m.Shards[0].API[0] = "http://127.0.0.1:8080/v1" }, "base URL"},
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
