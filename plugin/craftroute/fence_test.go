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
