// Command writeload drives the craftstore HTTP API with record additions
// and reports committed records per second and request latencies.
//
// For every concurrency in -c and every batch size in -batch it runs one
// step: that many clients (goroutines over keep-alive connections, client i
// talking to the i-th of the -api addresses, round robin) each POST
// /v1/zones/ZONE/records in a loop with -batch new A records per request,
// for -d or until -max requests in the step, whichever comes first; with
// -rate, the clients together send at most that many records per second,
// evenly spaced (a steady load: the clients wait for their turn). Only
// answers 200 count as committed; every other answer is counted by status.
// Names are unique per run (-prefix), so every request adds records.
// SIGINT or SIGTERM ends the step in progress, which is reported.
//
// Output, one line per step:
//
//	clients batch requests ok records/s p50_ms p99_ms max_ms errors
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	var (
		apis    = flag.String("api", "http://127.0.0.1:8061", "comma-separated API base URLs; clients are spread over them")
		zone    = flag.String("zone", "example.org", "zone to add records to")
		conc    = flag.String("c", "1,16,64", "comma-separated client counts, one step each")
		batches = flag.String("batch", "1,10", "comma-separated records per request, one step each")
		dur     = flag.Duration("d", 5*time.Second, "duration of one step")
		max     = flag.Int("max", 200000, "at most this many requests in one step")
		prefix  = flag.String("prefix", "w"+strconv.FormatInt(time.Now().Unix()%100000, 10), "first label prefix of the names added")
		token   = flag.String("token", "", "bearer token of the API")
		header  = flag.Bool("header", true, "print the column header")
		rate    = flag.Float64("rate", 0, "records per second sent by all clients together (0: as fast as they go)")
	)
	flag.Parse()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; stopped.Store(true) }()
	urls := strings.Split(*apis, ",")
	cs, err := ints(*conc)
	if err != nil {
		fatal(err)
	}
	bs, err := ints(*batches)
	if err != nil {
		fatal(err)
	}
	if *header {
		fmt.Println("clients batch requests ok records/s p50_ms p99_ms max_ms errors")
	}
	step := 0
	for _, c := range cs {
		for _, b := range bs {
			step++
			l := &load{urls: urls, zone: strings.TrimSuffix(*zone, "."), clients: c, batch: b,
				dur: *dur, max: *max, rate: *rate, prefix: fmt.Sprintf("%s-s%d", *prefix, step), token: *token}
			fmt.Println(l.run())
			if stopped.Load() {
				return
			}
		}
	}
}

// stopped is set by SIGINT or SIGTERM: the step in progress ends (its line
// is printed) and no other starts.
var stopped atomic.Bool

// load is one step: a number of clients adding batch records per request.
type load struct {
	urls    []string
	zone    string
	clients int
	batch   int
	dur     time.Duration
	max     int
	rate    float64 // records/s; 0: no limit
	prefix  string
	token   string
}

// result is what one client saw.
type result struct {
	lat    []time.Duration // of the 200 answers
	errors map[string]int  // status (or transport error) -> count
	sample string          // the first error answer, for the report
}

func (l *load) run() string {
	tr := &http.Transport{MaxIdleConns: l.clients, MaxIdleConnsPerHost: l.clients, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		sent    int
		results = make([]result, l.clients)
	)
	start := time.Now()
	take := func() bool { // one more request in this step? (waits for its turn at -rate)
		mu.Lock()
		if sent >= l.max {
			mu.Unlock()
			return false
		}
		n := sent
		sent++
		mu.Unlock()
		if l.rate > 0 {
			due := start.Add(time.Duration(float64(n*l.batch) / l.rate * float64(time.Second)))
			if !due.Before(start.Add(l.dur)) {
				return false
			}
			time.Sleep(time.Until(due))
		}
		return true
	}
	end := start.Add(l.dur)
	for i := range l.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[i]
			res.errors = map[string]int{}
			url := strings.TrimSuffix(l.urls[i%len(l.urls)], "/") + "/v1/zones/" + l.zone + "/records"
			for seq := 0; time.Now().Before(end) && !stopped.Load() && take(); seq++ {
				body := l.body(i, seq)
				t0 := time.Now()
				status, text, err := l.post(hc, url, body)
				d := time.Since(t0)
				switch {
				case err != nil:
					res.errors["error"]++
					if res.sample == "" {
						res.sample = err.Error()
					}
				case status == http.StatusOK:
					res.lat = append(res.lat, d)
				default:
					res.errors[strconv.Itoa(status)]++
					if res.sample == "" {
						res.sample = fmt.Sprintf("%d %s", status, strings.TrimSpace(text))
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	var lat []time.Duration
	errs := map[string]int{}
	sample := ""
	for _, r := range results {
		lat = append(lat, r.lat...)
		for k, v := range r.errors {
			errs[k] += v
		}
		if sample == "" {
			sample = r.sample
		}
	}
	slices.Sort(lat)
	e := "-"
	if len(errs) > 0 {
		var parts []string
		for k, v := range errs {
			parts = append(parts, fmt.Sprintf("%s:%d", k, v))
		}
		slices.Sort(parts)
		e = strings.Join(parts, ",") + " first: " + sample
	}
	return fmt.Sprintf("%d %d %d %d %.0f %.2f %.2f %.2f %s", l.clients, l.batch, sent, len(lat),
		float64(len(lat)*l.batch)/elapsed.Seconds(), ms(pct(lat, 0.50)), ms(pct(lat, 0.99)), ms(pct(lat, 1)), e)
}

// body is the JSON of request seq of client i: batch new A records.
func (l *load) body(i, seq int) []byte {
	add := make([]string, l.batch)
	for j := range add {
		n := seq*l.batch + j
		add[j] = fmt.Sprintf("%s-c%d-%d.%s. 300 IN A 10.%d.%d.%d", l.prefix, i, n, l.zone, i&0xff, n>>8&0xff, n&0xff)
	}
	b, _ := json.Marshal(map[string][]string{"add": add})
	return b
}

func (l *load) post(hc *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if l.token != "" {
		req.Header.Set("Authorization", "Bearer "+l.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(text), err
}

// pct returns the p-quantile of sorted (nearest rank), 0 when empty.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "writeload:", err)
	os.Exit(2)
}
