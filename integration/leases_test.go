package integration

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// forgedLeases is how many forged lease requests TestForgedLeases sends
// each member before it writes again.
const forgedLeases = 1000

// forgeLease adds to query m a change lease request that is not signed with
// the routers' key: unsigned, or signed with another key, for port (a
// random one when 0) and a random token, asked now.
func forgeLease(m *dns.Msg, rng *rand.Rand, port uint16) {
	var key *shardproto.Key
	if rng.IntN(2) == 0 {
		key = shardproto.NewKey(fmt.Sprintf("not-the-routers-key-%032d", rng.IntN(1000)))
	}
	if port == 0 {
		port = uint16(1 + rng.IntN(65535))
	}
	l := shardproto.Lease{Port: port, Duration: shardproto.MaxLease, Time: time.Now()}
	for i := range l.Token {
		l.Token[i] = byte(rng.UintN(256))
	}
	shardproto.RequestLease(m, l, key)
}

// leaseForger sends forged lease requests naming the port of its own UDP
// socket, so that a member that granted one would send its NOTIFYs there,
// and counts the NOTIFYs (unanswered) and the grants it receives.
type leaseForger struct {
	pc              net.PacketConn
	port            uint16
	rng             *rand.Rand
	sent            atomic.Int64
	notices, grants atomic.Int64
	done            chan struct{}
}

func newLeaseForger(t *testing.T, seed uint64) *leaseForger {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &leaseForger{pc: pc, port: uint16(pc.LocalAddr().(*net.UDPAddr).Port), rng: rand.New(rand.NewPCG(seed, 3)), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		buf := make([]byte, 65535)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			m := new(dns.Msg)
			if m.Unpack(buf[:n]) != nil {
				continue
			}
			switch {
			case m.Opcode == dns.OpcodeNotify && !m.Response:
				// Not answered, as the forger of the issue did not: a
				// member that granted the lease holds its writes until
				// the lease expires.
				f.notices.Add(1)
			case m.Response && shardproto.IsLeaseRequest(m):
				f.grants.Add(1) // the option echoed: a grant
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-f.done
	})
	return f
}

// forge sends n forged lease requests for origin's SOA to addr, with the
// forger's port in each.
func (f *leaseForger) forge(t *testing.T, addr, origin string, n int) {
	t.Helper()
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		m := new(dns.Msg)
		m.SetQuestion(origin, dns.TypeSOA)
		forgeLease(m, f.rng, f.port)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.pc.WriteTo(b, to); err != nil {
			t.Fatal(err)
		}
		f.sent.Add(1)
	}
}

// timedWrites adds n records through api, each its own change, and returns
// how long each took.
func timedWrites(t *testing.T, api harness.API, origin, prefix string, n int) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i := range n {
		start := time.Now()
		body := map[string]any{"add": []string{fmt.Sprintf("%s-%d.%s 60 IN A 192.0.2.%d", prefix, i, origin, 1+i%250)}}
		if code, err := api.Do("POST", "/v1/zones/"+origin+"/records", body, nil); err != nil || code != http.StatusOK {
			t.Fatalf("write %d through %s: expected 200, got %d %v", i, api.Base, code, err)
		}
		took = append(took, time.Since(start))
	}
	return took
}

// quantiles formats the median and the largest of ds.
func quantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %v, p99 %v, max %v", s[len(s)/2].Round(10*time.Microsecond),
		s[(len(s)*99)/100].Round(10*time.Microsecond), s[len(s)-1].Round(10*time.Microsecond))
}

// TestForgedLeases: a change lease asked for without the routers' key
// (unsigned, or signed with another key) is never granted: the member
// answers the query as a plain one, sends no NOTIFY to the forged address
// and acknowledges its writes without waiting for anyone. Checked on a
// lone member without router_key (make run's set-up, where one such packet
// used to stall every write for 3s) and on a shard member with one, behind
// a router whose own leases keep holding throughout.
func TestForgedLeases(t *testing.T) {
	const origin = "forged.example."
	const zoneText = `$ORIGIN forged.example.
$TTL 300
@ SOA ns1 hostmaster 1 7200 3600 1209600 60
@ NS ns1
ns1 A 192.0.2.53
www A 192.0.2.10
`
	wd := harness.Workdir(t)
	singleAddr, single := startSingle(t, wd, []string{origin})
	putZone(t, single, origin, zoneText)
	s := startSharded(t, wd, 1, 3, []string{origin}, routerSpec{zones: []string{origin}, key: "name"})
	r := s.routers[0]
	putZone(t, r.client(), origin, zoneText)
	leasesValid := func() float64 {
		return metricSum(t, routerMetrics(t, r), "coredns_craftroute_leases_valid")
	}
	harness.Eventually(t, "the router's leases held", 10*time.Second, func() bool { return leasesValid() == 1 })

	member := s.members["a"][0]
	for _, target := range []struct {
		name string
		dns  string
		api  harness.API
	}{
		{"a lone member without router_key", singleAddr, single},
		{"a shard member with router_key", member.addr(), member.client()},
	} {
		t.Run(strings.ReplaceAll(target.name, " ", "_"), func(t *testing.T) {
			f := newLeaseForger(t, uint64(len(target.name)))
			before := timedWrites(t, target.api, origin, "before", 20)
			f.forge(t, target.dns, origin, forgedLeases)
			// Keep forging while the member writes, one request every
			// 10ms (bounded by the writes).
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for i := 0; i < 3000; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
						f.forge(t, target.dns, origin, 1)
					}
				}
			})
			after := timedWrites(t, target.api, origin, "after", 20)
			close(stop)
			wg.Wait()
			time.Sleep(200 * time.Millisecond) // what the member sent last reaches the forger
			if n := f.notices.Load(); n != 0 {
				t.Errorf("the member sent %d NOTIFYs to the forged lease's address", n)
			}
			if n := f.grants.Load(); n != 0 {
				t.Errorf("the member granted %d forged leases", n)
			}
			for _, p := range s.procs {
				if strings.Contains(p.Logs(), "did not answer the notice") {
					t.Errorf("a write waited for a router that did not answer:\n%s", tail(p.Logs(), 2000))
				}
			}
			t.Logf("%s: %d forged lease requests; API writes before: %s; during and after: %s",
				target.name, f.sent.Load(), quantiles(before), quantiles(after))
		})
	}
	// The forged requests took no lease of the router's: its own still
	// hold (a renewal that came late under load lapses one for a moment).
	harness.Eventually(t, "the router's own leases after the forged flood", 10*time.Second, func() bool { return leasesValid() == 1 })
	// The router still follows every write: the shard member's last one
	// is answered through it at once.
	m, err := harness.Query(r.addr(), "after-19."+origin, dns.TypeA)
	if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("the last write through the member, through the router: %v %v", m, err)
	}
}
