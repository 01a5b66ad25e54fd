package integration

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/miekg/dns"
)

// rollingLoad queries and writes through a router without pause, as the
// clients of a deployment do while an operator restarts its members, and
// records every failure and the longest write.
type rollingLoad struct {
	router string
	api    harness.API
	stop   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	queries  int
	qfail    []string
	acked    []string
	wfail    []string
	slowest  time.Duration
	slowName string
	writes   []span // start and end of every acknowledged write
}

type span struct{ start, end time.Time }

// seededA are names of the example zone and the address each has.
var seededA = map[string]string{
	"www.example.org.": "192.0.2.10", "mail.example.org.": "192.0.2.25", "ns1.example.org.": "192.0.2.53",
	"ns2.example.org.": "192.0.2.54", "sip.example.org.": "192.0.2.60", "example.org.": "192.0.2.1",
	"a1.devices.example.org.": "198.51.100.1", "a2.devices.example.org.": "198.51.100.2",
	"x.dev.example.org.": "192.0.2.99",
}

// startRollingLoad runs queriers that each ask the router for a seeded or
// already written name every 2ms (one attempt, 2s timeout: a client's
// first try), and writers that each add a new name through the router's API,
// and as many that do by UPDATE, as soon as their last one was answered.
func startRollingLoad(router string, api harness.API, queriers, writers int) *rollingLoad {
	l := &rollingLoad{router: router, api: api, stop: make(chan struct{})}
	for q := range queriers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.query(q)
		}()
	}
	for w := range writers {
		l.wg.Add(2)
		go func() {
			defer l.wg.Done()
			l.write(w)
		}()
		go func() {
			defer l.wg.Done()
			l.update(w)
		}()
	}
	return l
}

// update adds a new name by RFC 2136 UPDATE (TCP, signed with the example
// key) through the router as soon as the last one was answered.
func (l *rollingLoad) update(w int) {
	for i := 0; !l.stopped(5 * time.Millisecond); i++ {
		name := fmt.Sprintf("upd%d-%d.example.org.", w, i)
		m := newUpdate()
		rr, _ := dns.NewRR(name + " 60 IN A 192.0.2.1")
		m.Insert([]dns.RR{rr})
		if w%2 == 1 {
			m.SetEdns0(1232, false) // one writer as nsupdate (no EDNS), one with
		}
		start := time.Now()
		r, err := exchangeUpdate(m, "tcp", l.router)
		end := time.Now()
		l.mu.Lock()
		if took := end.Sub(start); took > l.slowest {
			l.slowest, l.slowName = took, fmt.Sprintf("%s at %s", name, start.Format("15:04:05.000"))
		}
		switch {
		case err != nil:
			l.wfail = append(l.wfail, fmt.Sprintf("%s UPDATE %s: %v", start.Format("15:04:05.000"), name, err))
		case r.Rcode != dns.RcodeSuccess:
			l.wfail = append(l.wfail, fmt.Sprintf("%s UPDATE %s: %s %s\n%v", start.Format("15:04:05.000"), name, dns.RcodeToString[r.Rcode], extendedError(r), r))
		default:
			l.acked = append(l.acked, name)
			l.writes = append(l.writes, span{start, end})
		}
		l.mu.Unlock()
	}
}

func (l *rollingLoad) stopped(pause time.Duration) bool {
	select {
	case <-l.stop:
		return true
	case <-time.After(pause):
		return false
	}
}

func (l *rollingLoad) query(q int) {
	seeded := make([]string, 0, len(seededA))
	for name := range seededA {
		seeded = append(seeded, name)
	}
	slices.Sort(seeded)
	c := &dns.Client{Timeout: 2 * time.Second}
	for i := 0; !l.stopped(2 * time.Millisecond); i++ {
		name := seeded[(i+q)%len(seeded)]
		want := seededA[name]
		l.mu.Lock()
		if i%2 == 1 && len(l.acked) > 0 {
			name, want = l.acked[rand.IntN(len(l.acked))], "192.0.2.1"
		}
		l.mu.Unlock()
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.RecursionDesired = false
		r, _, err := c.Exchange(m, l.router)
		problem := ""
		switch {
		case err != nil:
			problem = err.Error()
		case r.Rcode != dns.RcodeSuccess:
			problem = dns.RcodeToString[r.Rcode]
		case !hasAddress(r, want):
			problem = fmt.Sprintf("answer %v lacks %s", r.Answer, want)
		}
		l.mu.Lock()
		l.queries++
		if problem != "" {
			l.qfail = append(l.qfail, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05.000"), name, problem))
		}
		l.mu.Unlock()
	}
}

func hasAddress(r *dns.Msg, ip string) bool {
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok && a.A.String() == ip {
			return true
		}
	}
	return false
}

func (l *rollingLoad) write(w int) {
	for i := 0; !l.stopped(5 * time.Millisecond); i++ {
		name := fmt.Sprintf("roll%d-%d.example.org.", w, i)
		start := time.Now()
		code, err := l.api.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.1"}}, nil)
		end := time.Now()
		l.mu.Lock()
		if took := end.Sub(start); took > l.slowest {
			l.slowest, l.slowName = took, fmt.Sprintf("%s at %s", name, start.Format("15:04:05.000"))
		}
		if err != nil || code != http.StatusOK {
			l.wfail = append(l.wfail, fmt.Sprintf("%s %s: %d %v", start.Format("15:04:05.000"), name, code, err))
		} else {
			l.acked = append(l.acked, name)
			l.writes = append(l.writes, span{start, end})
		}
		l.mu.Unlock()
	}
}

// stall is the longest an acknowledged write took among those that were in
// flight at some time in [from, to].
func (l *rollingLoad) stall(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	for _, s := range l.writes {
		if !s.end.Before(from) && !s.start.After(to) {
			longest = max(longest, s.end.Sub(s.start))
		}
	}
	return longest
}

func (l *rollingLoad) end() {
	close(l.stop)
	l.wg.Wait()
}

// rollMember is a member of shard a of the sharded example.
type rollMember struct {
	proc  *harness.Proc
	id    uint64
	api   harness.API
	ready string
}

// TestRollingRestart restarts the members of shard a of the sharded
// example one after the other (SIGTERM, wait for the exit, start again,
// wait until ready), the leader among them, while clients query and write
// through the router without pause. No query may fail, every write must be
// acknowledged and then be on every member of its shard, and each member
// must exit 0. It reports the longest write stall, overall and around the
// leader's stop.
func TestRollingRestart(t *testing.T) {
	procs := harness.StartShardedExample(t, "name")
	router := harness.ShardedExampleRouter
	harness.Eventually(t, "example.org through the router", 30*time.Second, func() bool {
		return harness.HasA(router, "www.example.org", "192.0.2.10")
	})
	var members []rollMember
	for i := range 3 {
		members = append(members, rollMember{procs[i], uint64(i + 1),
			harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", 8161+i)}, fmt.Sprintf("http://127.0.0.1:%d/ready", 8261+i)})
	}
	leaderOf := func() uint64 {
		var st struct{ Leader uint64 }
		for _, m := range members {
			if code, err := m.api.Do("GET", "/v1/cluster", nil, &st); err == nil && code == http.StatusOK && st.Leader != 0 {
				return st.Leader
			}
		}
		return 0
	}

	load := startRollingLoad(router, harness.API{Base: "http://127.0.0.1:8153"}, 3, 2)
	stopped := false
	defer func() {
		if !stopped {
			load.end()
		}
	}()
	harness.Eventually(t, "writes before the roll", 20*time.Second, func() bool {
		load.mu.Lock()
		defer load.mu.Unlock()
		return len(load.acked) >= 50
	})
	type stop struct {
		id                           uint64
		leader                       bool
		start, exited, started, done time.Time
	}
	var stops []stop
	for _, m := range members {
		st := stop{id: m.id, leader: leaderOf() == m.id, start: time.Now()}
		if err := m.proc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code, err := m.proc.Wait(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st.exited = time.Now()
		if code != 0 {
			t.Errorf("member a%d exited with %d after SIGTERM:\n%s", m.id, code, m.proc.Logs())
		}
		time.Sleep(time.Second) // the shard runs on two members meanwhile
		st.started = time.Now()
		m.proc.Restart()
		harness.WaitReady(t, m.ready, m.proc)
		st.done = time.Now()
		stops = append(stops, st)
		time.Sleep(time.Second)
	}
	load.end()
	stopped = true
	leaderSeen := false
	var leaderStall time.Duration
	for _, st := range stops {
		// The writes in flight from the SIGTERM until a second after the exit.
		stall := load.stall(st.start, st.exited.Add(time.Second))
		if st.leader {
			leaderSeen, leaderStall = true, stall
			if m := members[st.id-1]; !strings.Contains(m.proc.Logs(), fmt.Sprintf("member %d handed leadership to member", st.id)) {
				t.Errorf("member a%d stopped while leading without handing off leadership", st.id)
			}
		}
		t.Logf("member a%d (leader: %v): SIGTERM at %s, exit after %v, longest write around it %v; started at %s, ready after %v, longest write meanwhile %v",
			st.id, st.leader, st.start.Format("15:04:05.000"), st.exited.Sub(st.start).Round(time.Millisecond), stall.Round(time.Millisecond),
			st.started.Format("15:04:05.000"), st.done.Sub(st.started).Round(time.Millisecond), load.stall(st.started, st.done).Round(time.Millisecond))
	}
	if !leaderSeen {
		t.Error("the roll stopped no leader: the group's leader was never one of the members asked")
	}
	defer func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s log:\n%s", p.Name, p.Logs())
			}
		}
	}()

	t.Logf("%d queries, %d failed; %d writes acknowledged, %d failed; longest write %v (%s); longest write around the leader's stop %v",
		load.queries, len(load.qfail), len(load.acked), len(load.wfail), load.slowest.Round(time.Millisecond), load.slowName, leaderStall.Round(time.Millisecond))
	for i, f := range load.qfail {
		if i == 10 {
			break
		}
		t.Errorf("failed query: %s", f)
	}
	for i, f := range load.wfail {
		if i == 10 {
			break
		}
		t.Errorf("failed write: %s", f)
	}
	// Every acknowledged write is answered, and the members of shard a
	// hold one and the same zone.
	for _, name := range load.acked {
		if !harness.HasA(router, name, "192.0.2.1") {
			t.Errorf("acknowledged write %s is not answered by the router", name)
		}
	}
	harness.Eventually(t, "the members of shard a agree", 20*time.Second, func() bool {
		var first string
		for i, m := range members {
			var text string
			if code, err := m.api.Do("GET", "/v1/zones/example.org", nil, &text); err != nil || code != http.StatusOK {
				return false
			}
			if i == 0 {
				first = text
			} else if text != first {
				return false
			}
		}
		return true
	})
}
