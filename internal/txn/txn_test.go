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
