// Command xfrtime transfers a zone (AXFR, or IXFR from -serial) from a
// server and prints how long it took, the records and messages received
// and the serial: the client side of bench/axfr.sh.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/miekg/dns"
)

func main() {
	server := flag.String("server", "127.0.0.1:53", "server (host:port)")
	zone := flag.String("zone", "example.org.", "zone")
	serial := flag.Uint("serial", 0, "IXFR from this serial (0: AXFR)")
	flag.Parse()

	m := new(dns.Msg)
	if *serial != 0 {
		m.SetIxfr(dns.Fqdn(*zone), uint32(*serial), "ns.invalid.", "h.invalid.")
	} else {
		m.SetAxfr(dns.Fqdn(*zone))
	}
	tr := &dns.Transfer{DialTimeout: 5 * time.Second, ReadTimeout: 60 * time.Second}
	began := time.Now()
	ch, err := tr.In(m, *server)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xfrtime:", err)
		os.Exit(1)
	}
	records, messages := 0, 0
	var first uint32
	for env := range ch {
		if env.Error != nil {
			fmt.Fprintln(os.Stderr, "xfrtime:", env.Error)
			os.Exit(1)
		}
		messages++
		records += len(env.RR)
		if records == len(env.RR) && len(env.RR) > 0 {
			if soa, ok := env.RR[0].(*dns.SOA); ok {
				first = soa.Serial
			}
		}
	}
	fmt.Printf("records=%d messages=%d seconds=%.3f serial=%d\n", records, messages, time.Since(began).Seconds(), first)
}
