package replica

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkChange is the write path of a three-member group in one process:
// 16 clients each adding 10 new A records per change (as bench/writes.sh's
// default load) to a zone of 20,000 names, every change committed by Raft,
// persisted in bbolt with fsync and applied to every member's bbolt and zone
// view before the next. B/op and allocs/op are per change, all three
// members together (divide by 10 for a record); -benchmem or ReportAllocs.
func BenchmarkChange(b *testing.B) { benchChange(b, 8) }

// BenchmarkChangeOne is BenchmarkChange with one client: ns/op is the
// latency of one change, from proposal to the leader's acknowledgement
// (the leader's fsync and a follower's, and the round trip between).
func BenchmarkChangeOne(b *testing.B) { benchChange(b, 0) }

// benchChange runs BenchmarkChange's load with parallelism clients per CPU
// (b.SetParallelism), or with one client when parallelism is 0.
func benchChange(b *testing.B, parallelism int) {
	c := newTestCluster(b, 3, 0)
	l := c.leader()
	seed := parseTestZone(b)
	for i := range 20000 {
		seed = append(seed, &dns.A{Hdr: dns.RR_Header{Name: fmt.Sprintf("seed-%d.example.org.", i),
			Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(10, 0, byte(i>>8), byte(i))})
	}
	if _, err := l.PutZone(ctx(b), "example.org.", seed, false); err != nil {
		b.Fatal(err)
	}
	for _, r := range c.members {
		eventually(b, "the seeded zone everywhere", func() bool {
			z := r.Zone("example.org.")
			return z != nil && z.Records() >= len(seed)
		})
	}
	var next atomic.Int64
	change := func(cx context.Context) error {
		n := next.Add(1)
		add := make([]dns.RR, 10)
		for i := range add {
			add[i] = &dns.A{Hdr: dns.RR_Header{Name: fmt.Sprintf("w-%d-%d.example.org.", n, i),
				Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(10, 1, byte(n), byte(i))}
		}
		_, err := l.Change(cx, "example.org.", add, nil)
		return err
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallelism == 0 {
		cx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for b.Loop() {
			if err := change(cx); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism(parallelism) // 16 clients on 2 CPUs at 8
		b.RunParallel(func(pb *testing.PB) {
			cx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for pb.Next() {
				if err := change(cx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	// Every member applies what the leader acknowledged: the allocations of
	// the followers' last applies are in the figures too.
	want := l.Zone("example.org.").Records()
	for _, r := range c.members {
		eventually(b, "every member caught up", func() bool { return r.Zone("example.org.").Records() == want })
	}
}
