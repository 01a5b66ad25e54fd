package dnsdiff

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// ListenUDPTCP returns a UDP socket and a TCP listener on the same free
// port of 127.0.0.1, for a test server that answers over both. The kernel
// picks the UDP port; another process may hold its TCP twin (an outgoing
// connection's), so it tries a few ports.
func ListenUDPTCP(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l
		}
		pc.Close()
		if try == 20 {
			t.Fatal(err)
		}
	}
}

// StartEndlessPrimary serves an AXFR of origin on loopback TCP that never
// ends by itself: the SOA soa, then batches of records made by record(i)
// (zone file text), up to bound records, unless the client hangs up first.
// It returns the primary's address and the count of records sent so far.
// A test of an importer's limits points the import at it.
func StartEndlessPrimary(t testing.TB, soa dns.RR, bound int, record func(i int) string) (string, *atomic.Int64) {
	t.Helper()
	sent := new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		ch := make(chan *dns.Envelope)
		go func() {
			defer close(ch)
			ch <- &dns.Envelope{RR: []dns.RR{soa}}
			for i := 0; i < bound; i += 100 {
				rrs := make([]dns.RR, 0, 100)
				for j := range 100 {
					if rr, err := dns.NewRR(record(i + j)); err == nil {
						rrs = append(rrs, rr)
					}
				}
				ch <- &dns.Envelope{RR: rrs}
				sent.Add(int64(len(rrs)))
			}
		}()
		if err := new(dns.Transfer).Out(w, r, ch); err != nil {
			for range ch { // the client hung up: let the sender end
			}
		}
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String(), sent
}
