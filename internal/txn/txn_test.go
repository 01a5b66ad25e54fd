package txn

import (
	"encoding/json"
	"testing"
)

func TestID(t *testing.T) {
	id := NewID()
	if id == (ID{}) || NewID() == id {
		t.Fatal("IDs are not random")
	}
	back, err := ParseID(id.String())
	if err != nil || back != id {
		t.Fatalf("ParseID(%s): %v %v", id, back, err)
	}
	for _, bad := range []string{"", "zz", id.String()[:30], id.String() + "00"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) took it", bad)
		}
	}
	b, err := json.Marshal(Decide{Outcome: Commit})
	if err != nil || string(b) != `{"outcome":"commit"}` {
		t.Errorf("got %s %v", b, err)
	}
	var p struct{ ID ID }
	if err := json.Unmarshal([]byte(`{"ID":"`+id.String()+`"}`), &p); err != nil || p.ID != id {
		t.Errorf("JSON: %v %v", p.ID, err)
	}
}

// TestNoneByMajority: "none" needs the answers, not pending, of a majority
// of the voters of one configuration that each of them reports.
func TestNoneByMajority(t *testing.T) {
	v123 := []uint64{1, 2, 3}
	for _, c := range []struct {
		name    string
		answers []Local
		want    bool
	}{
		{"none", nil, false},
		{"one of three", []Local{{Member: 1, Voters: v123}}, false},
		{"two of three", []Local{{Member: 1, Voters: v123}, {Member: 3, Voters: []uint64{3, 2, 1}}}, true},
		{"the same member twice", []Local{{Member: 1, Voters: v123}, {Member: 1, Voters: v123}}, false},
		{"one pending", []Local{{Member: 1, Voters: v123}, {Member: 2, Voters: v123, Pending: true}}, false},
		{"two and a pending one", []Local{{Member: 1, Voters: v123}, {Member: 2, Voters: v123, Pending: true}, {Member: 3, Voters: v123}}, true},
		{"configurations differ", []Local{{Member: 1, Voters: v123}, {Member: 2, Voters: []uint64{1, 2, 3, 4, 5}}}, false},
		{"two of five", []Local{{Member: 1, Voters: []uint64{1, 2, 3, 4, 5}}, {Member: 2, Voters: []uint64{1, 2, 3, 4, 5}}}, false},
		{"three of five", []Local{{Member: 1, Voters: []uint64{1, 2, 3, 4, 5}}, {Member: 2, Voters: []uint64{1, 2, 3, 4, 5}}, {Member: 5, Voters: []uint64{1, 2, 3, 4, 5}}}, true},
		{"a member not a voter", []Local{{Member: 1, Voters: v123}, {Member: 4, Voters: v123}}, false},
		{"no voters", []Local{{Member: 1}, {Member: 2}}, false},
	} {
		if got := NoneByMajority(c.answers); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
