package craftroute

import (
	"context"

	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"

	"github.com/craftdns/craftdns/internal/dnswire"
	"github.com/craftdns/craftdns/internal/shardproto"

	"github.com/miekg/dns"
)

// cannedMember is a stand-in for a craftstore member that costs next to
// nothing: it answers each question it was given an answer for with that
// answer's bytes (the query's ID set), so that a benchmark measures the
// router. Its answers are what memberAnswer makes: an A record, final
// facts, the applied index, the zone's serial and their MAC.
type cannedMember struct {
	pc      net.PacketConn
	answers map[string][]byte // question section → answer
	wg      sync.WaitGroup
}

func startCannedMember(tb testing.TB, key *shardproto.Key, clients []*dns.Msg) *cannedMember {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cm := &cannedMember{pc: pc, answers: map[string][]byte{}}
	for _, r := range clients {
		ans := memberAnswer(tb, r, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, key, true, func(m *dns.Msg) {
			m.Answer = append(m.Answer, test.A(m.Question[0].Name+" 300 IN A 192.0.2.1"))
		}, nil)
		qend, ok := dnswire.SkipQuestions(ans, 1)
		if !ok {
			tb.Fatal("canned answer unreadable")
		}
		cm.answers[string(ans[dnswire.HeaderLen:qend])] = ans
	}
	for range 2 {
		cm.wg.Add(1)
		go cm.serve()
	}
	tb.Cleanup(func() { pc.Close(); cm.wg.Wait() })
	return cm
}

func (cm *cannedMember) serve() {
	defer cm.wg.Done()
	buf := make([]byte, 4096)
	out := make([]byte, 4096)
	for {
		n, from, err := cm.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := buf[:n]
		qend, ok := dnswire.SkipQuestions(q, 1)
		if !ok {
			continue
		}
		ans, ok := cm.answers[string(q[dnswire.HeaderLen:qend])]
		if !ok {
			continue
		}
		o := append(out[:0], ans...)
		copy(o, q[:2])
		cm.pc.WriteTo(o, from)
	}
}

// BenchmarkServe is one router's cost per forwarded query in front of a
// member that costs next to nothing (cannedMember, on loopback): the fast
// path (the member's bytes relayed) against the slow path (fast_path
// off: a dns.Msg each way, CoreDNS's proxy). Run with -cpu 1,2: 32
// queries per core are in flight, so the time per query is the CPU per
// query over the cores, and it should halve with two cores when the
// router scales (the canned member shares the cores).
func BenchmarkServe(b *testing.B) {
	key := shardproto.NewKey("fast-path-bench-key-0123456789abcdef")
	var clients []*dns.Msg
	for i := range 64 {
		r := new(dns.Msg)
		r.SetQuestion(fmt.Sprintf("host-%d.example.org.", i), dns.TypeA)
		if i%2 == 0 {
			r.SetEdns0(1232, false)
		}
		clients = append(clients, r)
	}
	cm := startCannedMember(b, key, clients)
	for _, slow := range []bool{false, true} {
		name := "fast"
		if slow {
			name = "slow"
		}
		b.Run(name, func(b *testing.B) {
			c := &Craftroute{Zones: []string{"example.org."}, cfg: config{key: keyName, slowOnly: slow, downFor: time.Second}}
			c.leases.key = key
			m := newMember("s0", cm.pc.LocalAddr().String(), time.Second, nil)
			m.start()
			b.Cleanup(m.stop)
			c.route(b, &Shard{Name: "s0", Members: []*Member{m}})
			c.zones, c.neg, c.changes = newZoneSet(c.Zones), newNegCache(0), newChangeTracker()
			b.ReportAllocs()
			// Many queries in flight per core, as under load: the figure
			// is the CPU per query, not one query's round trip.
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				tw := &test.ResponseWriter{RemoteIP: "127.0.0.1"}
				for pb.Next() {
					r := clients[i%len(clients)]
					i++
					w := request.NewScrubWriter(r, tw)
					if _, err := c.ServeDNS(context.Background(), w, r); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
