package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/faultnet"
	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/anishathalye/porcupine"
	"github.com/miekg/dns"
)

// The chaos suite: real members under faults drawn from a seed, clients
// writing through the HTTP API and RFC 2136 and reading through DNS, and
// the history checked (chaos_history_test.go). make test runs a short run;
// make chaos a long one:
//
//	go test ./integration -run TestChaos -v -chaos.duration=30m -chaos.seed=N
//
// The seed draws the schedule: which fault, against which role (the leader,
// a follower, any member), for how long, and the pauses between. The same
// seed replays the same schedule; which member is the leader at a given
// moment depends on timing.
var (
	chaosSeed     = flag.Uint64("chaos.seed", 0, "seed of the chaos suite's fault schedule (0: from the clock, printed)")
	chaosDuration = flag.Duration("chaos.duration", 45*time.Second, "how long the chaos suite injects faults")
	chaosOut      = flag.String("chaos.out", "", "directory for the chaos suite's summary (JSON) and, on a violation, porcupine's visualization")
	chaosKinds    = flag.String("chaos.faults", "", "comma-separated fault kinds to draw from (empty: all of them, by their weights)")
)

const chaosZone = "chaos.test."

// The registers: cas keys are written by RFC 2136 UPDATEs with
// prerequisites, put keys through the HTTP API.
var (
	casKeys = keys("c", 6)
	putKeys = keys("p", 6)
)

// keys returns n names of the zone: prefix0, prefix1, ... More keys keep
// each key's history, which porcupine checks alone, short.
func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d.%s", prefix, i, chaosZone)
	}
	return out
}

// chaos is one run: the shards, their members and links, the routers, the
// clients' history and the faults injected.
type chaos struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	shards  []string
	members map[string][]*shardMember // shard → members
	all     []*shardMember
	routers []*router
	owner   map[string]string // key → the shard that holds it
	// ring places names by the shard map (nil for one shard): a name
	// written to a member directly is one its shard holds, as members
	// refuse a client's write of another shard's name.
	ring  atomic.Pointer[shardmap.Ring]
	fn    *faultnet.Net
	disks map[string]string // member → its tmpfs data directory
	loss  bool              // loss faults: in a network namespace of its own
	h     *history

	faults     map[string]int
	healLeader []time.Duration // heal → every member of every shard agrees on its leader
	active     atomic.Value    // the fault in progress ("none" between faults)
	routerDown atomic.Int64    // odd while a router is down; bumped when one goes down and when it is back

	mu          sync.Mutex
	names       []string          // names added by acknowledged API writes
	routerReads map[string][2]int // fault in progress → router queries sent, failed
	routerFails []string          // the first few failures
	// Puts through a router whose names span shards are transactions
	// (internal/txn): while one is in flight, and for txWindow after it
	// returned (a part left prepared is finished within about that), a
	// read of its key may meet its prepared part. Its member reads the
	// decision from a majority of the coordinator's group instead of
	// waiting, and waits only while that group has no majority (the
	// majority faults). Such a read's failure is a failure like any other,
	// and counted once more in txBlocked, to tell it in the summary.
	// spare is shard c, outside the map: the migrate fault adds it (the
	// routers move partitions to it) and removes it again. Meanwhile the
	// clients go through the routers only (migrating), and no request to
	// a member is in flight (direct: members' requests hold it for
	// reading): a member no longer holds the names it handed over.
	spare     []*shardMember
	migrating atomic.Bool
	direct    sync.RWMutex

	txFlight  map[string]int       // key → puts in flight
	txUntil   map[string]time.Time // key → end of the window after the last put
	txBlocked int
}

// txWindow is how long after a put through a router its key may still be
// held by a part left prepared: the participant resolves it after
// txn.ResolveAfter, plus an election when the fault hit the coordinator.
const txWindow = 5 * time.Second

// TestChaosShard runs the chaos suite on one shard of three members.
func TestChaosShard(t *testing.T) { runChaos(t, 1) }

// TestChaosSharded runs it on the sharded example: two shards of three
// members, key mode name, and its two routers, which route by the agreed
// shard map (and change it: the map-change fault), and a third shard that
// the migrate fault adds and removes again.
func TestChaosSharded(t *testing.T) {
	spec := routerSpec{zones: []string{chaosZone}, key: "name", timeout: "500ms", downFor: "5s", probe: "1s", mapSeed: true}
	runChaos(t, 2, spec, spec)
}

func runChaos(t *testing.T, nshards int, routers ...routerSpec) {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (replay: -chaos.seed=%d), duration %v", seed, seed, *chaosDuration)
	wd := harness.Workdir(t)
	fn := faultnet.New()
	t.Cleanup(fn.Close)
	c := &chaos{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x63686173)), fn: fn, h: newHistory(),
		faults: map[string]int{}, disks: map[string]string{}, owner: map[string]string{}, routerReads: map[string][2]int{},
		txFlight: map[string]int{}, txUntil: map[string]time.Time{}}
	c.active.Store("none")
	c.loss = lossFaults(t)
	for i := 0; i < nshards; i++ {
		for j := 1; j <= 3; j++ {
			m := fmt.Sprintf("%c%d", 'a'+i, j)
			c.disks[m] = smallDataDir(t, filepath.Join(wd, "data", m), 64<<20)
		}
	}
	s := startShardedNet(t, wd, nshards, 3, []string{chaosZone}, fn, routers...)
	c.shards, c.members, c.routers = s.shards, s.members, s.routers
	for _, sh := range c.shards {
		c.all = append(c.all, c.members[sh]...)
	}
	if nshards > 1 && len(c.routers) > 0 {
		c.spare = s.startShard(t, "c", 3, []string{chaosZone})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.all {
				t.Logf("%s log (last 3 KiB):\n%s", m.name, tail(m.p.Logs(), 3072))
			}
		}
	})
	c.setup()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(halt) // a fault that fails the test stops the clients too
	for id := 0; id < 2; id++ {
		wg.Go(func() { c.casWriter(stop, id) })
	}
	wg.Go(func() { c.prober(stop, 2) })
	for id := 3; id < 5; id++ {
		wg.Go(func() { c.putWriter(stop, id) })
	}
	for i := 0; i < 2; i++ {
		wg.Go(func() { c.localReader(stop) })
	}
	if len(c.routers) > 0 {
		wg.Go(func() { c.routerReader(stop) })
	}

	c.inject(time.Now().Add(*chaosDuration))
	time.Sleep(2 * time.Second) // clients go on with every fault healed
	halt()
	c.finish()
}

// setup creates the zone (through the router when there is one, which
// splits it over the shards), gives each key a first value and finds the
// shard that holds it.
func (c *chaos) setup() {
	t := c.t
	if len(c.routers) > 0 {
		putZone(t, c.routers[0].client(), chaosZone, smallZone(chaosZone, 3))
	} else {
		putZone(t, c.all[0].client(), chaosZone, smallZone(chaosZone, 3))
	}
	for _, m := range c.all {
		harness.Eventually(t, "the zone on "+m.name, 20*time.Second, func() bool {
			_, err := readTXT(m.addr(), chaosZone)
			return err == nil
		})
	}
	first := c.endpoints("")[0]
	for _, key := range allKeys {
		val := casValue(1, 99, 0)
		if !strings.HasPrefix(key, "c") {
			val = "put c=99"
		}
		res := c.write(99, first, key, "", val)
		if res != resOK {
			t.Fatalf("first write of %s through %s: %v", key, first.name, res)
		}
		harness.Eventually(t, "a shard holding "+key, 20*time.Second, func() bool {
			for _, sh := range c.shards {
				if v, err := readTXT(c.members[sh][0].addr(), key); err == nil && v == val {
					c.owner[key] = sh
					return true
				}
			}
			return false
		})
	}
	t.Logf("keys by shard: %v", c.owner)
	if len(c.shards) > 1 {
		if err := c.readRing(); err != nil {
			t.Fatal(err)
		}
	}
}

// readRing reads the shard map's placement from a member.
func (c *chaos) readRing() error {
	var a shardmap.Answer
	m := c.all[0]
	if code, err := m.client().Do("GET", shardmap.MapPath, nil, &a); err != nil || code != http.StatusOK || a.Map == nil {
		return fmt.Errorf("%s: GET %s: %d %v", m.name, shardmap.MapPath, code, err)
	}
	ring, err := a.Map.Ring()
	if err != nil {
		return err
	}
	c.ring.Store(ring)
	return nil
}

// nameOn returns a new name for client's write at call through ep: one
// the map places on ep's shard when ep is a member.
func (c *chaos) nameOn(ep endpoint, client int, call int64) string {
	name := fmt.Sprintf("n%d-%d.%s", client, call, chaosZone)
	ring := c.ring.Load()
	if !ep.member || ring == nil {
		return name
	}
	shard := ""
	for _, m := range c.all {
		if m.name == ep.name {
			shard = m.shard
		}
	}
	for i := 1; ring.Locate(strings.ToLower(name)) != shard; i++ {
		name = fmt.Sprintf("n%d-%d-%d.%s", client, call, i, chaosZone)
	}
	return name
}

// endpoint is where a client sends a request: a member or a router.
type endpoint struct {
	name     string // a1, router1
	dns, api string // host:port, http://host:port
	member   bool
}

// endpoints returns the members of the shard that holds key (every member
// for ""), and the routers.
func (c *chaos) endpoints(key string) []endpoint {
	var out []endpoint
	for _, m := range c.all {
		if c.migrating.Load() {
			break // the migrate fault: through the routers only
		}
		if key == "" || m.shard == c.owner[key] {
			out = append(out, endpoint{m.name, m.addr(), m.client().Base, true})
		}
	}
	for _, r := range c.routers {
		out = append(out, endpoint{r.name, r.addr(), r.client().Base, false})
	}
	if key == "" && len(c.routers) > 0 {
		out = out[len(out)-len(c.routers):] // a write to any name: through a router
	}
	return out
}

// keyMembers returns the members of the shard that holds key.
func (c *chaos) keyMembers(key string) []*shardMember { return c.members[c.owner[key]] }

// smallDataDir mounts a tmpfs of size bytes at dir, so that a fault can
// fill the member's disk. Root is needed; elsewhere than in CI the
// disk-full faults are left out.
func smallDataDir(t *testing.T, dir string, size int) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mounting a tmpfs for the disk-full faults (root is needed): %v %s", err, out)
		}
		t.Logf("no disk-full faults: cannot mount a tmpfs: %v %s", err, out)
		return ""
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// pick returns a random element of s.
func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// clientRand is a client's own random source (the fault schedule keeps
// the seeded one to itself).
func clientRand() *rand.Rand { return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) }

// readTXT asks addr for key's TXT RRset: its one value, "" for none.
func readTXT(addr, key string) (string, error) {
	v, _, err := readTXTStale(addr, key)
	return v, err
}

// readTXTStale is readTXT that also reports whether the answer says it is
// stale (Extended DNS Error Stale Answer: a router answered from a member's
// unconfirmed state).
func readTXTStale(addr, key string) (string, bool, error) {
	cl := &dns.Client{Timeout: 2 * time.Second}
	q := new(dns.Msg)
	q.SetQuestion(key, dns.TypeTXT)
	q.SetEdns0(1232, false)
	r, _, err := cl.Exchange(q, addr)
	if err != nil {
		return "", false, err
	}
	stale := hasEDE(r, dns.ExtendedErrorCodeStaleAnswer)
	v, err := txtValue(r, key)
	return v, stale, err
}

// txtValue is the value of key in answer r: "" when it has none.
func txtValue(r *dns.Msg, key string) (string, error) {
	switch {
	case r.Rcode == dns.RcodeNameError || r.Rcode == dns.RcodeSuccess && len(r.Answer) == 0:
		return "", nil
	case r.Rcode != dns.RcodeSuccess:
		return "", fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	var vals []string
	for _, rr := range r.Answer {
		if txt, ok := rr.(*dns.TXT); ok {
			vals = append(vals, strings.Join(txt.Txt, ""))
		}
	}
	if len(vals) != 1 {
		return "", fmt.Errorf("%d TXT records at %s", len(vals), key)
	}
	return vals[0], nil
}

// read reads key through ep. A member's answer goes into the history of
// local reads; a router's is counted, with its failures, by the fault in
// progress, and goes into that history too unless it says it is stale:
// routers answer from members' confirmed state, so each router's reads must
// be monotonic and show the writes made through it.
func (c *chaos) read(ep endpoint, key string) (string, bool) {
	if ep.member {
		c.direct.RLock()
		defer c.direct.RUnlock()
	}
	call := c.h.now()
	fault, down := c.active.Load().(string), c.routerDown.Load()
	v, stale, err := readTXTStale(ep.dns, key)
	if !ep.member {
		if down%2 == 1 || c.routerDown.Load() != down {
			fault = "router-kill" // a router was down while the query waited
		}
		c.mu.Lock()
		n := c.routerReads[fault]
		n[0]++
		if err != nil && fault != "router-kill" && (c.txFlight[key] > 0 || time.Now().Before(c.txUntil[key])) {
			c.txBlocked++
		}
		if err != nil {
			n[1]++
			if !majorityFaults[fault] && len(c.routerFails) < 10 {
				c.routerFails = append(c.routerFails, fmt.Sprintf("%s at %v during %s: %v", key, time.Duration(call).Round(time.Millisecond), fault, err))
			}
		}
		c.routerReads[fault] = n
		c.mu.Unlock()
		if err == nil {
			c.h.observe(v, c.h.now())
			if stale {
				c.h.count("router read stale")
			} else {
				c.h.read(localRead{member: ep.name, key: key, value: v, call: call, ret: c.h.now()})
			}
		}
		return v, err == nil
	}
	if err != nil {
		c.h.count("read error")
		return "", false
	}
	c.h.read(localRead{member: ep.name, key: key, value: v, call: call, ret: c.h.now()})
	return v, true
}

// update sends a signed UPDATE of the zone to addr: the prerequisite that
// key's TXT RRset is old ("": that it does not exist) and, with val set,
// the RRset replaced by val.
func update(addr, key, old, val string) regResult {
	u := new(dns.Msg)
	u.SetUpdate(chaosZone)
	if old == "" {
		u.RRsetNotUsed([]dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: key, Rrtype: dns.TypeTXT, Class: dns.ClassINET}}})
	} else {
		u.Used([]dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: key, Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{old}}})
	}
	if val != "" {
		u.RemoveRRset([]dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: key, Rrtype: dns.TypeTXT, Class: dns.ClassINET}}})
		u.Insert([]dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: key, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{val}}})
	}
	u.SetTsig(updateKey, dns.HmacSHA256, 300, time.Now().Unix())
	cl := &dns.Client{Net: "tcp", Timeout: 8 * time.Second, TsigSecret: map[string]string{updateKey: updateSecret}}
	r, _, err := cl.Exchange(u, addr)
	switch {
	case err != nil:
		return resUnknown
	case r.Rcode == dns.RcodeSuccess:
		return resOK
	case r.Rcode == dns.RcodeNXRrset || r.Rcode == dns.RcodeYXRrset:
		return resFailed
	}
	return resUnknown
}

// apiClient bounds API calls, so that a paused member does not hold a
// client for long.
var apiClient = &http.Client{Timeout: 8 * time.Second}

// write sets key to val through ep and records it: with a cas key, an
// UPDATE whose prerequisite is old; with a put key, an API change that
// also adds a new name. It returns what the client learnt.
func (c *chaos) write(client int, ep endpoint, key, old, val string) regResult {
	if ep.member {
		c.direct.RLock()
		defer c.direct.RUnlock()
	}
	call := c.h.now()
	if strings.HasPrefix(key, "c") {
		res := update(ep.dns, key, old, val)
		ret := c.h.now()
		c.h.op(client, regOp{Kind: "cas", Key: key, Old: old, New: val}, res, call, ret)
		if res == resOK {
			// cas versions order the key's values wherever they were
			// written: a router must show its own writes too.
			c.h.ack(ackedWrite{member: ep.name, key: key, value: val, ord: casVersion(val), ret: ret}, false)
		}
		return res
	}
	name := c.nameOn(ep, client, call)
	c.h.putName(val, name)
	body, _ := json.Marshal(map[string]any{
		"delete": []any{map[string]string{"name": key, "type": "TXT"}},
		"add":    []string{fmt.Sprintf("%s 60 IN TXT %q", key, val), name + " 60 IN A 192.0.2.7"},
	})
	var out struct{ Serial uint32 }
	res := resUnknown
	if !ep.member {
		c.mu.Lock()
		c.txFlight[key]++
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.txFlight[key]--
			c.txUntil[key] = time.Now().Add(txWindow)
			c.mu.Unlock()
		}()
	}
	resp, err := apiClient.Post(ep.api+"/v1/zones/"+chaosZone+"/records", "application/json", bytes.NewReader(body))
	if err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK && json.Unmarshal(data, &out) == nil:
			res = resOK
		case resp.StatusCode/100 == 4:
			c.t.Errorf("API write through %s refused: %d %s", ep.name, resp.StatusCode, data)
		}
	}
	ret := c.h.now()
	c.h.op(client, regOp{Kind: "put", Key: key, New: val}, res, call, ret)
	if res == resOK {
		// A router answers with the serial of one of the shards it wrote
		// to (the key and the name may be on different ones): the order
		// of put values is kept for those a member acknowledged, and a
		// put through a router orders nothing.
		ord := int64(out.Serial)
		if !ep.member {
			ord = -1
		}
		c.h.ack(ackedWrite{member: ep.name, key: key, value: val, ord: ord, ret: ret}, ep.member)
		c.mu.Lock()
		c.names = append(c.names, name)
		c.mu.Unlock()
	}
	return res
}

// allKeys are the cas and the put keys.
var allKeys = append(slices.Clone(casKeys), putKeys...)

// until runs a client's step, with its own random source and a step
// number, until stop; a step that returns a pause waits that long first.
func until(stop <-chan struct{}, step func(rng *rand.Rand, seq int) time.Duration) {
	rng := clientRand()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		time.Sleep(step(rng, seq))
	}
}

// casWriter reads a cas key and writes its next version, until stop.
func (c *chaos) casWriter(stop <-chan struct{}, id int) {
	until(stop, func(rng *rand.Rand, seq int) time.Duration {
		key := pick(rng, casKeys)
		old, ok := c.read(pick(rng, c.endpoints(key)), key)
		if !ok {
			return 50 * time.Millisecond
		}
		ver := casVersion(old)
		if ver < 0 {
			c.t.Errorf("%s holds %q, which no cas wrote", key, old)
			return time.Second
		}
		c.write(id, pick(rng, c.endpoints(key)), key, old, casValue(ver+1, id, seq))
		return 0
	})
}

// putWriter replaces a put key's value through the API, until stop.
func (c *chaos) putWriter(stop <-chan struct{}, id int) {
	until(stop, func(rng *rand.Rand, seq int) time.Duration {
		key := pick(rng, putKeys)
		if c.write(id, pick(rng, c.endpoints(key)), key, "", fmt.Sprintf("put c=%d s=%d", id, seq)) != resOK {
			return 20 * time.Millisecond
		}
		return 0
	})
}

// prober reads a key and checks that value through the log (an UPDATE
// with the prerequisite only), until stop.
func (c *chaos) prober(stop <-chan struct{}, id int) {
	until(stop, func(rng *rand.Rand, _ int) time.Duration {
		key := pick(rng, allKeys)
		v, ok := c.read(pick(rng, c.endpoints(key)), key)
		if !ok {
			return 50 * time.Millisecond
		}
		ep := pick(rng, c.endpoints(key))
		if ep.member {
			c.direct.RLock()
			defer c.direct.RUnlock()
		}
		call := c.h.now()
		res := update(ep.dns, key, v, "")
		c.h.op(id, regOp{Kind: "probe", Key: key, Old: v}, res, call, c.h.now())
		return 0
	})
}

// localReader reads random keys from random members, until stop; the
// pause between reads bounds the history of a long run.
func (c *chaos) localReader(stop <-chan struct{}) {
	until(stop, func(rng *rand.Rand, _ int) time.Duration {
		if c.migrating.Load() {
			return 20 * time.Millisecond // the migrate fault: no request to a member
		}
		key := pick(rng, allKeys)
		m := pick(rng, c.keyMembers(key))
		if _, ok := c.read(endpoint{m.name, m.addr(), m.client().Base, true}, key); !ok {
			return 20 * time.Millisecond
		}
		return 2 * time.Millisecond
	})
}

// routerReader asks the routers for random keys, until stop.
func (c *chaos) routerReader(stop <-chan struct{}) {
	until(stop, func(rng *rand.Rand, _ int) time.Duration {
		r := pick(rng, c.routers)
		c.read(endpoint{r.name, r.addr(), r.client().Base, false}, pick(rng, allKeys))
		return 2 * time.Millisecond
	})
}

// memberStatus is what GET /v1/cluster says.
type memberStatus struct {
	ID     uint64
	Leader uint64
}

var statusClient = &http.Client{Timeout: 500 * time.Millisecond}

func status(m *shardMember) (memberStatus, error) {
	var st memberStatus
	resp, err := statusClient.Get(m.client().Base + "/v1/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /v1/cluster: %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// leader returns the member every member of shard names as leader, or nil.
func (c *chaos) leader(shard string) *shardMember {
	var id uint64
	for _, m := range c.members[shard] {
		st, err := status(m)
		if err != nil || st.Leader == 0 || id != 0 && st.Leader != id {
			return nil
		}
		id = st.Leader
	}
	for _, m := range c.members[shard] {
		if m.name[1:] == fmt.Sprint(id) {
			return m
		}
	}
	return nil
}

// waitLeader waits until the members of every shard name the same leader
// and returns how long that took; the test fails after 30s.
func (c *chaos) waitLeader(what string) time.Duration {
	start := time.Now()
	for _, sh := range c.shards {
		for c.leader(sh) == nil {
			if time.Since(start) > 30*time.Second {
				c.t.Fatalf("shard %s without a leader 30s after %s", sh, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// waitReady waits until every member of shard is ready; the test fails
// after 30s.
func (c *chaos) waitReady(shard string) {
	for _, m := range c.members[shard] {
		url := fmt.Sprintf("http://127.0.0.1:%d/ready", m.ready)
		harness.Eventually(c.t, m.name+" ready again", 30*time.Second, func() bool {
			resp, err := statusClient.Get(url)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
}

// waitRouters waits until every router answers for every key that shard
// holds; the test fails after 30s.
func (c *chaos) waitRouters(shard string) {
	for _, r := range c.routers {
		for _, key := range allKeys {
			if c.owner[key] != shard {
				continue
			}
			harness.Eventually(c.t, r.name+" answering for "+key, 30*time.Second, func() bool {
				_, err := readTXT(r.addr(), key)
				return err == nil
			})
		}
	}
}

// chaosFaults are the fault kinds, their weights and how often they aim at
// a shard's leader rather than at any member.
var chaosFaults = []struct {
	kind   string
	weight int
	leader float64
}{
	{"kill", 4, 0.6}, {"pause", 2, 0.5}, {"isolate-hold", 2, 0.5}, {"isolate-drop", 1, 0.5}, {"isolate-reset", 1, 0.5},
	{"leader-oneway", 1, 1}, {"flap", 1, 0.5}, {"delay", 1, 0}, {"disk-full", 1, 0.3}, {"router-kill", 1, 0},
	{"loss", 2, 0.5}, {"kill-majority", 1, 0.5}, {"partition-all", 1, 0}, {"kill-each-shard", 1, 0.5},
	{"map-change", 1, 0}, {"migrate", 1, 0},
}

// majorityFaults take a shard's quorum away: queries through the router
// may fail while they last, and are counted apart.
var majorityFaults = map[string]bool{"router-kill": true, "kill-majority": true, "partition-all": true}

// lossFaults reports whether the suite runs in a network namespace of its
// own, which integration/chaos.sh makes (it passes the machine's namespace
// in CHAOS_HOST_NETNS), so that the loss faults may add iptables rules.
// Anywhere else they are left out: no rule ever goes into the machine's own
// namespace.
func lossFaults(t *testing.T) bool {
	host := os.Getenv("CHAOS_HOST_NETNS")
	self, err := os.Readlink("/proc/self/ns/net")
	switch {
	case host == "":
		t.Logf("no loss faults: not started by integration/chaos.sh in a network namespace of its own")
		return false
	case err != nil || self == host:
		t.Fatalf("CHAOS_HOST_NETNS is %s and this process's namespace %s (%v): refusing to add iptables rules", host, self, err)
	}
	harness.RequireTool(t, "iptables")
	return true
}

// lossRule is the iptables rule (without -A or -D) that drops the share p
// of the packets to and from ports on loopback.
func lossRule(ports []string, p float64) []string {
	return []string{"INPUT", "-i", "lo", "-m", "multiport", "--ports", strings.Join(ports, ","),
		"-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%.2f", p), "-j", "DROP"}
}

func iptables(t *testing.T, op string, rule []string) {
	for _, proto := range []string{"tcp", "udp"} {
		args := append([]string{op, rule[0], "-p", proto}, rule[1:]...)
		if out, err := exec.Command(harness.RequireTool(t, "iptables"), args...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
}

// inject draws faults until the deadline: each lasts 0.5-5s and is healed,
// then the run waits for a leader in every shard and pauses 0.5-2.5s.
func (c *chaos) inject(until time.Time) {
	faults := chaosFaults
	if *chaosKinds != "" {
		kinds := strings.Split(*chaosKinds, ",")
		faults = slices.DeleteFunc(slices.Clone(chaosFaults), func(f struct {
			kind   string
			weight int
			leader float64
		}) bool {
			return !slices.Contains(kinds, f.kind)
		})
		if len(faults) == 0 {
			c.t.Fatalf("-chaos.faults=%s: no such fault", *chaosKinds)
		}
	}
	total := 0
	for _, f := range faults {
		total += f.weight
	}
	for n := 1; time.Now().Before(until); n++ {
		w := c.rng.IntN(total)
		kind, bias := "", 0.0
		for _, f := range faults {
			if w -= f.weight; w < 0 {
				kind, bias = f.kind, f.leader
				break
			}
		}
		dur := 500*time.Millisecond + time.Duration(c.rng.IntN(4500))*time.Millisecond
		gap := 500*time.Millisecond + time.Duration(c.rng.IntN(2000))*time.Millisecond
		shard := pick(c.rng, c.shards)
		leaderFirst, other := c.rng.Float64() < bias, pick(c.rng, c.members[shard]) // all drawn: the schedule replays
		switch {
		case kind == "disk-full" && c.disks["a1"] == "":
			kind = "kill" // no tmpfs: not root
		case (kind == "router-kill" || kind == "map-change") && len(c.routers) == 0, kind == "migrate" && len(c.spare) == 0:
			kind = "pause"
		case kind == "loss" && !c.loss:
			kind = "isolate-drop" // not in a namespace of its own
		}
		m := other
		if l := c.leader(shard); leaderFirst && l != nil {
			m = l
		}
		target := m.name
		switch kind {
		case "delay":
			target = "every link"
		case "router-kill", "map-change", "migrate":
			target = c.routers[int(other.name[1]-'1')%len(c.routers)].name
		}
		c.t.Logf("fault %d at %v: %s %s for %v", n, time.Duration(c.h.now()).Round(time.Millisecond), kind, target, dur)
		c.active.Store(kind)
		c.fault(kind, m, target, dur)
		if kind == "kill-majority" || kind == "partition-all" {
			// Until its members are ready again (a leader, then ReadIndex)
			// and the routers answer for its names, the shard refuses the
			// routers' queries: still this fault's.
			c.waitReady(m.shard)
			c.waitRouters(m.shard)
		}
		c.active.Store("none")
		c.faults[kind]++
		c.healLeader = append(c.healLeader, c.waitLeader(fmt.Sprintf("healing %s of %s", kind, target)))
		time.Sleep(gap)
	}
}

// fault injects one fault of kind into m (router-kill: into the router
// named target) for dur and heals it.
func (c *chaos) fault(kind string, m *shardMember, target string, dur time.Duration) {
	switch kind {
	case "kill":
		m.p.Kill()
		time.Sleep(dur)
		m.p.Restart()
	case "router-kill":
		for _, r := range c.routers {
			if r.name == target {
				c.routerDown.Add(1)
				r.p.Kill()
				time.Sleep(dur)
				r.p.Restart()
				harness.WaitReady(c.t, fmt.Sprintf("http://127.0.0.1:%d/ready", r.rdy), r.p)
				c.routerDown.Add(1)
			}
		}
	case "kill-each-shard": // m, and the member of the same number in every other shard
		var down []*shardMember
		for _, sh := range c.shards {
			down = append(down, c.members[sh][slices.Index(c.members[m.shard], m)])
		}
		for _, d := range down {
			d.p.Kill()
		}
		time.Sleep(dur)
		for _, d := range down {
			d.p.Restart()
		}
	case "kill-majority": // m and the next member of its shard
		ms := c.members[m.shard]
		other := ms[(slices.Index(ms, m)+1)%len(ms)]
		m.p.Kill()
		other.p.Kill()
		time.Sleep(dur)
		m.p.Restart()
		other.p.Restart()
	case "partition-all": // every member of m's shard cut off from the others
		for _, p := range c.members[m.shard] {
			c.fn.Isolate(p.name, faultnet.Hold)
		}
		time.Sleep(dur)
		c.fn.Heal()
	case "pause":
		m.p.Signal(syscall.SIGSTOP)
		time.Sleep(dur)
		m.p.Signal(syscall.SIGCONT)
	case "isolate-hold", "isolate-drop", "isolate-reset":
		mode := map[string]faultnet.Mode{"isolate-hold": faultnet.Hold, "isolate-drop": faultnet.Drop, "isolate-reset": faultnet.Reset}[kind]
		c.fn.Isolate(m.name, mode)
		time.Sleep(dur)
		c.fn.Heal()
	case "leader-oneway": // what m sends is lost; what it is sent arrives
		for _, p := range c.members[m.shard] {
			if p != m {
				c.fn.Get(m.name, p.name).Set(faultnet.Drop)
			}
		}
		time.Sleep(dur)
		c.fn.Heal()
	case "flap": // m's links go down and up every second
		for end := time.Now().Add(dur); time.Now().Before(end); {
			c.fn.Isolate(m.name, faultnet.Hold)
			time.Sleep(min(time.Second, time.Until(end)))
			c.fn.Heal()
			time.Sleep(min(time.Second, max(0, time.Until(end))))
		}
	case "delay": // every link slow
		d := time.Duration(20+c.rng.IntN(180)) * time.Millisecond
		for _, l := range c.fn.Links() {
			l.SetDelay(d)
		}
		faultnet.Set(faultnet.Delay, c.fn.Links()...)
		time.Sleep(dur)
		c.fn.Heal()
	case "loss": // a share of the packets to and from m's ports (Raft, its links, DNS, API) lost
		p := 0.05 + 0.25*c.rng.Float64()
		ports := []string{fmt.Sprint(m.raft), fmt.Sprint(m.dns), fmt.Sprint(m.api)}
		for _, l := range c.fn.Links() {
			if l.From == m.name {
				ports = append(ports, harness.Port(l.Addr()))
			}
		}
		rule := lossRule(ports, p)
		iptables(c.t, "-A", rule)
		time.Sleep(dur)
		iptables(c.t, "-D", rule)
	case "map-change": // router target changes the member list of m's shard in the shard map, and back
		ms := c.members[m.shard]
		i := slices.Index(ms, m)
		rotated := append(slices.Clone(ms[i:]), ms[:i]...)
		if i == 0 {
			rotated = append(slices.Clone(ms[1:]), ms[0])
		}
		c.putMembers(target, m.shard, rotated)
		time.Sleep(dur)
		c.putMembers(target, m.shard, ms)
	case "migrate": // router target adds shard c, waits for the end of the migration, and removes it
		c.migrating.Store(true)
		c.direct.Lock()
		c.migrateSpare(target)
		if err := c.readRing(); err != nil {
			c.t.Error(err)
		}
		c.direct.Unlock()
		c.migrating.Store(false)
	case "disk-full":
		fill := filepath.Join(c.disks[m.name], "fill")
		fillDisk(c.t, fill)
		time.Sleep(dur)
		if err := os.Remove(fill); err != nil {
			c.t.Fatal(err)
		}
	default:
		c.t.Fatalf("unknown fault %s", kind)
	}
}

// putMembers makes members shard's member list in the shard map through
// router name's PUT /v1/shards/{shard}: the next epoch, which every router
// follows while the clients run (every member stays, in another order).
func (c *chaos) putMembers(name, shard string, members []*shardMember) {
	body := map[string][]string{"members": {}, "api": {}}
	for _, m := range members {
		body["members"] = append(body["members"], m.addr())
		body["api"] = append(body["api"], m.client().Base)
	}
	for _, r := range c.routers {
		if r.name != name {
			continue
		}
		var out struct {
			Map   *shardmap.Map `json:"map"`
			Error string        `json:"error"`
		}
		code, err := r.client().Do("PUT", "/v1/shards/"+shard, body, &out)
		if err != nil || code != http.StatusOK || out.Map == nil {
			c.t.Errorf("map-change: PUT /v1/shards/%s on %s: %d %v %s", shard, name, code, err, out.Error)
			return
		}
		c.t.Logf("map-change: shard %s at epoch %d", shard, out.Map.Epoch)
	}
}

// migrateSpare adds shard c through router name and removes it again, each
// time waiting for the migration to end (the partitions of c go back to
// where they were: the ring of a and b).
func (c *chaos) migrateSpare(name string) {
	var r *router
	for _, x := range c.routers {
		if x.name == name {
			r = x
		}
	}
	body := map[string]any{"name": "c", "members": []string{}, "api": []string{}}
	for _, m := range c.spare {
		body["members"] = append(body["members"].([]string), m.addr())
		body["api"] = append(body["api"].([]string), m.client().Base)
	}
	for _, step := range []struct{ method, path string }{{"POST", "/v1/shards"}, {"DELETE", "/v1/shards/c"}} {
		began := time.Now()
		var out map[string]any
		var b any
		if step.method == "POST" {
			b = body
		}
		if code, err := r.client().Do(step.method, step.path, b, &out); err != nil || code != http.StatusAccepted {
			c.t.Errorf("migrate: %s %s on %s: %d %v %v", step.method, step.path, name, code, err, out)
			return
		}
		done := false
		for time.Since(began) < 60*time.Second && !done {
			var v struct {
				Migrating *struct{ Error string } `json:"migrating"`
			}
			if code, err := r.client().Do("GET", "/v1/shards", nil, &v); err == nil && code == http.StatusOK && v.Migrating == nil {
				done = true
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !done {
			c.t.Errorf("migrate: %s %s on %s: the migration did not end within 60s", step.method, step.path, name)
			return
		}
		c.t.Logf("migrate: %s %s: %v", step.method, step.path, time.Since(began).Round(time.Millisecond))
	}
}

// fillDisk writes path until its file system is full.
func fillDisk(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// export returns m's zone text, "" when m cannot give it.
func export(m *shardMember) string {
	resp, err := apiClient.Get(m.client().Base + "/v1/zones/" + chaosZone)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// finish waits until the members of each shard agree, probes every key's
// final value through the log, checks the history and reports.
func (c *chaos) finish() {
	t := c.t
	c.healLeader = append(c.healLeader, c.waitLeader("the last heal"))
	var an anomalies
	final := map[string]string{}
	present := map[string]bool{}
	for _, sh := range c.shards {
		var exp string
		harness.Eventually(t, "identical exports on the members of shard "+sh, 60*time.Second, func() bool {
			ms := c.members[sh]
			e0 := export(ms[0])
			for _, m := range ms[1:] {
				if e := export(m); e0 == "" || e != e0 {
					return false
				}
			}
			exp = e0
			return true
		})
		zp := dns.NewZoneParser(strings.NewReader(exp), chaosZone, "")
		for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
			name := strings.ToLower(rr.Header().Name)
			present[name] = true
			if txt, ok := rr.(*dns.TXT); ok && c.owner[name] == sh {
				final[name] = strings.Join(txt.Txt, "")
			}
		}
		if err := zp.Err(); err != nil {
			t.Fatalf("parsing the final export of shard %s: %v", sh, err)
		}
	}
	for i, key := range allKeys {
		c.h.observe(final[key], c.h.now())
		eps := c.endpoints(key)
		ep := eps[i%len(eps)]
		call := c.h.now()
		res := update(ep.dns, key, final[key], "")
		c.h.op(100, regOp{Kind: "probe", Key: key, Old: final[key]}, res, call, c.h.now())
		if res != resOK {
			an.add("final value", "%s is %q in every export, but the probe through %s says %v", key, final[key], ep.name, res)
		}
	}
	c.mu.Lock()
	for _, n := range c.names {
		if !present[strings.ToLower(n)] {
			an.add("lost write", "%s was acknowledged but is in no export", n)
		}
	}
	acked := len(c.names)
	routerFailed := 0
	for fault, n := range c.routerReads {
		if !majorityFaults[fault] {
			routerFailed += n[1]
		}
	}
	c.mu.Unlock()
	c.h.checkLocal(&an)
	applied, dropped, left := c.h.resolve(present)
	viz := filepath.Join(os.TempDir(), fmt.Sprintf("chaos-%d.html", c.seed))
	if *chaosOut != "" {
		viz = filepath.Join(*chaosOut, t.Name()+"-history.html")
	}
	// Bounded: porcupine's search, and its memory, grow quickly on a history
	// it cannot linearize easily (gigabytes in minutes).
	res, nops, err := c.h.checkLinearizable(time.Minute, viz)
	if err != nil {
		t.Errorf("writing the visualization: %v", err)
	}
	switch res {
	case porcupine.Illegal:
		an.add("linearizability", "porcupine: the register history is not linearizable (visualization: %s)", viz)
	case porcupine.Unknown:
		t.Errorf("porcupine could not decide within a minute (%d operations)", nops)
	}

	var maxHeal time.Duration
	for _, d := range c.healLeader {
		maxHeal = max(maxHeal, d)
	}
	c.h.mu.Lock()
	counts := c.h.counts
	c.h.mu.Unlock()
	summary := map[string]any{
		"seed": c.seed, "faults": c.faults, "operations": counts, "operations_checked": nops,
		"unknown_writes":     map[string]int{"applied_by_observation": applied, "not_applied": dropped, "left_unknown": left},
		"acknowledged_names": acked, "anomalies": an.byKind,
		"max_heal_to_leader_ms": maxHeal.Milliseconds(),
	}
	if len(c.routers) > 0 {
		summary["router_reads_by_fault"] = c.routerReads // [sent, failed]
		summary["router_reads_failed_one_member_down"] = routerFailed
		summary["router_reads_failed_held_by_transaction"] = c.txBlocked
	}
	js, _ := json.MarshalIndent(summary, "", "  ")
	t.Logf("chaos summary:\n%s", js)
	if *chaosOut != "" {
		if err := os.MkdirAll(*chaosOut, 0o755); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(*chaosOut, t.Name()+"-summary.json"), js, 0o644); err != nil {
			t.Error(err)
		}
	}
	if an.total() > 0 {
		t.Errorf("%d anomalies:\n%s", an.total(), strings.Join(an.examples, "\n"))
	}
	if routerFailed > 0 {
		t.Errorf("%d queries through the router failed while no router was down; the first:\n%s", routerFailed, strings.Join(c.routerFails, "\n"))
	}
}
