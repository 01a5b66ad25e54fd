// Command policyload writes request-routing policies through the
// craftstore HTTP API at a steady rate, as an external controller would
// (MyXDNS uploads one policy change a second; this sends -rate a second):
// PUT /v1/zones/ZONE/policies/p-N/A for N cycling over -names, each time
// with other weights, for -d or -max writes, whichever comes first. It
// reports the writes answered 200 and their latencies, and exits 1 when
// any write failed.
//
// Output, one line:
//
//	writes ok writes/s p50_ms p99_ms max_ms errors
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"
)

func main() {
	var (
		api   = flag.String("api", "http://127.0.0.1:8061", "API base URL of a member")
		zone  = flag.String("zone", "example.org", "zone of the policies")
		names = flag.Int("names", 1000, "policies p-0 ... p-(names-1)")
		rate  = flag.Float64("rate", 100, "policy writes a second")
		dur   = flag.Duration("d", 10*time.Second, "how long to write")
		max   = flag.Int("max", 100000, "at most this many writes")
		token = flag.String("token", "", "bearer token of the API")
	)
	flag.Parse()
	if *rate <= 0 || *names <= 0 {
		fmt.Fprintln(os.Stderr, "policyload: -rate and -names must be positive")
		os.Exit(2)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	every := time.Duration(float64(time.Second) / *rate)
	start := time.Now()
	var lat []time.Duration
	ok, errs := 0, map[string]int{}
	for i := 0; i < *max && time.Since(start) < *dur; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
			time.Sleep(wait)
		}
		w := 1 + i%9
		body := fmt.Sprintf(`{"pools": {"main": {"values": [{"value": "203.0.113.10", "weight": %d}, {"value": "203.0.113.11", "weight": 1}], "ttl": 60, "fallback": "backup"},
			"eu": {"values": [{"value": "203.0.113.10", "weight": 9}, {"value": "203.0.113.11", "weight": %d}], "ttl": 30},
			"backup": {"values": [{"value": "198.51.100.99"}]}},
			"rules": [{"regions": ["eu"], "pool": "eu"}, {"subnets": ["10.0.0.0/8"], "pool": "backup"}, {"pool": "main"}]}`, w, w)
		url := fmt.Sprintf("%s/v1/zones/%s/policies/p-%d/A", *api, *zone, i%*names)
		req, err := http.NewRequest(http.MethodPut, url, bytes.NewBufferString(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "policyload:", err)
			os.Exit(2)
		}
		req.Header.Set("Content-Type", "application/json")
		if *token != "" {
			req.Header.Set("Authorization", "Bearer "+*token)
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			errs[err.Error()]++
			continue
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			errs[resp.Status]++
			continue
		}
		ok++
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	nerr := 0
	for _, n := range errs {
		nerr += n
	}
	fmt.Printf("%d %d %.1f %.1f %.1f %.1f %d\n", ok+nerr, ok, float64(ok)/elapsed.Seconds(), pct(0.5), pct(0.99), pct(1), nerr)
	for e, n := range errs {
		fmt.Fprintf(os.Stderr, "policyload: %d× %s\n", n, e)
	}
	if nerr > 0 {
		os.Exit(1)
	}
}
