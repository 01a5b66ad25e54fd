package integration

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/dnsdiff"

	"github.com/miekg/dns"
)

// TestShardedEquality loads a generated zone of 10,000 random names and the
// generator's hard cases into one unsharded craftstore member and, through
// a router's API, into two shards of three members split by name; every
// answer through each of two routers must equal the unsharded one. A second
// zone goes through a router in key mode "zone" onto one shard.
func TestShardedEquality(t *testing.T) {
	const (
		byName = "byname.example."
		byZone = "byzone.example."
	)
	wd := harness.Workdir(t)
	zones := []string{byName, byZone}
	s := startSharded(t, wd, 2, 3, zones,
		routerSpec{zones: []string{byName}, key: "name"},
		routerSpec{zones: []string{byName}, key: "name"},
		routerSpec{zones: []string{byZone}, key: "zone", noMap: true})
	singleAddr, single := startSingle(t, wd, zones)

	text, queries := dnsdiff.GenerateZone(byName, 11, 10000)
	putZone(t, single, byName, text)
	began := time.Now()
	putZone(t, s.routers[0].client(), byName, text)
	t.Logf("PUT of %d zone file bytes through the router took %v", len(text), time.Since(began).Round(time.Millisecond))
	total, err := zoneRecords(single, byName)
	if err != nil {
		t.Fatal(err)
	}
	counts := s.shardRecords(byName)
	t.Logf("%s: %d records unsharded; shard a holds %d, shard b %d", byName, total, counts["a"], counts["b"])
	for _, sh := range s.shards {
		if counts[sh] <= 0 || counts[sh] >= total {
			t.Errorf("expected shard %s to hold part of the %d records, got %d", sh, total, counts[sh])
		}
	}
	if counts["a"]+counts["b"] < total {
		t.Errorf("expected the shards to hold at least the %d records together, got %d + %d", total, counts["a"], counts["b"])
	}

	// One write through the router bumps the serial of one shard only; SOA
	// serials that differ from the unsharded server's are counted, not failed.
	for _, a := range []harness.API{single, s.routers[0].client()} {
		var out string
		code, err := a.Do("POST", "/v1/zones/"+byName+"/records", map[string]any{"add": []string{"bump." + byName + " 300 IN A 192.0.2.250"}}, &out)
		if err != nil || code != http.StatusOK {
			t.Fatalf("expected 200 adding bump.%s at %s, got %d %v %s", byName, a.Base, code, err, out)
		}
	}
	queries = append(queries, dnsdiff.Query{Name: "bump." + byName, Type: dns.TypeA})

	sample := sampleQueries(queries, 8)
	addrs := []string{s.routers[0].addr(), s.routers[1].addr()}
	for _, a := range addrs {
		harness.Eventually(t, "the zone through "+a, 20*time.Second, func() bool {
			r, err := harness.Query(a, byName, dns.TypeSOA)
			return err == nil && r.Rcode == dns.RcodeSuccess
		})
	}
	began = time.Now()
	res := compareWithRef(singleAddr, addrs, sample, true)
	t.Logf("%d of %d queries compared through %d routers in %v", len(sample), len(queries), len(addrs), time.Since(began).Round(time.Millisecond))
	for i, a := range addrs {
		r := res[a]
		if r.serials > 0 {
			t.Logf("router %d: %d answers differ from the unsharded one in SOA serials only", i+1, r.serials)
		}
		if r.differ > 0 {
			t.Errorf("router %d (%s): %d of %d answers differ from the unsharded server's, %s", i+1, a, r.differ, len(sample), r)
		}
	}

	// Two questions in one message: CoreDNS's server (miekg/dns's default
	// accept function) answers FORMERR before any plugin sees it; the
	// router must do what the unsharded server does.
	multi := new(dns.Msg)
	multi.SetQuestion("www."+byName, dns.TypeA)
	multi.Question = append(multi.Question, dns.Question{Name: "ns1." + byName, Qtype: dns.TypeA, Qclass: dns.ClassINET})
	c := &dns.Client{Timeout: 2 * time.Second}
	want, _, errW := c.Exchange(multi.Copy(), singleAddr)
	for _, a := range addrs {
		got, _, errG := c.Exchange(multi.Copy(), a)
		switch {
		case errW != nil || errG != nil:
			t.Errorf("two questions: expected answers, got %v (unsharded) and %v (%s)", errW, errG, a)
		case want.Rcode != got.Rcode || len(want.Answer) != len(got.Answer):
			t.Errorf("two questions: expected %s with %d answers as unsharded, got %s with %d from %s",
				dns.RcodeToString[want.Rcode], len(want.Answer), dns.RcodeToString[got.Rcode], len(got.Answer), a)
		}
	}

	// Key mode "zone": the whole zone on one shard.
	text2, queries2 := dnsdiff.GenerateZone(byZone, 5, 1000)
	putZone(t, single, byZone, text2)
	zr := s.routers[2]
	putZone(t, zr.client(), byZone, text2)
	total2, _ := zoneRecords(single, byZone)
	counts2 := s.shardRecords(byZone)
	t.Logf("%s: %d records unsharded; shard a holds %d, shard b %d (-1: none)", byZone, total2, counts2["a"], counts2["b"])
	if !(counts2["a"] == total2 && counts2["b"] == -1) && !(counts2["b"] == total2 && counts2["a"] == -1) {
		t.Errorf("expected all %d records of %s on one shard and none on the other, got a %d, b %d", total2, byZone, counts2["a"], counts2["b"])
	}
	sample2 := sampleQueries(queries2, 5)
	res2 := compareWithRef(singleAddr, []string{zr.addr()}, sample2, false)[zr.addr()]
	if res2.differ > 0 {
		t.Errorf("key mode zone: %d of %d answers differ from the unsharded server's, %s", res2.differ, len(sample2), res2)
	}
}

// TestShardedUpdate sends RFC 2136 updates through a router in key mode
// "name": one whose names live on one shard is applied and seen through
// both routers; one whose names span both shards is a transaction, applied
// on both (txn_test.go tests it further). Through a router in key mode
// "zone", an update of several names is one atomic change.
func TestShardedUpdate(t *testing.T) {
	const (
		byName = "upd.example."
		byZone = "updzone.example."
	)
	u := updaterOrGo(t, "nsupdate")
	wd := harness.Workdir(t)
	s := startSharded(t, wd, 2, 1, []string{byName, byZone},
		routerSpec{zones: []string{byName}, key: "name"},
		routerSpec{zones: []string{byName}, key: "name"},
		routerSpec{zones: []string{byZone}, key: "zone", noMap: true})
	r1, r2, rz := s.routers[0], s.routers[1], s.routers[2]
	putZone(t, r1.client(), byName, smallZone(byName, 64))
	putZone(t, rz.client(), byZone, smallZone(byZone, 8))
	signed := []string{"-k", u.keyfile}

	// One name: one shard.
	out, ok := u.send(t, wd, r1.addr(), byName, signed, "update add new."+byName+" 60 A 192.0.2.77")
	if !ok {
		t.Fatalf("expected the update through router 1 to succeed, got:\n%s", out)
	}
	for _, r := range []*router{r1, r2} {
		harness.Eventually(t, "new."+byName+" through "+r.name, 10*time.Second, func() bool { return harness.HasA(r.addr(), "new."+byName, "192.0.2.77") })
	}

	// Two names on two shards.
	onShard := func(sh, name string) bool {
		var res struct{ Records []string }
		code, err := s.members[sh][0].client().Do("GET", "/v1/zones/"+byName+"/records?name="+name, nil, &res)
		return err == nil && code == http.StatusOK && len(res.Records) > 0
	}
	var x, y string
	for i := 0; i < 64 && (x == "" || y == ""); i++ {
		name := fmt.Sprintf("h%d.%s", i, byName)
		switch {
		case x == "" && onShard("a", name) && !onShard("b", name):
			x = name
		case y == "" && onShard("b", name) && !onShard("a", name):
			y = name
		}
	}
	if x == "" || y == "" {
		t.Fatalf("expected names h0-h63 on both shards, got one on a %q, one on b %q", x, y)
	}
	before := soaSerial(r1.addr(), byName)
	out, ok = u.send(t, wd, r1.addr(), byName, signed,
		fmt.Sprintf("update add %s 60 TXT \"span\"\nupdate add %s 60 TXT \"span\"", x, y))
	if !ok {
		t.Errorf("expected an update of %s (shard a) and %s (shard b) to succeed as a transaction, got:\n%s", x, y, out)
	}
	for _, name := range []string{x, y} {
		for _, r := range []*router{r1, r2} {
			if got := harness.Rdata(t, r.addr(), name, dns.TypeTXT); got != `"span"` {
				t.Errorf("expected the TXT at %s through %s once the update was acknowledged, got %s", name, r.name, got)
			}
		}
	}
	for sh, name := range map[string]string{"a": x, "b": y} {
		var res struct{ Records []string }
		s.members[sh][0].client().Do("GET", "/v1/zones/"+byName+"/records?name="+name+"&type=TXT", nil, &res)
		if len(res.Records) != 1 {
			t.Errorf("expected the TXT at %s on shard %s, got %v", name, sh, res.Records)
		}
	}
	// One change on each of the two shards.
	if after := soaSerial(r1.addr(), byName); after != before+2 {
		t.Errorf("expected the serial %d raised by 2 by the update over two shards, got %d", before, after)
	}

	// Unsigned: refused by the router.
	m := new(dns.Msg)
	m.SetUpdate(byName)
	m.Insert([]dns.RR{mustRR(t, "unsigned."+byName+" 60 A 192.0.2.1")})
	if r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, r1.addr()); err != nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("expected an unsigned update REFUSED, got %v %v", r, err)
	}

	// Key mode zone: several names at once, atomically.
	out, ok = u.send(t, wd, rz.addr(), byZone, signed,
		fmt.Sprintf("update add m1.%s 60 A 192.0.2.81\nupdate add m2.%s 60 A 192.0.2.82\nupdate add h3.%s 60 TXT \"x\"", byZone, byZone, byZone))
	if !ok {
		t.Fatalf("expected an update of three names through the key mode zone router to succeed, got:\n%s", out)
	}
	if !harness.HasA(rz.addr(), "m1."+byZone, "192.0.2.81") || !harness.HasA(rz.addr(), "m2."+byZone, "192.0.2.82") {
		t.Errorf("expected m1 and m2 through the router once the update was acknowledged")
	}
}

// TestShardedKill sends queries through a router while members of shard a
// are killed with SIGKILL, one at a time so that the shard keeps its
// majority (a1, which then comes back, then a2): no client sees a timeout or
// a SERVFAIL, writes go on with a member dead, a member that comes back
// answers traffic again only once it has caught up, and a dead member gets
// no traffic once marked down while its probes keep failing.
func TestShardedKill(t *testing.T) {
	const origin = "kill.example."
	u := updaterOrGo(t, "nsupdate")
	wd := harness.Workdir(t)
	s := startSharded(t, wd, 2, 3, []string{origin},
		routerSpec{zones: []string{origin}, key: "name", timeout: "300ms", downFor: "2s", probe: "500ms"})
	r := s.routers[0]
	const hosts = 500
	putZone(t, r.client(), origin, smallZone(origin, hosts))
	harness.Eventually(t, "the zone through the router", 20*time.Second, func() bool { return harness.HasA(r.addr(), "h1."+origin, "198.51.100.1") })

	// The load: 4 clients, 2 s timeout, at most 30 s and 20,000 queries,
	// paced to ~500 queries/s; one in four for a missing name.
	var (
		sent, failed, wrong atomic.Int64
		mu                  sync.Mutex
		failures            []string
	)
	stop := make(chan struct{})
	pace := time.NewTicker(2 * time.Millisecond)
	defer pace.Stop()
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &dns.Client{Timeout: 2 * time.Second}
			for {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				n := sent.Add(1)
				if n > 20000 || time.Now().After(deadline) {
					return
				}
				name, rcode := fmt.Sprintf("h%d.%s", n%hosts, origin), dns.RcodeSuccess
				if n%4 == 0 {
					name, rcode = fmt.Sprintf("nx%d.%s", n, origin), dns.RcodeNameError
				}
				m := new(dns.Msg)
				m.SetQuestion(name, dns.TypeA)
				m.RecursionDesired = false
				resp, rtt, err := c.Exchange(m, r.addr())
				switch {
				case err != nil || resp.Rcode == dns.RcodeServerFailure:
					failed.Add(1)
					mu.Lock()
					if len(failures) < 10 {
						failures = append(failures, fmt.Sprintf("%s at %s after %v: %v %v", name, time.Now().Format("15:04:05.000"), rtt, err, resp))
					}
					mu.Unlock()
				case resp.Rcode != rcode:
					wrong.Add(1)
					mu.Lock()
					if len(failures) < 10 {
						failures = append(failures, fmt.Sprintf("%s: expected %s, got %s", name, dns.RcodeToString[rcode], dns.RcodeToString[resp.Rcode]))
					}
					mu.Unlock()
				}
			}
		}()
	}
	began := time.Now()
	finish := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer finish()
	mark := func(what string) {
		t.Logf("%5.1fs %s (%d queries so far)", time.Since(began).Seconds(), what, sent.Load())
	}

	a := s.members["a"]
	time.Sleep(2 * time.Second)
	mark("SIGKILL " + a[0].name)
	a[0].p.Kill()
	time.Sleep(time.Second)

	// Writes while one member of shard a is dead: a majority lives.
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("api%d.%s", i, origin)
		var out string
		t0 := time.Now()
		code, err := r.client().Do("POST", "/v1/zones/"+origin+"/records", map[string]any{"add": []string{name + " 60 IN A 192.0.2.9" + strconv.Itoa(i)}}, &out)
		if err != nil || code != http.StatusOK {
			t.Errorf("expected 200 writing %s through the router's API with %s dead, got %d %v %s", name, a[0].name, code, err, out)
		}
		if d := time.Since(t0); d > time.Second {
			mark(fmt.Sprintf("the API write of %s took %v", name, d.Round(time.Millisecond)))
		}
		name = fmt.Sprintf("nsu%d.%s", i, origin)
		t0 = time.Now()
		if out, ok := u.send(t, wd, r.addr(), origin, []string{"-k", u.keyfile}, "update add "+name+" 60 A 192.0.2.8"+strconv.Itoa(i)); !ok {
			t.Errorf("expected nsupdate of %s through the router to succeed with %s dead, got:\n%s", name, a[0].name, out)
		}
		if d := time.Since(t0); d > time.Second {
			mark(fmt.Sprintf("the nsupdate of %s took %v", name, d.Round(time.Millisecond)))
		}
	}
	var onA []string // the written names on shard a, as "name ip"
	for i := 0; i < 4; i++ {
		for j, name := range []string{fmt.Sprintf("api%d.%s", i, origin), fmt.Sprintf("nsu%d.%s", i, origin)} {
			ip := fmt.Sprintf("192.0.2.%d%d", 9-j, i)
			if !harness.HasA(r.addr(), name, ip) {
				t.Errorf("expected %s %s through the router once the write was acknowledged", name, ip)
			}
			var res struct{ Records []string }
			if code, err := a[2].client().Do("GET", "/v1/zones/"+origin+"/records?name="+name, nil, &res); err == nil && code == http.StatusOK && len(res.Records) > 0 {
				onA = append(onA, name+" "+ip)
			}
		}
	}
	mark(fmt.Sprintf("8 writes done, %d of them on shard a", len(onA)))
	if len(onA) == 0 {
		t.Errorf("expected some of the 8 written names on shard a (the shard with a dead member)")
	}

	// a[0] comes back (same data, same Corefile) and gets traffic again,
	// answers and not SERVFAILs: a member that has not caught up answers the
	// router SERVFAIL "Not Ready" and the router tries another.
	mark("restart " + a[0].name)
	a[0].p.Restart()
	back := fmt.Sprintf(`member="%s"`, a[0].addr())
	answered := func(m map[string]map[string]float64) float64 {
		return metricSum(t, m, "coredns_craftroute_requests_total", `shard="a"`, back, `rcode="NOERROR"`) +
			metricSum(t, m, "coredns_craftroute_requests_total", `shard="a"`, back, `rcode="NXDOMAIN"`)
	}
	base := answered(routerMetrics(t, r))
	harness.Eventually(t, a[0].name+" answering traffic again", 15*time.Second, func() bool {
		return answered(routerMetrics(t, r)) > base
	})
	mark(a[0].name + " answers traffic again")
	// What was written while it was dead is read through the router, from
	// whichever member of shard a it picks: the member must not answer
	// before it has caught up.
	for _, w := range onA {
		f := strings.Fields(w)
		for try := 0; try < 5; try++ {
			if !harness.HasA(r.addr(), f[0], f[1]) {
				t.Errorf("expected %s A %s (written while %s was dead) through the router once %s answers traffic again; the members say: %s",
					f[0], f[1], a[0].name, a[0].name, s.membersSay(t, f[0], dns.TypeA))
				break
			}
		}
	}

	// Then a[1] dies: the shard keeps its majority (a[0], a[2]). (Without a
	// majority no member is ready, and the router answers SERVFAIL for the
	// shard's names: TestLoneMemberNotReady.) The dead gets no more queries
	// (requests_total counts answers, so it stands still anyway), stays
	// marked down, and its probes keep failing.
	mark("SIGKILL " + a[1].name)
	a[1].p.Kill()
	time.Sleep(2500 * time.Millisecond) // > down_for
	m1 := routerMetrics(t, r)
	time.Sleep(3 * time.Second)
	m2 := routerMetrics(t, r)
	dead := a[1]
	label := fmt.Sprintf(`member="%s"`, dead.addr())
	v1 := metricSum(t, m1, "coredns_craftroute_requests_total", `shard="a"`, label)
	v2 := metricSum(t, m2, "coredns_craftroute_requests_total", `shard="a"`, label)
	if v2 != v1 {
		t.Errorf("expected no requests to dead %s after down_for, got %v then %v", dead.name, v1, v2)
	}
	if d := metricSum(t, m2, "coredns_craftroute_member_down", label); d != 1 {
		t.Errorf("expected dead %s marked down, got member_down %v", dead.name, d)
	}
	p1 := metricSum(t, m1, "coredns_craftroute_probes_total", label, `result="fail"`)
	p2 := metricSum(t, m2, "coredns_craftroute_probes_total", label, `result="fail"`)
	mark(fmt.Sprintf("%s: failed probes %v then %v over 3s", dead.name, p1, p2))
	if p2 <= p1 {
		t.Errorf("expected failed probes of dead %s to go on, got %v then %v", dead.name, p1, p2)
	}
	var live1, live2 float64
	for _, m := range []*shardMember{a[0], a[2]} {
		live := fmt.Sprintf(`member="%s"`, m.addr())
		live1 += metricSum(t, m1, "coredns_craftroute_requests_total", live)
		live2 += metricSum(t, m2, "coredns_craftroute_requests_total", live)
	}
	if live2 <= live1 {
		t.Errorf("expected requests to the live members of shard a to go on, got %v then %v", live1, live2)
	}
	// Every query to the shard is timed, failovers included.
	n1 := metricSum(t, m1, "coredns_craftroute_request_duration_seconds_count", `shard="a"`)
	n2 := metricSum(t, m2, "coredns_craftroute_request_duration_seconds_count", `shard="a"`)
	if n2 <= n1 || metricSum(t, m2, "coredns_craftroute_request_duration_seconds_bucket", `shard="a"`, `le="+Inf"`) != n2 {
		t.Errorf("expected the request duration histogram of shard a to count the queries, got counts %v then %v", n1, n2)
	}
	if d := metricSum(t, routerMetrics(t, r), "coredns_craftroute_member_down", back); d != 0 {
		t.Errorf("expected %s no longer marked down, got member_down %v", a[0].name, d)
	}
	if t.Failed() {
		// Whether, and when, the member that came back caught up.
		caught := func() bool {
			for _, w := range onA {
				f := strings.Fields(w)
				if !harness.HasA(a[0].addr(), f[0], f[1]) {
					return false
				}
			}
			return true
		}
		for end := time.Now().Add(20 * time.Second); !caught() && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		mark(fmt.Sprintf("%s answers the names written while it was dead: %v", a[0].name, caught()))
		for _, w := range onA {
			f := strings.Fields(w)
			t.Logf("after that, through the router: %s A: %s", f[0], harness.Rdata(t, r.addr(), f[0], dns.TypeA))
		}
		for _, m := range []*shardMember{a[0], a[2]} {
			var st string
			m.client().Do("GET", "/v1/cluster", nil, &st)
			t.Logf("%s: GET /v1/cluster: %s\n%s log (last 3 KiB):\n%s", m.name, st, m.name, tail(m.p.Logs(), 3072))
		}
	}
	time.Sleep(time.Second)
	finish()

	total := sent.Load()
	if total > 20000 {
		total = 20000
	}
	t.Logf("%d queries in %v: %d failed (timeout or SERVFAIL), %d with a wrong rcode", total,
		time.Since(began).Round(100*time.Millisecond), failed.Load(), wrong.Load())
	if failed.Load() > 0 || wrong.Load() > 0 {
		t.Errorf("expected every query answered right through the router, got %d failures and %d wrong rcodes; the first:\n%s",
			failed.Load(), wrong.Load(), strings.Join(failures, "\n"))
	}
}

// TestShardedExample starts Corefile.examples/sharded/ as `make
// run-sharded` does: router 1 seeds example.org through its API, split over
// both shards; both routers answer as one server would, also right after a
// write through the other, transfer the zone (the README's tour), and
// answer with a member of each shard dead.
func TestShardedExample(t *testing.T) {
	wd := harness.Workdir(t)
	var procs []*harness.Proc
	for _, m := range []string{"a1", "a2", "a3", "b1", "b2", "b3", "router", "router2"} {
		procs = append(procs, harness.Start(t, m, wd, "Corefile.examples/sharded/"+m+".Corefile"))
	}
	for _, p := range []int{8261, 8262, 8263, 8271, 8272, 8273, 8250, 8251} {
		harness.WaitReady(t, fmt.Sprintf("http://127.0.0.1:%d/ready", p), procs...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("router log:\n%s", tail(procs[6].Logs(), 4096))
			t.Logf("router2 log:\n%s", tail(procs[7].Logs(), 4096))
		}
	})
	const router, router2 = "127.0.0.1:1153", "127.0.0.1:1154"
	harness.Eventually(t, "the seeded zone through the router", 30*time.Second, func() bool { return harness.HasA(router, "www.example.org", "192.0.2.10") })
	// The tour of the README: a name and a zone written through one router
	// are answered by the other at once.
	if r, err := harness.Query(router2, "new.example.org", dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
		t.Fatalf("expected NXDOMAIN for new.example.org through router 2, got %v %v", r, err)
	}
	api1, api2 := harness.API{Base: "http://127.0.0.1:8153"}, harness.API{Base: "http://127.0.0.1:8154"}
	if code, err := api1.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"new.example.org. 300 IN A 192.0.2.99"}}, nil); err != nil || code != 200 {
		t.Fatalf("POST through router 1: %d %v", code, err)
	}
	if !harness.HasA(router2, "new.example.org", "192.0.2.99") {
		t.Error("expected router 2 to answer new.example.org at once")
	}
	putZone(t, api2, "shop.test.", "$ORIGIN shop.test.\n@ SOA ns1 hostmaster 1 7200 3600 1209600 60\n@ NS ns1\nns1 A 192.0.2.53\nwww A 192.0.2.80\n")
	if !harness.HasA(router, "www.shop.test", "192.0.2.80") {
		t.Error("expected router 1 to answer www.shop.test at once")
	}
	if code, err := api1.Do("DELETE", "/v1/zones/shop.test", nil, nil); err != nil || code != 200 {
		t.Fatalf("DELETE through router 1: %d %v", code, err)
	}
	if r, err := harness.Query(router2, "www.shop.test", dns.TypeA); err != nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("expected REFUSED for www.shop.test through router 2 after the DELETE, got %v %v", r, err)
	}
	// The tour's transfers: AXFR through router 1, then IXFR of a change
	// through router 2.
	axfr, err := axfrIn(router, "example.org.")
	if err != nil || len(axfr) < 10 || soaOf(axfr[0]) == 0 || soaOf(axfr[0]) != soaOf(axfr[len(axfr)-1]) {
		t.Fatalf("AXFR of example.org through router 1: %v, %d records", err, len(axfr))
	}
	serial := soaOf(axfr[0])
	if code, err := api1.Do("POST", "/v1/zones/example.org/records", map[string]any{"add": []string{"ixfr.example.org. 60 IN A 192.0.2.5"}}, nil); err != nil || code != 200 {
		t.Fatalf("POST through router 1: %d %v", code, err)
	}
	ixfr := digXFR(t, 1154, "example.org.", fmt.Sprintf("IXFR=%d", serial))
	if len(ixfr) != 5 || soaOf(ixfr[1]) != serial || soaOf(ixfr[0]) == serial || ixfr[3].Header().Name != "ixfr.example.org." {
		t.Errorf("IXFR from %d through router 2: expected the one change, got %v", serial, ixfr)
	}
	// The seed goes to one shard after the other.
	for _, sh := range []int{8161, 8171} {
		harness.Eventually(t, fmt.Sprintf("part of example.org on the shard with API port %d", sh), 30*time.Second, func() bool {
			n, err := zoneRecords(harness.API{Base: fmt.Sprintf("http://127.0.0.1:%d", sh)}, "example.org.")
			return err == nil && n > 0
		})
	}
	procs[0].Kill() // a1
	procs[3].Kill() // b1
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
	}{
		{"www.example.org", dns.TypeA, dns.RcodeSuccess},
		{"ftp.example.org", dns.TypeA, dns.RcodeSuccess},     // a CNAME to www
		{"x.dev.example.org", dns.TypeA, dns.RcodeSuccess},   // the wildcard
		{"devices.example.org", dns.TypeA, dns.RcodeSuccess}, // an empty non-terminal: NODATA
		{"nothing.example.org", dns.TypeA, dns.RcodeNameError},
	} {
		r, err := harness.Query(router, c.name, c.qtype)
		if err != nil || r.Rcode != c.rcode || !r.Authoritative {
			t.Errorf("expected %s for %s through the router with a1 and b1 dead, got %v %v", dns.RcodeToString[c.rcode], c.name, r, err)
		}
	}
	if r, err := harness.Query(router, "x.lab.example.org", dns.TypeA); err != nil || r.Authoritative || len(r.Ns) == 0 {
		t.Errorf("expected a referral for x.lab.example.org, got %v %v", r, err)
	}
}
