// Command updates drives a DNS server with TSIG-signed RFC 2136 UPDATE
// messages and reports committed updates per second and their latencies;
// beside that load it can measure query latency on a server, idle and
// under the updates.
//
// -c clients (goroutines, each with its own socket: UDP, or one TCP
// connection with -tcp) send UPDATEs for -d, each adding one A record with a
// name no other update uses (PREFIX-CLIENT-SEQ.ZONE), and wait for the answer
// before sending the next. Only NOERROR answers count as committed; every
// other answer, timeout or error is counted by kind.
//
// With -query ADDR and -qnames FILE (lines "NAME TYPE", as bench/zonegen
// writes for dnsperf), -qworkers UDP sockets send -qrate queries per second
// in all to ADDR, at that rate whatever the answers do (an open loop): for
// -idle before the updates start ("idle"), then while they run ("load").
// Latency is measured from sending a query to its answer; answers other
// than NOERROR and NXDOMAIN are errors, queries unanswered a second after
// the phase are lost.
//
// With -verify ADDR[,ADDR...], after the run every -nverify-th acknowledged
// name is asked for at each address (waiting up to 30s for replication): a
// missing one fails the run.
//
// Output, key=value lines:
//
//	updates clients=64 sent=N ok=N seconds=F updates_per_s=F p50_ms=F p99_ms=F max_ms=F errors=KIND:N,...
//	queries phase=idle n=N qps=F p50_ms=F p99_ms=F p999_ms=F max_ms=F errors=N lost=N
//	queries phase=load ...
//	verify checked=N missing=N
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

func main() {
	var (
		server   = flag.String("server", "127.0.0.1:1053", "address the UPDATEs go to")
		zone     = flag.String("zone", "example.org", "zone to update")
		keyName  = flag.String("key", "update.", "TSIG key name")
		secret   = flag.String("secret", "", "TSIG secret (base64); or -keyfile")
		keyFile  = flag.String("keyfile", "", "BIND key file with the TSIG key (key name, algorithm, secret)")
		alg      = flag.String("alg", dns.HmacSHA256, "TSIG algorithm")
		clients  = flag.Int("c", 64, "concurrent clients")
		dur      = flag.Duration("d", 10*time.Second, "how long the updates run")
		prefix   = flag.String("prefix", "u", "first label prefix of the names added")
		tcp      = flag.Bool("tcp", false, "send UPDATEs over TCP (one connection per client)")
		timeout  = flag.Duration("timeout", 10*time.Second, "how long to wait for one answer")
		qaddr    = flag.String("query", "", "address to measure query latency at; none when empty")
		qnames   = flag.String("qnames", "", "file of NAME TYPE lines to ask for (required with -query)")
		qrate    = flag.Int("qrate", 2000, "queries per second in all")
		qworkers = flag.Int("qworkers", 4, "query workers")
		idle     = flag.Duration("idle", 5*time.Second, "query-only phase before the updates")
		verify   = flag.String("verify", "", "comma-separated addresses to check acknowledged names at after the run")
		nverify  = flag.Int("nverify", 50, "check every n-th acknowledged name")
		span     = flag.String("span", "", "craftroute API base URL: each UPDATE adds two names, placed on shards by the router's ring (see -pairs)")
		pairs    = flag.String("pairs", "cross", "with -span: cross (the two names on two shards: a transaction) or single (both on one shard)")
		npool    = flag.Int("pool", 4000, "with -span: names found per shard before the run (one UPDATE uses two)")
		inflight = flag.Int("qinflight", 0, "with -span and -query: percent of the queries (during the updates) that ask for a name of an UPDATE in flight, which a transaction holds")
	)
	flag.Parse()
	if *keyFile != "" {
		name, a, s, err := readKeyFile(*keyFile)
		if err != nil {
			fatal(err)
		}
		*keyName, *alg, *secret = name, a, s
	}
	if *secret == "" || *clients < 1 || (*qaddr != "" && *qnames == "") {
		flag.Usage()
		os.Exit(2)
	}
	origin := dns.Fqdn(*zone)
	key := dns.CanonicalName(*keyName)
	algorithm := dns.Fqdn(strings.ToLower(*alg))
	var pool *namePool
	if *span != "" {
		var err error
		if pool, err = findNames(*span, origin, *prefix, *npool, *pairs == "cross"); err != nil {
			fatal(err)
		}
	}

	var q *querier
	if *qaddr != "" {
		questions, err := readQuestions(*qnames)
		if err != nil {
			fatal(err)
		}
		q = &querier{addr: *qaddr, questions: questions, rate: *qrate, workers: *qworkers}
		idleStats := q.run(*idle)
		idleStats.print("idle")
	}

	var (
		stop    atomic.Bool
		qDone   = make(chan stats, 1)
		results = make([]clientResult, *clients)
		wg      sync.WaitGroup
	)
	if q != nil {
		if pool != nil && *inflight > 0 {
			q.inflight, q.share = pool.pick, *inflight
		}
		go func() { qDone <- q.run(*dur) }()
	}
	start := time.Now()
	time.AfterFunc(*dur, func() { stop.Store(true) })
	for i := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runClient(i, *server, origin, *prefix, key, algorithm, *secret, *tcp, *timeout, &stop, pool)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	var (
		lat    []time.Duration
		sent   int
		acked  []string
		errors = map[string]int{}
	)
	for _, r := range results {
		lat = append(lat, r.latencies...)
		sent += r.sent
		acked = append(acked, r.acked...)
		for k, n := range r.errors {
			errors[k] += n
		}
	}
	slices.Sort(lat)
	fmt.Printf("updates clients=%d sent=%d ok=%d seconds=%.2f updates_per_s=%.1f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f errors=%s\n",
		*clients, sent, len(acked), elapsed.Seconds(), float64(len(acked))/elapsed.Seconds(),
		ms(pct(lat, 0.50)), ms(pct(lat, 0.99)), ms(pct(lat, 1)), counts(errors))
	if q != nil {
		(<-qDone).print("load")
	}

	if *verify != "" {
		missing, checked := verifyNames(strings.Split(*verify, ","), acked, *nverify)
		fmt.Printf("verify checked=%d missing=%d\n", checked, missing)
		if missing > 0 {
			os.Exit(1)
		}
	}
}

// clientResult is what one client saw.
type clientResult struct {
	sent      int
	acked     []string // NAME IP of every NOERROR
	latencies []time.Duration
	errors    map[string]int
}

func runClient(id int, server, origin, prefix, key, alg, secret string, tcp bool, timeout time.Duration, stop *atomic.Bool, pool *namePool) clientResult {
	res := clientResult{errors: map[string]int{}}
	network := "udp"
	if tcp {
		network = "tcp"
	}
	var conn *dns.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for seq := 0; !stop.Load(); seq++ {
		if conn == nil {
			var err error
			if conn, err = dns.DialTimeout(network, server, timeout); err != nil {
				res.errors["dial"]++
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		name := fmt.Sprintf("%s-%d-%d.%s", prefix, id, seq, origin)
		ip := net.IPv4(10, byte(id), byte(seq>>8), byte(seq))
		m := new(dns.Msg)
		m.SetUpdate(origin)
		m.Insert([]dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: ip}})
		var pair []string // the names in flight (with a pool)
		if pool != nil {
			first, second, ok := pool.next()
			if !ok {
				break // the names found before the run are used up
			}
			name = first
			pair = []string{first, second}
			pool.begin(pair...)
			m.Ns = nil
			m.Insert([]dns.RR{
				&dns.A{Hdr: dns.RR_Header{Name: first, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: ip},
				&dns.A{Hdr: dns.RR_Header{Name: second, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: ip},
			})
		}
		m.SetTsig(key, alg, 300, time.Now().Unix())
		t0 := time.Now()
		r, err := exchange(conn, m, secret, timeout)
		d := time.Since(t0)
		if pair != nil {
			pool.end(pair...)
		}
		res.sent++
		switch {
		case err != nil && r == nil:
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				res.errors["timeout"]++
			} else {
				res.errors["error"]++
			}
			conn.Close() // a late answer must not be read as the next one
			conn = nil
		case r.Rcode != dns.RcodeSuccess:
			res.errors[dns.RcodeToString[r.Rcode]]++
		case err != nil: // NOERROR whose TSIG does not verify
			res.errors["tsig"]++
		default:
			res.latencies = append(res.latencies, d)
			res.acked = append(res.acked, name+" "+ip.String())
		}
	}
	return res
}

// exchange signs m, sends it on conn and returns the answer with the same
// id. It signs and verifies itself: a dns.Conn that signs carries the MAC of
// one exchange into the next message, which suits a transfer's messages but
// not independent requests on one socket.
func exchange(conn *dns.Conn, m *dns.Msg, secret string, timeout time.Duration) (*dns.Msg, error) {
	buf, mac, err := dns.TsigGenerate(m, secret, "", false)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(buf); err != nil {
		return nil, err
	}
	for {
		raw, err := conn.ReadMsgHeader(nil)
		if err != nil {
			return nil, err
		}
		r := new(dns.Msg)
		if err := r.Unpack(raw); err != nil {
			return nil, err
		}
		if r.Id != m.Id {
			continue // a late answer to an earlier request
		}
		if r.IsTsig() == nil {
			return r, fmt.Errorf("unsigned answer")
		}
		return r, dns.TsigVerify(raw, secret, mac, false)
	}
}

// querier sends queries at a fixed rate, whether or not earlier ones were
// answered (an open loop, as dnsperf -Q does: a slow server does not slow
// the queries down), and measures each one from sending to its answer.
type querier struct {
	addr      string
	questions []dns.Question
	rate      int
	workers   int
	// inflight, when set, names an UPDATE in flight: share percent of the
	// queries ask for one (type A) instead of the next question.
	inflight func() string
	share    int
}

// stats are the figures of one query phase.
type stats struct {
	lat    []time.Duration
	errors int // answers other than NOERROR and NXDOMAIN
	lost   int // no answer within a second after the phase
	secs   float64
}

func (s stats) print(phase string) {
	slices.Sort(s.lat)
	fmt.Printf("queries phase=%s n=%d qps=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f errors=%d lost=%d\n",
		phase, len(s.lat), float64(len(s.lat))/s.secs, ms(pct(s.lat, 0.50)), ms(pct(s.lat, 0.99)),
		ms(pct(s.lat, 0.999)), ms(pct(s.lat, 1)), s.errors, s.lost)
}

// run sends queries for d: each worker has its own socket, sends at
// rate/workers per second and reads the answers beside.
func (q *querier) run(d time.Duration) stats {
	interval := time.Duration(int64(time.Second) * int64(q.workers) / int64(max(q.rate, 1)))
	var (
		mu  sync.Mutex
		all stats
		wg  sync.WaitGroup
	)
	start := time.Now()
	for w := range q.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := q.worker(w, start, d, interval)
			mu.Lock()
			all.lat = append(all.lat, st.lat...)
			all.errors += st.errors
			all.lost += st.lost
			mu.Unlock()
		}()
	}
	wg.Wait()
	all.secs = d.Seconds()
	return all
}

func (q *querier) worker(w int, start time.Time, d, interval time.Duration) stats {
	var st stats
	conn, err := net.Dial("udp", q.addr)
	if err != nil {
		st.lost++
		return st
	}
	// sent[id] is when the query with that id left, in ns since start; 0:
	// none outstanding. Ids are the query's sequence number: at these rates
	// 65536 of them outlast any answer.
	var sent [65536]atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65535)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return // closed
			}
			now := time.Since(start)
			r := new(dns.Msg)
			if r.Unpack(buf[:n]) != nil {
				continue
			}
			t := sent[r.Id].Swap(0)
			if t == 0 {
				continue
			}
			if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
				st.errors++
				continue
			}
			st.lat = append(st.lat, now-time.Duration(t))
		}
	}()
	writeErrors := 0
	next := start.Add(time.Duration(w) * interval / time.Duration(q.workers))
	for i := w; ; i += q.workers {
		if now := time.Now(); next.After(now) {
			time.Sleep(next.Sub(now))
		}
		if time.Since(start) >= d {
			break
		}
		next = next.Add(interval)
		id := uint16(i / q.workers)
		m := new(dns.Msg)
		m.Id = id
		m.Question = []dns.Question{q.questions[i%len(q.questions)]}
		if q.inflight != nil && (i/q.workers)%100 < q.share {
			if name := q.inflight(); name != "" {
				m.Question = []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}
			}
		}
		wire, err := m.Pack()
		if err != nil {
			continue
		}
		sent[id].Store(int64(time.Since(start)) | 1) // never 0
		if _, err := conn.Write(wire); err != nil {
			writeErrors++
			sent[id].Store(0)
		}
	}
	time.Sleep(time.Second) // the last answers
	conn.Close()
	<-done
	st.errors += writeErrors
	for i := range sent {
		if sent[i].Load() != 0 {
			st.lost++
		}
	}
	return st
}

// verifyNames asks each address for every n-th acknowledged name and
// returns how many were missing and how many were checked.
func verifyNames(addrs, acked []string, n int) (missing, checked int) {
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range addrs {
		for i := 0; i < len(acked); i += max(n, 1) {
			name, ip, _ := strings.Cut(acked[i], " ")
			checked++
			for {
				m := new(dns.Msg)
				m.SetQuestion(name, dns.TypeA)
				r, _, err := c.Exchange(m, addr)
				if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1 && r.Answer[0].(*dns.A).A.String() == ip {
					break
				}
				if time.Now().After(deadline) {
					fmt.Fprintf(os.Stderr, "updates: %s %s missing at %s\n", name, ip, addr)
					missing++
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	return missing, checked
}

// readQuestions reads NAME TYPE lines.
func readQuestions(path string) ([]dns.Question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var qs []dns.Question
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 2 {
			continue
		}
		t, ok := dns.StringToType[strings.ToUpper(fields[1])]
		if !ok {
			return nil, fmt.Errorf("%s: unknown type %q", path, fields[1])
		}
		qs = append(qs, dns.Question{Name: dns.Fqdn(fields[0]), Qtype: t, Qclass: dns.ClassINET})
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("%s: no questions", path)
	}
	return qs, s.Err()
}

// readKeyFile reads a BIND key file: key "NAME" { algorithm ALG; secret "S"; };
func readKeyFile(path string) (name, alg, secret string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", "", err
	}
	for _, stmt := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' || r == ';' || r == '{' }) {
		f := strings.Fields(stmt)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "key":
			name = strings.Trim(f[1], `"`)
		case "algorithm":
			alg = f[1]
		case "secret":
			secret = strings.Trim(f[1], `"`)
		}
	}
	if name == "" || alg == "" || secret == "" {
		return "", "", "", fmt.Errorf("%s: no key, algorithm and secret found", path)
	}
	return name, alg, secret, nil
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "updates:", err)
	os.Exit(1)
}
