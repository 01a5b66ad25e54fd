package craftstore

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Steering the collector (issue 54, item 5). Go's default, GOGC=100, lets
// the heap grow to twice the live heap before it collects, and its
// scavenger keeps the pages of about a tenth more: a member holding a
// million records keeps twice what they take, in anonymous memory. A
// member's live heap is nearly all its zones, which live long; what a
// query allocates (about 1.1 KB, nearly all of it in CoreDNS's and
// miekg/dns's server path) is short-lived. With `gc_headroom PERCENT`,
// unless GOGC or GOMEMLIMIT is in the environment, craftstore sets GOGC
// every second from the live heap the last collection found: the heap may
// grow by PERCENT of it, but by at least minHeadroom and never more than
// Go's default. It is a trade: each collection marks the whole live heap
// (about 80 ms of CPU for a million records), and a smaller headroom
// collects more often under the same query load (bench/README.md,
// "paged.sh": 25% takes anonymous memory from 411 to 288 bytes a record at
// 1M records for 10-14% more CPU per query, from 465 to 285 at 10M for
// 25-81% more). So the default leaves the collector to Go. The setting is the process's:
// the last craftstore block started gives its gc_headroom.

// defaultHeadroom is gc_headroom's default: off.
const defaultHeadroom = 0

// minHeadroom is the least the heap may grow between collections: a small
// heap collects no more often than Go's default would at 32 MiB live.
const minHeadroom = 32 << 20

// gcSteer is the percent configured last; 0: off.
var (
	gcSteer     atomic.Int32
	gcSteerOnce sync.Once
)

// steerGC starts (once per process) the loop that sets GOGC, with percent
// of headroom (0: leave the collector alone).
func steerGC(percent int) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	gcSteer.Store(int32(percent))
	gcSteerOnce.Do(func() {
		go func() {
			sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
			set := 100
			for range time.Tick(time.Second) {
				p := int(gcSteer.Load())
				want := 100
				if p > 0 {
					metrics.Read(sample)
					want = gcPercent(sample[0].Value.Uint64(), p)
				}
				if want != set {
					debug.SetGCPercent(want)
					set = want
				}
			}
		}()
	})
}

// gcPercent returns the GOGC that lets a heap of live bytes grow by
// headroom percent of it, by minHeadroom at least, by 100% at most, in
// steps of 5 (so that the setting does not change at every sample).
func gcPercent(live uint64, headroom int) int {
	if live == 0 {
		return 100
	}
	p := math.Max(float64(headroom), float64(minHeadroom)/float64(live)*100)
	return min(100, int(math.Ceil(p/5))*5)
}
