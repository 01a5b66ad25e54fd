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
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/faultnet"

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
)

const chaosZone = "chaos.test."

// The registers: cas keys are written by RFC 2136 UPDATEs with
// prerequisites, put keys through the HTTP API.
var (
	casKeys = []string{"c0." + chaosZone, "c1." + chaosZone, "c2." + chaosZone}
	putKeys = []string{"p0." + chaosZone, "p1." + chaosZone, "p2." + chaosZone}
)

// chaos is one run: the members, their links, the clients' history and
// the faults injected.
type chaos struct {
	t       *testing.T
	rng     *rand.Rand
	members []*shardMember
	fn      *faultnet.Net
	disks   map[string]string // member → its tmpfs data directory
	h       *history
	seed    uint64

	faults      map[string]int
	healLeader  []time.Duration // heal → every member agrees on a leader
	sent, erred map[string]int
	mu          sync.Mutex
	names       []string // names added by acknowledged API writes
}

// TestChaosShard runs the chaos suite on one shard of three members.
func TestChaosShard(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (replay: -chaos.seed=%d), duration %v", seed, seed, *chaosDuration)
	wd := harness.Workdir(t)
	fn := faultnet.New()
	t.Cleanup(fn.Close)
	c := &chaos{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x63686173)), fn: fn, h: newHistory(),
		faults: map[string]int{}, disks: map[string]string{}}
	for _, m := range []string{"a1", "a2", "a3"} {
		c.disks[m] = smallDataDir(t, filepath.Join(wd, "data", m), 64<<20)
	}
	s := startShardedNet(t, wd, 1, 3, []string{chaosZone}, fn)
	c.members = s.members["a"]
	putZone(t, c.members[0].client(), chaosZone, smallZone(chaosZone, 3))
	for _, m := range c.members {
		harness.Eventually(t, "the zone on "+m.name, 20*time.Second, func() bool { return harness.HasA(m.addr(), "h1."+chaosZone, "198.51.100.1") })
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.members {
				t.Logf("%s log (last 3 KiB):\n%s", m.name, tail(m.p.Logs(), 3072))
			}
		}
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
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

	c.inject(time.Now().Add(*chaosDuration))
	time.Sleep(2 * time.Second) // clients go on with every fault healed
	close(stop)
	wg.Wait()
	c.finish()
}

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

// readTXT asks m for key's TXT RRset: its one value, "" for none.
func readTXT(m *shardMember, key string) (string, error) {
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion(key, dns.TypeTXT)
	r, _, err := c.Exchange(q, m.addr())
	if err != nil {
		return "", err
	}
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

// localRead reads key from m and records it.
func (c *chaos) localRead(m *shardMember, key string) (string, bool) {
	call := c.h.now()
	v, err := readTXT(m, key)
	if err != nil {
		c.h.count("read error")
		return "", false
	}
	c.h.read(localRead{member: m.name, key: key, value: v, call: call, ret: c.h.now()})
	return v, true
}

// update sends a signed UPDATE of the zone to m: the prerequisite that
// key's TXT RRset is old ("": that it does not exist) and, with val set,
// the RRset replaced by val.
func update(m *shardMember, key, old, val string) regResult {
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
	r, _, err := cl.Exchange(u, m.addr())
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

// casWriter reads a key from a member and writes the next version with a
// cas through a member, until stop.
func (c *chaos) casWriter(stop <-chan struct{}, id int) {
	rng := clientRand()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		key := pick(rng, casKeys)
		old, ok := c.localRead(pick(rng, c.members), key)
		if !ok {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ver := casVersion(old)
		if ver < 0 {
			c.t.Errorf("%s holds %q, which no cas wrote", key, old)
			return
		}
		m := pick(rng, c.members)
		val := casValue(ver+1, id, seq)
		call := c.h.now()
		res := update(m, key, old, val)
		ret := c.h.now()
		c.h.op(id, regOp{Kind: "cas", Key: key, Old: old, New: val}, res, call, ret)
		if res == resOK {
			c.h.ack(ackedWrite{member: m.name, key: key, value: val, ord: ver + 1, ret: ret}, false)
		}
	}
}

// prober reads a key from one member and checks the value through the log
// on another (an UPDATE with the prerequisite only), until stop.
func (c *chaos) prober(stop <-chan struct{}, id int) {
	rng := clientRand()
	for {
		select {
		case <-stop:
			return
		default:
		}
		key := pick(rng, append(slices.Clone(casKeys), putKeys...))
		v, ok := c.localRead(pick(rng, c.members), key)
		if !ok {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		call := c.h.now()
		res := update(pick(rng, c.members), key, v, "")
		c.h.op(id, regOp{Kind: "probe", Key: key, Old: v}, res, call, c.h.now())
	}
}

// apiClient bounds API calls, so that a paused member does not hold a
// client for long.
var apiClient = &http.Client{Timeout: 8 * time.Second}

// putWriter replaces a put key's value through a member's API, adding a
// new name in the same change, until stop.
func (c *chaos) putWriter(stop <-chan struct{}, id int) {
	rng := clientRand()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		key := pick(rng, putKeys)
		m := pick(rng, c.members)
		val := fmt.Sprintf("put c=%d s=%d", id, seq)
		name := fmt.Sprintf("n%d-%d.%s", id, seq, chaosZone)
		body, _ := json.Marshal(map[string]any{
			"delete": []any{map[string]string{"name": key, "type": "TXT"}},
			"add":    []string{fmt.Sprintf("%s 60 IN TXT %q", key, val), name + " 60 IN A 192.0.2.7"},
		})
		call := c.h.now()
		var out struct{ Serial uint32 }
		res := resUnknown
		resp, err := apiClient.Post(m.client().Base+"/v1/zones/"+chaosZone+"/records", "application/json", bytes.NewReader(body))
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && json.Unmarshal(data, &out) == nil {
				res = resOK
			} else if resp.StatusCode/100 == 4 {
				c.t.Errorf("API write refused: %d %s", resp.StatusCode, data)
				return
			}
		}
		ret := c.h.now()
		c.h.op(id, regOp{Kind: "put", Key: key, New: val}, res, call, ret)
		if res == resOK {
			c.h.ack(ackedWrite{member: m.name, key: key, value: val, ord: int64(out.Serial), ret: ret}, true)
			c.mu.Lock()
			c.names = append(c.names, name)
			c.mu.Unlock()
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// localReader reads random keys from random members, until stop.
func (c *chaos) localReader(stop <-chan struct{}) {
	rng := clientRand()
	keys := append(slices.Clone(casKeys), putKeys...)
	for {
		select {
		case <-stop:
			return
		default:
		}
		if _, ok := c.localRead(pick(rng, c.members), pick(rng, keys)); !ok {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(2 * time.Millisecond) // bounds the history of a long run

	}
}

// memberStatus is what GET /v1/cluster says.
type memberStatus struct {
	ID      uint64
	Leader  uint64
	Commit  uint64
	Applied uint64
	Ready   bool
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

// leader returns the member every member names as leader, or nil.
func (c *chaos) leader() *shardMember {
	var id uint64
	for _, m := range c.members {
		st, err := status(m)
		if err != nil || st.Leader == 0 || id != 0 && st.Leader != id {
			return nil
		}
		id = st.Leader
	}
	for _, m := range c.members {
		if m.name[1:] == fmt.Sprint(id) {
			return m
		}
	}
	return nil
}

// waitLeader waits until every member names the same leader and returns
// how long that took; the test fails after 30s.
func (c *chaos) waitLeader(what string) time.Duration {
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		if c.leader() != nil {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader 30s after %s", what)
	return 0
}

// target picks the member a fault hits: the leader with probability
// leaderBias (when there is one), else any member.
func (c *chaos) target(leaderBias float64) *shardMember {
	leaderFirst, other := c.rng.Float64() < leaderBias, pick(c.rng, c.members) // both drawn: the schedule replays
	if leaderFirst {
		if l := c.leader(); l != nil {
			return l
		}
	}
	return other
}

// chaosFaults are the fault kinds and their weights.
var chaosFaults = []struct {
	kind   string
	weight int
}{
	{"kill", 4}, {"pause", 2}, {"isolate-hold", 2}, {"isolate-drop", 1}, {"isolate-reset", 1},
	{"leader-oneway", 1}, {"flap", 1}, {"delay", 1}, {"disk-full", 1},
}

// inject draws faults until the deadline: each lasts 0.5-5s and is healed,
// then the run waits for a leader and pauses 0.5-2.5s.
func (c *chaos) inject(until time.Time) {
	total := 0
	for _, f := range chaosFaults {
		total += f.weight
	}
	for n := 1; time.Now().Before(until); n++ {
		w := c.rng.IntN(total)
		kind := ""
		for _, f := range chaosFaults {
			if w -= f.weight; w < 0 {
				kind = f.kind
				break
			}
		}
		dur := 500*time.Millisecond + time.Duration(c.rng.IntN(4500))*time.Millisecond
		bias := 0.5
		if kind == "leader-oneway" {
			bias = 1
		}
		gap := 500*time.Millisecond + time.Duration(c.rng.IntN(2000))*time.Millisecond
		if kind == "disk-full" && c.disks["a1"] == "" {
			kind = "kill"
		}
		m := c.target(bias)
		c.t.Logf("fault %d at %v: %s %s for %v", n, time.Duration(c.h.now()).Round(time.Millisecond), kind, m.name, dur)
		c.fault(kind, m, dur)
		c.faults[kind]++
		c.healLeader = append(c.healLeader, c.waitLeader(fmt.Sprintf("healing %s of %s", kind, m.name)))
		time.Sleep(gap)
	}
}

// fault injects one fault of kind into m for dur and heals it.
func (c *chaos) fault(kind string, m *shardMember, dur time.Duration) {
	switch kind {
	case "kill":
		m.p.Kill()
		time.Sleep(dur)
		m.p.Restart()
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
		for _, p := range c.members {
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

// finish waits until the members agree, probes every key's final value
// through the log, checks the history and reports.
func (c *chaos) finish() {
	t := c.t
	c.healLeader = append(c.healLeader, c.waitLeader("the last heal"))
	var exp string
	harness.Eventually(t, "identical exports on every member", 60*time.Second, func() bool {
		e0 := export(c.members[0])
		for _, m := range c.members[1:] {
			if e := export(m); e0 == "" || e != e0 {
				return false
			}
		}
		exp = e0
		return true
	})
	final := map[string]string{}
	zp := dns.NewZoneParser(strings.NewReader(exp), chaosZone, "")
	present := map[string]bool{}
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		present[strings.ToLower(rr.Header().Name)] = true
		if txt, ok := rr.(*dns.TXT); ok {
			final[strings.ToLower(txt.Hdr.Name)] = strings.Join(txt.Txt, "")
		}
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("parsing the final export: %v", err)
	}
	var an anomalies
	for i, key := range append(slices.Clone(casKeys), putKeys...) {
		m := c.members[i%len(c.members)]
		call := c.h.now()
		res := update(m, key, final[key], "")
		c.h.op(100, regOp{Kind: "probe", Key: key, Old: final[key]}, res, call, c.h.now())
		if res != resOK {
			an.add("final value", "%s is %q in every export, but the probe through %s says %v", key, final[key], m.name, res)
		}
	}
	c.mu.Lock()
	for _, n := range c.names {
		if !present[strings.ToLower(n)] {
			an.add("lost write", "%s was acknowledged but is in no export", n)
		}
	}
	acked := len(c.names)
	c.mu.Unlock()
	c.h.checkLocal(&an)
	viz := filepath.Join(os.TempDir(), fmt.Sprintf("chaos-%d.html", c.seed))
	if *chaosOut != "" {
		viz = filepath.Join(*chaosOut, "chaos-history.html")
	}
	res, nops, err := c.h.checkLinearizable(5*time.Minute, viz)
	if err != nil {
		t.Errorf("writing the visualization: %v", err)
	}
	switch res {
	case porcupine.Illegal:
		an.add("linearizability", "porcupine: the register history is not linearizable (visualization: %s)", viz)
	case porcupine.Unknown:
		t.Errorf("porcupine could not decide within 5 minutes")
	}

	var maxHeal time.Duration
	for _, d := range c.healLeader {
		maxHeal = max(maxHeal, d)
	}
	c.h.mu.Lock()
	counts := c.h.counts
	c.h.mu.Unlock()
	summary := map[string]any{
		"faults": c.faults, "operations": counts, "operations_checked": nops,
		"acknowledged_names": acked, "anomalies": an.byKind,
		"max_heal_to_leader_ms": maxHeal.Milliseconds(),
	}
	js, _ := json.MarshalIndent(summary, "", "  ")
	t.Logf("chaos summary:\n%s", js)
	if *chaosOut != "" {
		if err := os.WriteFile(filepath.Join(*chaosOut, "chaos-summary.json"), js, 0o644); err != nil {
			t.Error(err)
		}
	}
	if an.total() > 0 {
		t.Errorf("%d anomalies:\n%s", an.total(), strings.Join(an.examples, "\n"))
	}
}
