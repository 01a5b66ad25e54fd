// Command qload sends DNS queries at a steady rate and reports their
// latency and their failures: the load of bench/migrate.sh, whose figures
// are the p99 latency during a migration against the p99 before it.
//
// It reads a dnsperf query file (lines "name type", bench/zonegen's) and
// asks its queries in order, round robin, over UDP at -rate queries per
// second from -c sockets, for -d or until SIGINT or SIGTERM, whichever
// comes first. A query without an answer within -timeout counts as lost;
// SERVFAIL and REFUSED count as failed; with -slow, each query slower than
// that is printed to stderr (time, name, type, rcode, latency). Output, one
// line:
//
//	queries=N answered=N lost=N servfail=N refused=N p50_ms=F p99_ms=F max_ms=F
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	var (
		server  = flag.String("server", "127.0.0.1:53", "server address")
		file    = flag.String("queries", "", "dnsperf query file (required)")
		rate    = flag.Float64("rate", 1000, "queries per second, all sockets together")
		conc    = flag.Int("c", 8, "sockets (each asks one query at a time)")
		dur     = flag.Duration("d", time.Minute, "how long to run at most")
		timeout = flag.Duration("timeout", 2*time.Second, "how long a query waits for its answer")
		maxQ    = flag.Int("max", 10_000_000, "queries at most")
		slow    = flag.Duration("slow", 0, "print each query answered slower than this to stderr (0: none)")
	)
	flag.Parse()
	qs, err := readQueries(*file)
	if err != nil || len(qs) == 0 || *rate <= 0 || *conc < 1 {
		fmt.Fprintf(os.Stderr, "qload: -queries with queries, -rate > 0 and -c >= 1 needed (%v)\n", err)
		os.Exit(2)
	}
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sig:
		case <-time.After(*dur):
		}
		close(stop)
	}()

	var (
		next                    atomic.Int64
		lost, servfail, refused atomic.Int64
		mu                      sync.Mutex
		lat                     []time.Duration
		wg                      sync.WaitGroup
		interval                = time.Duration(float64(time.Second) * float64(*conc) / *rate)
	)
	for w := 0; w < *conc; w++ {
		wg.Go(func() {
			c := &dns.Client{Net: "udp", Timeout: *timeout, UDPSize: 4096}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				i := next.Add(1) - 1
				if i >= int64(*maxQ) {
					return
				}
				q := qs[i%int64(len(qs))]
				m := new(dns.Msg)
				m.SetQuestion(q.name, q.qtype)
				m.RecursionDesired = false
				began := time.Now()
				r, _, err := c.Exchange(m, *server)
				switch {
				case err != nil:
					lost.Add(1)
				case r.Rcode == dns.RcodeServerFailure:
					servfail.Add(1)
				case r.Rcode == dns.RcodeRefused:
					refused.Add(1)
				default:
					mine = append(mine, time.Since(began))
				}
				if took := time.Since(began); *slow > 0 && took > *slow {
					rcode := "lost"
					if r != nil {
						rcode = dns.RcodeToString[r.Rcode]
					}
					fmt.Fprintf(os.Stderr, "slow %s %s %s %s %v\n", began.Format("15:04:05.000"), q.name, dns.TypeToString[q.qtype], rcode, took.Round(time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	fmt.Printf("queries=%d answered=%d lost=%d servfail=%d refused=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
		int64(len(lat))+lost.Load()+servfail.Load()+refused.Load(), len(lat), lost.Load(), servfail.Load(), refused.Load(), pct(0.5), pct(0.99), pct(1))
}

type query struct {
	name  string
	qtype uint16
}

// readQueries reads a dnsperf query file.
func readQueries(path string) ([]query, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var qs []query
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], ";") {
			continue
		}
		t, ok := dns.StringToType[strings.ToUpper(fields[1])]
		if !ok {
			return nil, fmt.Errorf("unknown type %q", fields[1])
		}
		qs = append(qs, query{dns.Fqdn(fields[0]), t})
	}
	return qs, sc.Err()
}
