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

// TestFromMajority: "none" needs the answers of a majority of the voters
// of one configuration that each of them reports, none unsure and none
// with a decision in its log; a decision in the log counts when a majority
// logged the same one in the term they are in.
func TestFromMajority(t *testing.T) {
	v123, v5 := []uint64{1, 2, 3}, []uint64{1, 2, 3, 4, 5}
	commit := &Logged{Index: 7, Term: 2, Outcome: Commit}
	for _, c := range []struct {
		name    string
		answers []Local
		want    Outcome
		ok      bool
	}{
		{"no answers", nil, "", false},
		{"one of three", []Local{{Member: 1, Voters: v123}}, "", false},
		{"two of three", []Local{{Member: 1, Voters: v123}, {Member: 3, Voters: []uint64{3, 2, 1}}}, "", true},
		{"the same member twice", []Local{{Member: 1, Voters: v123}, {Member: 1, Voters: v123}}, "", false},
		{"one unsure", []Local{{Member: 1, Voters: v123}, {Member: 2, Voters: v123, Unsure: true}}, "", false},
		{"one logged a decision", []Local{{Member: 1, Voters: v123}, {Member: 2, Voters: v123, Term: 2, Logged: commit}}, "", false},
		{"two and one that logged one", []Local{{Member: 1, Voters: v123}, {Member: 2, Voters: v123, Term: 2, Logged: commit}, {Member: 3, Voters: v123}}, "", true},
		{"configurations differ", []Local{{Member: 1, Voters: v123}, {Member: 2, Voters: v5}}, "", false},
		{"two of five", []Local{{Member: 1, Voters: v5}, {Member: 2, Voters: v5}}, "", false},
		{"three of five", []Local{{Member: 1, Voters: v5}, {Member: 2, Voters: v5}, {Member: 5, Voters: v5}}, "", true},
		{"a member not a voter", []Local{{Member: 1, Voters: v123}, {Member: 4, Voters: v123}}, "", false},
		{"no voters", []Local{{Member: 1}, {Member: 2}}, "", false},
		{"a majority logged it in its term", []Local{{Member: 1, Voters: v123, Term: 2, Logged: commit}, {Member: 2, Voters: v123, Term: 2, Logged: &Logged{Index: 7, Term: 2, Outcome: Commit}}}, Commit, true},
		{"logged, but a later term seen", []Local{{Member: 1, Voters: v123, Term: 3, Logged: commit}, {Member: 2, Voters: v123, Term: 2, Logged: commit}}, "", false},
		{"logged at other indexes", []Local{{Member: 1, Voters: v123, Term: 2, Logged: commit}, {Member: 2, Voters: v123, Term: 2, Logged: &Logged{Index: 8, Term: 2, Outcome: Commit}}}, "", false},
		{"logged by one, none by another", []Local{{Member: 1, Voters: v123, Term: 2, Logged: commit}, {Member: 2, Voters: v123, Term: 2}}, "", false},
	} {
		if got, ok := FromMajority(c.answers); got != c.want || ok != c.ok {
			t.Errorf("%s: got %q %v, want %q %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
