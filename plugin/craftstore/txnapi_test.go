package craftstore

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"

	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// preparePart prepares transaction id's part on member a (the coordinator
// itself, of shards a and b): name gets an A record in example.org. It
// returns the vote.
func preparePart(t *testing.T, a *apiServer, token string, id txn.ID, name string) txn.Vote {
	t.Helper()
	return preparePartAt(t, a, token, id, name, txn.Coordinator{Shard: "a", APIs: []string{"http://" + a.addr()}})
}

// preparePartAt is preparePart with coordinator co.
func preparePartAt(t *testing.T, a *apiServer, token string, id txn.ID, name string, self txn.Coordinator) txn.Vote {
	t.Helper()
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

// TestReadsPastTransactions: a query about a name a prepared part holds
// reads the decision at the coordinator instead of waiting for the outcome:
// committed, the member commits the part and answers from the state after
// it; aborted, it aborts the part and answers from the state before;
// undecided with the coordinator alive, it answers at once from the state
// before, marked for routers not to cache; undecided with the coordinator
// unreachable, it waits, and a router's query is answered held.
func TestReadsPastTransactions(t *testing.T) {
	const token = "s3cret"
	a, rep := newAPI(t, token)
	if code, _, raw := call(t, a, token, "PUT", "/v1/zones/example.org", apiZone); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	cs := &Craftstore{Zones: []string{"org."}, cfg: config{id: 1, token: token, timeout: 2 * time.Second}}
	cs.rep.Store(rep)
	cs.leases.Store(a.leases)
	query := func(name string, routed bool) (*dns.Msg, time.Duration) {
		t.Helper()
		r := new(dns.Msg)
		r.SetQuestion(name, dns.TypeA)
		r.SetEdns0(1232, false)
		if routed {
			shardproto.Request(r)
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		start := time.Now()
		if _, err := cs.ServeDNS(context.Background(), rec, r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return rec.Msg, time.Since(start)
	}
	decide := func(id txn.ID, o txn.Outcome) {
		t.Helper()
		if code, out, raw := call(t, a, token, "POST", txn.DecidePath(id), `{"outcome":"`+string(o)+`"}`); code != http.StatusOK || out["outcome"] != string(o) {
			t.Fatalf("decide %s: %d %s", o, code, raw)
		}
	}
	held := func(name string) bool {
		ids, _ := rep.TxHolders("example.org.", name)
		return len(ids) > 0
	}

	finished := func(what, name string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); held(name); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the reader did not finish the part", what)
			}
		}
	}

	// Committed: the reader sees the part at once, from its preview,
	// marked for routers (the member has not applied it yet), and commits
	// it meanwhile.
	id1 := txn.NewID()
	if v := preparePart(t, a, token, id1, "one.example.org."); !v.Yes {
		t.Fatalf("prepare: %+v", v)
	}
	decide(id1, txn.Commit)
	if m, _ := query("one.example.org.", true); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || !shardproto.Held(m) {
		t.Errorf("committed: expected the new record, marked, got\n%v", m)
	}
	finished("committed", "one.example.org.")
	if m, _ := query("one.example.org.", true); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || shardproto.Held(m) {
		t.Errorf("committed and applied: expected the new record, unmarked, got\n%v", m)
	}

	// Aborted: the reader sees the state before at once, unmarked (it is
	// final), and aborts the part meanwhile.
	id2 := txn.NewID()
	preparePart(t, a, token, id2, "two.example.org.")
	decide(id2, txn.Abort)
	if m, _ := query("two.example.org.", true); m.Rcode != dns.RcodeNameError || shardproto.Held(m) {
		t.Errorf("aborted: expected NXDOMAIN, unmarked, got\n%v", m)
	}
	finished("aborted", "two.example.org.")

	// Undecided, coordinator alive: the state before, at once, marked for
	// routers; the part stays prepared.
	id3 := txn.NewID()
	preparePart(t, a, token, id3, "three.example.org.")
	m, took := query("three.example.org.", true)
	if m.Rcode != dns.RcodeNameError || !shardproto.Held(m) || !held("three.example.org.") {
		t.Errorf("undecided: expected NXDOMAIN marked held with the part still prepared, got held %v\n%v", held("three.example.org."), m)
	}
	if took >= txn.RoutedWait {
		t.Errorf("undecided: the query waited %v, as long as for the outcome", took)
	}
	if m, _ := query("www.example.org.", true); m.Rcode != dns.RcodeSuccess || shardproto.Held(m) {
		t.Errorf("a name no part holds: expected its answer unmarked, got\n%v", m)
	}
	decide(id3, txn.Commit)
	if m, _ := query("three.example.org.", false); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("undecided, then committed: expected the new record, got\n%v", m)
	}
	finished("undecided, then committed", "three.example.org.")

	// Undecided, coordinator unreachable: the query waits for the outcome;
	// a router's is answered held.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	id4 := txn.NewID()
	preparePartAt(t, a, token, id4, "four.example.org.", txn.Coordinator{Shard: "b", APIs: []string{dead.URL}})
	m, _ = query("four.example.org.", true)
	if e := ede.Of(m); m.Rcode != dns.RcodeServerFailure || e == nil || e.ExtraText != txn.HeldText {
		t.Errorf("coordinator down: expected SERVFAIL held, got\n%v", m)
	}
	if !held("four.example.org.") {
		t.Error("coordinator down: the part was finished without its decision")
	}
}

// TestTxStatusWithoutLeader: a coordinator member answers a decision it
// applied even while its group has no leader (a decision is final), and
// refuses to say "none" then from its own state alone (it cannot confirm
// it is current); a majority of the members' own states says "none"
// without a leader (txn.LocalRead), one member's cannot.
func TestTxStatusWithoutLeader(t *testing.T) {
	ports := make([]string, 3)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().String()
		ln.Close()
	}
	peers := []replica.Member{{ID: 1, Raft: ports[0]}, {ID: 2, Raft: ports[1]}, {ID: 3, Raft: ports[2]}}
	reps := make([]*replica.Replica, 3)
	apis := make([]*apiServer, 3)
	urls := make([]string, 3)
	for i := range reps {
		// Members 2 and 3 notice a leader's loss only after 3 s or more:
		// member 1 leads, and once it is gone they have none for that long.
		tick := 300 * time.Millisecond
		if i == 0 {
			tick = 50 * time.Millisecond
		}
		rep, err := replica.Open(replica.Config{ID: uint64(i + 1), Dir: t.TempDir(), RaftAddr: ports[i], Peers: peers, Tick: tick})
		if err != nil {
			t.Fatal(err)
		}
		a, err := startAPI(apiConfig{listen: "127.0.0.1:0", timeout: time.Second}, rep, newLeases(time.Now(), true, testRouterKey))
		if err != nil {
			t.Fatal(err)
		}
		reps[i], apis[i], urls[i] = rep, a, "http://"+a.addr()
		t.Cleanup(func() { a.close(); rep.Close() })
	}
	for deadline := time.Now().Add(20 * time.Second); !reps[0].IsLeader() || !reps[1].Ready() || !reps[2].Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("member 1 never led a ready group: leader %v, ready %v %v", reps[0].IsLeader(), reps[1].Ready(), reps[2].Ready())
		}
	}
	decided, open := txn.NewID(), txn.NewID()
	if code, out, raw := call(t, apis[0], "", "POST", txn.DecidePath(decided), `{"outcome":"commit"}`); code != http.StatusOK || out["outcome"] != "commit" {
		t.Fatalf("decide: %d %s", code, raw)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		o2, _ := reps[1].TxDecided(decided)
		o3, _ := reps[2].TxDecided(decided)
		if o2 == txn.Commit && o3 == txn.Commit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the decision never reached members 2 and 3")
		}
	}
	// A member may be not ready for a moment on a loaded machine.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, out, raw := call(t, apis[0], "", "GET", txn.StatusPath(open), "")
		if code == http.StatusOK && out["outcome"] == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an undecided transaction with a leader: expected 200 and no outcome, got %d %s", code, raw)
		}
	}
	if code, _, raw := call(t, apis[1], "", "GET", txn.StatusPath(open)+"?"+txn.LocalRead, ""); code != http.StatusOK || !strings.Contains(raw, `"local":{"member":2,"voters":[1,2,3],"term":`) {
		t.Fatalf("a local read: expected member 2's own word, got %d %s", code, raw)
	}

	// The leader gone: members 2 and 3 have none for seconds.
	apis[0].close()
	reps[0].Close()
	read := func(id txn.ID, local bool) (txn.Outcome, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return readDecision(ctx, urls, id, "", local)
	}
	o, err := read(open, true)
	for deadline := time.Now().Add(2 * time.Second); err != nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// A member is unsure for a moment while it applies entries.
		o, err = read(open, true)
	}
	if err != nil || o != "" {
		var own []string
		for _, a := range apis[1:] {
			_, _, raw := call(t, a, "", "GET", txn.StatusPath(open)+"?"+txn.LocalRead, "")
			own = append(own, raw)
		}
		t.Errorf("undecided, no leader, a majority: expected none from their own states, got %q %v (members 2 and 3 now: %v)", o, err, own)
	}
	if o, err := read(decided, true); err != nil || o != txn.Commit {
		t.Errorf("decided, no leader: expected commit, got %q %v", o, err)
	}
	if code, _, raw := call(t, apis[1], "", "GET", txn.StatusPath(open), ""); code < 500 {
		t.Errorf("undecided, no leader, a confirmed read: expected a 5xx (cannot confirm), got %d %s", code, raw)
	}
	if reps[1].IsLeader() || reps[2].IsLeader() {
		t.Fatal("members 2 and 3 elected a leader too soon for the test")
	}

	// One member left: its own word is not a majority's.
	apis[2].close()
	reps[2].Close()
	if o, err := read(open, true); err == nil {
		t.Errorf("undecided, one member of three: expected no answer, got %q", o)
	}
	if code, out, raw := call(t, apis[1], "", "GET", txn.StatusPath(decided), ""); code != http.StatusOK || out["outcome"] != "commit" {
		t.Errorf("a decided transaction without a leader: expected commit, got %d %s", code, raw)
	}
}

// TestShardMapAPI: a member's side of a shard map change: its part is
// prepared at the epoch after the shard's only, committed like any part,
// and GET /v1/map answers the map applied last (404 before the first).
func TestShardMapAPI(t *testing.T) {
	const token = "s3cret"
	a, rep := newAPI(t, token)
	if code, _, raw := call(t, a, token, "GET", shardmap.MapPath, ""); code != http.StatusNotFound {
		t.Fatalf("no map yet: expected 404, got %d %s", code, raw)
	}
	self := txn.Coordinator{Shard: "a", APIs: []string{"http://" + a.addr()}}
	m := &shardmap.Map{Epoch: 1, Key: shardmap.KeyName, Partitions: shardmap.DefaultPartitions, Load: shardmap.DefaultLoad,
		Shards: []shardmap.Shard{{Name: "a", Members: []string{"127.0.0.1:1053"}, API: []string{"http://" + a.addr()}}}}
	prepare := func(id txn.ID, m *shardmap.Map) (int, txn.Vote, string) {
		t.Helper()
		body, _ := json.Marshal(txn.Prepare{Coordinator: self, Participants: []string{"a"}, Map: m})
		code, _, raw := call(t, a, token, "POST", txn.PreparePath(id), string(body))
		var v txn.Vote
		json.Unmarshal([]byte(raw), &v)
		return code, v, raw
	}
	bad := m.Clone()
	bad.Shards = append(bad.Shards, shardmap.Shard{Name: "a", Members: []string{"127.0.0.2:1053"}, API: []string{"http://127.0.0.2:8080"}})
	if code, v, raw := prepare(txn.NewID(), bad); code != http.StatusOK || v.Yes || v.Status != http.StatusBadRequest {
		t.Errorf("a shard named twice: expected a no vote with 400, got %d %s", code, raw)
	}
	later := m.Clone()
	later.Epoch = 2
	if code, v, raw := prepare(txn.NewID(), later); code != http.StatusOK || v.Yes || v.Status != http.StatusConflict {
		t.Errorf("epoch 2 first: expected a no vote with 409, got %d %s", code, raw)
	}
	if code, _, raw := call(t, a, token, "POST", txn.PreparePath(txn.NewID()), `{"zone":"example.org.","coordinator":{"shard":"a"},"map":{"epoch":1}}`); code != http.StatusBadRequest {
		t.Errorf("a map with a zone: expected 400, got %d %s", code, raw)
	}
	id := txn.NewID()
	if code, v, raw := prepare(id, m); code != http.StatusOK || !v.Yes {
		t.Fatalf("epoch 1: expected yes, got %d %s", code, raw)
	}
	if rep.ShardMap() != nil {
		t.Error("a prepared map was applied")
	}
	if code, _, raw := call(t, a, token, "POST", txn.DecidePath(id), `{"outcome":"commit"}`); code != http.StatusOK {
		t.Fatalf("decide: %d %s", code, raw)
	}
	if code, _, raw := call(t, a, token, "POST", txn.FinishPath(id, txn.Commit), `{}`); code != http.StatusOK {
		t.Fatalf("commit: %d %s", code, raw)
	}
	code, _, raw := call(t, a, token, "GET", shardmap.MapPath, "")
	var got shardmap.Answer
	if code != http.StatusOK || json.Unmarshal([]byte(raw), &got) != nil || got.Map == nil || got.Map.Epoch != 1 || !got.Map.Same(m) || !got.Confirmed {
		t.Fatalf("GET the map: expected epoch 1, confirmed, got %d %s", code, raw)
	}
	if code, _, _ := call(t, a, "", "GET", shardmap.MapPath, ""); code != http.StatusUnauthorized {
		t.Errorf("GET the map without the token: expected 401, got %d", code)
	}
	if code, v, raw := prepare(txn.NewID(), m); code != http.StatusOK || v.Yes || v.Status != http.StatusConflict {
		t.Errorf("epoch 1 again: expected a no vote with 409, got %d %s", code, raw)
	}
}
