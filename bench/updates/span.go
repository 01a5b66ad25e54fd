package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// namePool hands out pairs of fresh names: on two shards (cross) or both on
// one shard (single), as a craftroute router places them.
type namePool struct {
	mu       sync.Mutex
	shards   [][]string // names per shard, used from the end
	cross    bool
	turn     int
	inflight []string // names of the UPDATEs sent and not answered yet
}

// begin records names as those of an UPDATE in flight, end as answered.
func (p *namePool) begin(names ...string) {
	p.mu.Lock()
	p.inflight = append(p.inflight, names...)
	p.mu.Unlock()
}

func (p *namePool) end(names ...string) {
	p.mu.Lock()
	p.inflight = slices.DeleteFunc(p.inflight, func(n string) bool { return slices.Contains(names, n) })
	p.mu.Unlock()
}

// pick returns a name of an UPDATE in flight, at random ("" when none).
func (p *namePool) pick() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.inflight) == 0 {
		return ""
	}
	return p.inflight[rand.IntN(len(p.inflight))]
}

// findNames asks the router's API (GET /v1/shards?name=) which shard holds
// each of the names PREFIX-span-N.ORIGIN until two shards hold n each.
func findNames(api, origin, prefix string, n int, cross bool) (*namePool, error) {
	byShard := map[string][]string{}
	client := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	for i := 0; ; i++ {
		full := 0
		for _, names := range byShard {
			if len(names) >= n {
				full++
			}
		}
		if full >= 2 {
			break
		}
		if i > 40*n {
			return nil, fmt.Errorf("%d names: fewer than two shards hold %d", i, n)
		}
		name := fmt.Sprintf("%s-span-%d.%s", prefix, i, origin)
		resp, err := client.Get(api + "/v1/shards?name=" + url.QueryEscape(name))
		if err != nil {
			return nil, err
		}
		var out struct{ Owner string }
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || out.Owner == "" {
			return nil, fmt.Errorf("%s: no owner (%v)", name, err)
		}
		if len(byShard[out.Owner]) < n {
			byShard[out.Owner] = append(byShard[out.Owner], name)
		}
	}
	p := &namePool{cross: cross}
	for _, names := range byShard {
		if len(names) >= n {
			p.shards = append(p.shards, names)
		}
	}
	p.shards = p.shards[:2]
	fmt.Printf("names shards=2 per_shard=%d seconds=%.1f\n", n, time.Since(start).Seconds())
	return p, nil
}

// next returns two fresh names; ok is false when they are used up.
func (p *namePool) next() (first, second string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	take := func(s int) string {
		names := p.shards[s]
		if len(names) == 0 {
			return ""
		}
		p.shards[s] = names[:len(names)-1]
		return names[len(names)-1]
	}
	if p.cross {
		first, second = take(0), take(1)
	} else {
		s := p.turn % 2
		p.turn++
		first, second = take(s), take(s)
	}
	return first, second, first != "" && second != ""
}
