package craftroute

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// TestRefreshMap: a member's refusal makes the router read the map and
// route by it when it is at least the refusal's epoch; concurrent
// refusals share one read; an epoch no member serves gives up after one
// read; a router with shard_map off never reads it; a notice in an
// answer starts a read in the background.
func TestRefreshMap(t *testing.T) {
	var epoch atomic.Uint64
	var reads atomic.Int32
	epoch.Store(2)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != shardmap.MapPath {
			http.NotFound(w, r)
			return
		}
		reads.Add(1)
		time.Sleep(20 * time.Millisecond) // concurrent refusals overlap
		m := &shardmap.Map{Epoch: epoch.Load(), Key: shardmap.KeyName, Partitions: shardmap.DefaultPartitions, Load: shardmap.DefaultLoad,
			Shards: []shardmap.Shard{{Name: "a", Members: []string{"127.0.0.1:1053"}, API: []string{srv.URL}}}}
		json.NewEncoder(w).Encode(shardmap.Answer{Map: m, Confirmed: true})
	}))
	defer srv.Close()
	router := func(extra string) *Craftroute {
		c, err := parse(caddy.NewTestController("dns", "craftroute {\nshard a 127.0.0.1:1053\nshard_api a "+srv.URL+"\n"+extra+"router_key "+testSecret+"\n}"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c := router("")
	done := make(chan bool, 4)
	for range 4 {
		go func() { done <- c.refreshMap(ctx, &errFenced{shard: "a", epoch: 2}) }()
	}
	for range 4 {
		if !<-done {
			t.Error("a refusal at epoch 2 did not bring the router to the map at epoch 2")
		}
	}
	if e := c.routes().epoch(); e != 2 {
		t.Errorf("the router routes by epoch %d, expected 2", e)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("4 concurrent refusals read the map %d times, expected once", n)
	}
	if c.refreshMap(ctx, &errFenced{shard: "a", epoch: 9}) {
		t.Error("an epoch no member serves was taken as reached")
	}
	if c.refreshMap(ctx, errNotHere) {
		t.Error("an error that is no refusal read the map")
	}

	// A notice: an answer with a newer epoch.
	epoch.Store(3)
	m := new(dns.Msg)
	m.SetQuestion("x.example.org.", dns.TypeA)
	shardproto.AttachEpoch(m, 3, false)
	if f := c.checkEpoch(c.shard("a"), m); f != nil {
		t.Fatalf("a notice read as a refusal: %v", f)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.routes().epoch() != 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if e := c.routes().epoch(); e != 3 {
		t.Errorf("after a notice of epoch 3 the router routes by %d", e)
	}
	shardproto.AttachEpoch(m, 4, true)
	if f := c.checkEpoch(c.shard("a"), m); f == nil || f.epoch != 4 {
		t.Errorf("a refusal: %v", f)
	}

	off := router("shard_map off\n")
	before := reads.Load()
	if off.refreshMap(ctx, &errFenced{shard: "a", epoch: 3}) {
		t.Error("a router with shard_map off followed a refusal to the map")
	}
	off.mapsf.background(off, 3)
	time.Sleep(200 * time.Millisecond)
	if reads.Load() != before || off.routes().epoch() != 0 {
		t.Error("a router with shard_map off read the map")
	}
}

// TestAdoptFollows: a map change that gives a shard another member list
// makes a new Shard that keeps the members it keeps and the index the old
// one had, and is told what the old one is told afterwards; the lease
// tokens point at it, so that a notice raises the Shard the router routes
// by; a member added voids the leases until it grants one, a member
// dropped for leaseFor.
func TestAdoptFollows(t *testing.T) {
	c, err := parse(caddy.NewTestController("dns", "craftroute {\nshard a 127.0.0.1:1053 127.0.0.2:1053\nshard_api a http://127.0.0.1:8053 http://127.0.0.2:8053\nrouter_key "+testSecret+"\n}"))
	if err != nil {
		t.Fatal(err)
	}
	lh := &c.leases
	lh.port = 5353
	lh.follow(c.shards()) // as startLeases does
	base, err := c.corefileMap()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.adopt(base); err != nil {
		t.Fatal(err)
	}
	old := c.shard("a")
	old.raise(10)
	tokenOf := func(m *Member) [shardproto.TokenLen]byte { return (*lh.tokens.Load())[m] }
	tok := tokenOf(old.Members[1])
	far := time.Now().Add(time.Hour).UnixNano()
	lh.validUntil.Store(far)

	rotated := base.Clone()
	rotated.Epoch = 2
	sh := &rotated.Shards[0]
	sh.Members[0], sh.Members[1] = sh.Members[1], sh.Members[0]
	sh.API[0], sh.API[1] = sh.API[1], sh.API[0]
	if err := c.adopt(rotated); err != nil {
		t.Fatal(err)
	}
	cur := c.shard("a")
	if cur == old || cur.Members[0] != old.Members[1] || cur.Members[1] != old.Members[0] {
		t.Fatalf("rotated: a new Shard with the same Members expected, got %p %v (old %p %v)", cur, cur.Members, old, old.Members)
	}
	if cur.minIndex.Load() != 10 {
		t.Errorf("the new Shard's index %d, the old one had 10", cur.minIndex.Load())
	}
	old.raise(20) // an answer or notice the old one took after the swap
	if cur.minIndex.Load() != 20 {
		t.Errorf("the old Shard was told 20, the new one has %d", cur.minIndex.Load())
	}
	if tokenOf(cur.Members[0]) != tok || lh.shardOf(tok) != cur {
		t.Error("a kept member's lease token changed, or points at the old Shard")
	}
	if !lh.valid(time.Now()) {
		t.Error("a rotation of the same members voided the leases")
	}

	dropped := rotated.Clone()
	dropped.Epoch = 3
	dropped.Shards[0].Members, dropped.Shards[0].API = dropped.Shards[0].Members[:1], dropped.Shards[0].API[:1]
	if err := c.adopt(dropped); err != nil {
		t.Fatal(err)
	}
	lh.validUntil.Store(far) // renewed meanwhile
	if lh.valid(time.Now()) {
		t.Error("the leases count right after a member was dropped")
	}
	if lh.shardOf(tok) != c.shard("a") {
		t.Error("a dropped member's notices do not reach its shard")
	}
	if !lh.valid(time.Now().Add(leaseFor + time.Millisecond)) {
		t.Error("the leases stay void after the dropped member's lease ended")
	}

	added := dropped.Clone()
	added.Epoch = 4
	added.Shards[0].Members = append(added.Shards[0].Members, "127.0.0.3:1053")
	added.Shards[0].API = append(added.Shards[0].API, "http://127.0.0.3:8053")
	if err := c.adopt(added); err != nil {
		t.Fatal(err)
	}
	if lh.validUntil.Load() != 0 {
		t.Error("a member added that holds no lease left the leases valid")
	}
	if m := c.shard("a").Members[1]; tokenOf(m) == ([shardproto.TokenLen]byte{}) {
		t.Error("the member added has no lease token")
	}
}
