// Command zonegen writes a synthetic zone file and a dnsperf query file for
// the benchmarks in bench/.
//
// The zone holds about -n records (the apex, a wildcard and a delegation
// included). With -mix mixed (the default) it looks like a company's zone:
// mostly A host names, a share of dual-stack hosts with A and AAAA, CNAME
// aliases, MX and TXT records, a third of the names one level down under
// site-K (so that the zone has empty non-terminals), a wildcard *.wild and a
// delegation sub with glue. With -mix hosts it is A records, one name in ten
// with an AAAA beside it: the zone of the memory benchmark.
//
// The query file holds -queries lines in random order: (1 - -missing) of them
// ask for data that exists (the record's own type; A for CNAME aliases, which
// the server follows; a few wildcard and referral queries) and -missing of
// them ask for names that do not exist, which must be answered NXDOMAIN. The
// output is reproducible for a given -seed.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// query is one line of the dnsperf input.
type query struct {
	name  string
	qtype string
}

func main() {
	var (
		origin   = flag.String("origin", "example.org", "zone origin")
		records  = flag.Int("n", 100000, "records in the zone (approximately: within 2)")
		mix      = flag.String("mix", "mixed", "record mix: mixed or hosts")
		zoneOut  = flag.String("zone", "", "zone file to write (required)")
		queryOut = flag.String("queries", "", "dnsperf query file to write; none when empty")
		nq       = flag.Int("nqueries", 200000, "lines in the query file")
		missing  = flag.Float64("missing", 0.10, "share of queries for names that do not exist")
		seed     = flag.Uint64("seed", 1, "random seed")
	)
	flag.Parse()
	if *zoneOut == "" || (*mix != "mixed" && *mix != "hosts") || *missing < 0 || *missing > 1 {
		flag.Usage()
		os.Exit(2)
	}
	o := strings.TrimSuffix(*origin, ".") + "."
	rng := rand.New(rand.NewPCG(*seed, 0x7a6f6e6567656e))

	zf, err := os.Create(*zoneOut)
	if err != nil {
		fatal(err)
	}
	zw := bufio.NewWriterSize(zf, 1<<20)
	count, existing := writeZone(zw, o, *records, *mix, rng)
	if err := zw.Flush(); err != nil {
		fatal(err)
	}
	if err := zf.Close(); err != nil {
		fatal(err)
	}

	nx := 0
	if *queryOut != "" {
		qf, err := os.Create(*queryOut)
		if err != nil {
			fatal(err)
		}
		qw := bufio.NewWriterSize(qf, 1<<20)
		nx = writeQueries(qw, o, existing, *nq, *missing, rng)
		if err := qw.Flush(); err != nil {
			fatal(err)
		}
		if err := qf.Close(); err != nil {
			fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "zonegen: %s: %d records", *zoneOut, count)
	if *queryOut != "" {
		fmt.Fprintf(os.Stderr, "; %s: %d queries, %d for missing names", *queryOut, *nq, nx)
	}
	fmt.Fprintln(os.Stderr)
}

// writeZone writes the zone and returns the number of records and a query
// that finds data for each owner name.
func writeZone(w *bufio.Writer, o string, n int, mix string, rng *rand.Rand) (int, []query) {
	count := 0
	rr := func(format string, a ...any) {
		fmt.Fprintf(w, format+"\n", a...)
		count++
	}
	fmt.Fprintf(w, "$ORIGIN %s\n$TTL 3600\n", o)
	rr("@ IN SOA ns1 hostmaster 2026112201 7200 3600 1209600 300")
	rr("@ IN NS ns1")
	rr("@ IN NS ns2")
	rr("@ IN MX 10 mail")
	rr(`@ IN TXT "v=spf1 mx -all"`)
	rr("ns1 IN A 192.0.2.53")
	rr("ns2 IN A 192.0.2.54")
	rr("mail IN A 192.0.2.25")
	rr("*.wild IN A 192.0.2.99") // RFC 4592 wildcard
	rr("sub IN NS ns1.sub")      // a delegation with glue
	rr("sub IN NS ns2.sub")
	rr("ns1.sub IN A 192.0.2.201")
	rr("ns2.sub IN A 192.0.2.202")
	existing := []query{{o, "SOA"}, {"ns1." + o, "A"}, {"mail." + o, "A"}}

	var hosts []string // A names, targets of CNAMEs and MXs
	for i := 0; count < n; i++ {
		site := ""
		if i%3 == 0 {
			site = fmt.Sprintf(".site-%d", i%97)
		}
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
		k := i % 100
		if mix == "hosts" {
			k = 0 // an A record
			if i%10 == 0 {
				k = 60 // and an AAAA beside it
			}
		}
		switch {
		case k < 60: // a host
			name := fmt.Sprintf("host-%d%s", i, site)
			rr("%s IN A %s", name, ip)
			hosts = append(hosts, name)
			existing = append(existing, query{name + "." + o, "A"})
		case k < 75: // a dual-stack host
			name := fmt.Sprintf("dual-%d%s", i, site)
			rr("%s IN A %s", name, ip)
			rr("%s IN AAAA 2001:db8::%x:%x", name, i>>16, i&0xffff)
			hosts = append(hosts, name)
			existing = append(existing, query{name + "." + o, "A"}, query{name + "." + o, "AAAA"})
		case k < 85 && len(hosts) > 0: // an alias of an earlier host
			name := fmt.Sprintf("alias-%d%s", i, site)
			rr("%s IN CNAME %s", name, hosts[rng.IntN(len(hosts))])
			existing = append(existing, query{name + "." + o, "A"})
		case k < 92 && len(hosts) > 0: // a mail domain
			name := fmt.Sprintf("mx-%d%s", i, site)
			rr("%s IN MX 10 %s", name, hosts[rng.IntN(len(hosts))])
			existing = append(existing, query{name + "." + o, "MX"})
		default: // a verification token
			name := fmt.Sprintf("txt-%d%s", i, site)
			rr(`%s IN TXT "verification=%016x"`, name, rng.Uint64())
			existing = append(existing, query{name + "." + o, "TXT"})
		}
	}
	return count, existing
}

// writeQueries writes nq queries in random order, a share missing of them
// for names that do not exist, and returns how many those are.
func writeQueries(w *bufio.Writer, o string, existing []query, nq int, missing float64, rng *rand.Rand) int {
	nx := 0
	for i := 0; i < nq; i++ {
		if rng.Float64() < missing {
			// Not below wild (the wildcard answers) nor sub (a referral).
			if rng.IntN(2) == 0 {
				fmt.Fprintf(w, "nx-%d.%s A\n", rng.IntN(1<<30), o)
			} else {
				fmt.Fprintf(w, "nx-%d.site-%d.%s A\n", rng.IntN(1<<30), rng.IntN(97), o)
			}
			nx++
			continue
		}
		switch r := rng.IntN(1000); {
		case r == 0: // wildcard synthesis (RFC 4592)
			fmt.Fprintf(w, "w%d.wild.%s A\n", rng.IntN(1<<20), o)
		case r == 1: // a referral to the delegation
			fmt.Fprintf(w, "www.sub.%s A\n", o)
		default:
			q := existing[rng.IntN(len(existing))]
			fmt.Fprintf(w, "%s %s\n", q.name, q.qtype)
		}
	}
	return nx
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "zonegen:", err)
	os.Exit(1)
}
