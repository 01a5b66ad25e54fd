package replica

import (
	"testing"
	"time"
)

// TestHandOff: handing off leadership costs no write. Writes go through
// every member all the time (the followers' are forwarded to whoever
// leads) while leadership is handed on six times in a row. raft drops
// proposals while it transfers leadership: without the retry of forwarded
// proposals some of the followers' writes would wait for their 2s timeout
// and fail.
func TestHandOff(t *testing.T) {
	c, _ := startFaultZone(t, 3, 0)
	w := c.startWrites(c.ids()...)
	eventually(t, "writes before the first hand-off", func() bool { return w.acked() >= 30 })
	var longest time.Duration
	for round := range 6 {
		old := c.leader()
		start := time.Now()
		next, err := old.HandOff(time.Second)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("round %d: hand-off from member %d: %v", round, old.ID(), err)
		}
		if next == old.ID() || c.members[next] == nil {
			t.Fatalf("round %d: leadership went from member %d to %d", round, old.ID(), next)
		}
		longest = max(longest, took)
		before := w.acked()
		eventually(t, "writes after the hand-off", func() bool { return w.acked() >= before+20 })
	}
	acked := w.end()
	if len(w.failed) > 0 {
		t.Errorf("%d of %d writes failed, e.g. %v", len(w.failed), len(w.failed)+len(acked), w.failed[0])
	}
	t.Logf("%d writes acknowledged; longest hand-off %v, slowest write %v", len(acked), longest, w.slowest)
	c.settled(t, acked)
}

// TestHandOffRefused: a member hands off only what it has: a follower is
// not the leader, and a lone member has nobody to hand to.
func TestHandOffRefused(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	if _, err := c.follower().HandOff(100 * time.Millisecond); err == nil {
		t.Error("a follower handed off leadership")
	}
	one := newTestCluster(t, 1, 0)
	if _, err := one.leader().HandOff(100 * time.Millisecond); err == nil {
		t.Error("a lone member handed off leadership")
	}
}
