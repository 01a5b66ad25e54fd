package craftstore

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// preparePart prepares transaction id's part on member a (the coordinator
// itself, of shards a and b): name gets an A record in example.org. It
// returns the vote.
func preparePart(t *testing.T, a *apiServer, token string, id txn.ID, name string) txn.Vote {
	t.Helper()
	self := txn.Coordinator{Shard: "a", APIs: []string{"http://" + a.addr()}}
	body, _ := json.Marshal(txn.Prepare{Zone: "example.org.", Coordinator: self, Participants: []string{"a", "b"},
		Change: &zoneapi.Change{Add: []string{name + " 60 IN A 192.0.2.9"}}})
	code, _, raw := call(t, a, token, "POST", txn.PreparePath(id), string(body))
	var v txn.Vote
	if code != http.StatusOK || json.Unmarshal([]byte(raw), &v) != nil {
		t.Fatalf("prepare: %d %s", code, raw)
	}
	return v
}

// TestTxnAPI: a member's side of a transaction through its API: prepare,
// decide, commit and abort, and the recovery of parts a router left
// prepared (resolvePrepared asks the coordinator, here the member itself).
func TestTxnAPI(t *testing.T) {
	const token = "s3cret"
	a, rep := newAPI(t, token)
	if code, _, raw := call(t, a, token, "PUT", "/v1/zones/example.org", apiZone); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	self := txn.Coordinator{Shard: "a", APIs: []string{"http://" + a.addr()}}
	prepare := func(id txn.ID, name string) txn.Vote {
		t.Helper()
		return preparePart(t, a, token, id, name)
	}
	has := func(name string) bool {
		return len(rep.Zone("example.org.").RRs(name, dns.TypeA)) > 0
	}

	// Prepared, then committed through the API.
	id1 := txn.NewID()
	if v := prepare(id1, "one.example.org."); !v.Yes {
		t.Fatalf("prepare: %+v", v)
	}
	if v := prepare(txn.NewID(), "one.example.org."); v.Yes || !v.Busy {
		t.Errorf("a second transaction on a locked name: expected busy, got %+v", v)
	}
	if has("one.example.org.") {
		t.Fatal("a prepared name is served")
	}
	code, out, raw := call(t, a, token, "POST", txn.FinishPath(id1, txn.Commit), "")
	if code != http.StatusOK || out["outcome"] != "commit" || !has("one.example.org.") || rep.TxHeld() {
		t.Fatalf("commit: %d %s", code, raw)
	}
	if code, _, raw := call(t, a, token, "POST", txn.FinishPath(id1, txn.Abort), ""); code != http.StatusConflict {
		t.Errorf("abort after commit: expected 409, got %d %s", code, raw)
	}
	// A bad part is a no vote and locks nothing.
	id := txn.NewID()
	body, _ := json.Marshal(txn.Prepare{Zone: "example.org.", Coordinator: self, Change: &zoneapi.Change{Add: []string{"www.example.org. 60 IN CNAME one"}}})
	code, _, raw = call(t, a, token, "POST", txn.PreparePath(id), string(body))
	if code != http.StatusOK || rep.TxHeld() {
		t.Errorf("a CNAME beside data: %d %s", code, raw)
	}
	// Updates need the member's update checks (none here: refused).
	body, _ = json.Marshal(txn.Prepare{Zone: "example.org.", Coordinator: self, Update: []byte{0}})
	if code, _, raw := call(t, a, token, "POST", txn.PreparePath(id), string(body)); code != http.StatusBadRequest && code != http.StatusForbidden {
		t.Errorf("an update part without update checks: %d %s", code, raw)
	}
	if code, _, _ := call(t, a, "", "POST", txn.PreparePath(id), string(body)); code != http.StatusUnauthorized {
		t.Errorf("a prepare without the token: expected 401, got %d", code)
	}

	// Left prepared: undecided parts are aborted, decided ones take the
	// decision, once they waited txn.ResolveAfter.
	id2, id3 := txn.NewID(), txn.NewID()
	prepare(id2, "two.example.org.")
	prepare(id3, "three.example.org.")
	if code, out, raw := call(t, a, token, "POST", txn.DecidePath(id3), `{"outcome":"commit"}`); code != http.StatusOK || out["outcome"] != "commit" {
		t.Fatalf("decide: %d %s", code, raw)
	}
	resolvePrepared(rep, a.leases, token, 2*time.Second)
	if !rep.TxHeld() {
		t.Fatal("parts resolved before txn.ResolveAfter")
	}
	time.Sleep(txn.ResolveAfter + 100*time.Millisecond)
	resolvePrepared(rep, a.leases, token, 2*time.Second)
	if rep.TxHeld() || has("two.example.org.") || !has("three.example.org.") {
		t.Errorf("after the recovery: held %v, two %v (expected aborted), three %v (expected committed)",
			rep.TxHeld(), has("two.example.org."), has("three.example.org."))
	}
	if code, out, _ := call(t, a, token, "POST", txn.DecidePath(id2), `{"outcome":"commit"}`); code != http.StatusOK || out["outcome"] != "abort" {
		t.Errorf("the recovery's decision must stand: %v", out)
	}
	// The router of id2 retries its prepare after the recovery (the member
	// it asked first died): busy, so that it runs the request again under a
	// new ID; not a refusal of the request, which nothing refused.
	if v := prepare(id2, "two.example.org."); v.Yes || !v.Busy || v.Status != 0 {
		t.Errorf("a prepare repeated after the recovery aborted it: expected busy, got %+v", v)
	}
	if rep.TxHeld() || has("two.example.org.") {
		t.Error("a prepare repeated after its abort locked or wrote its name")
	}
}
