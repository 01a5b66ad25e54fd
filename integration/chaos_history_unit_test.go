package integration

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestChaosCheckerFinds feeds the chaos suite's checks histories with the
// anomalies they look for, and one without.
func TestChaosCheckerFinds(t *testing.T) {
	const k = "c0." + chaosZone
	v1, v2 := casValue(1, 0, 0), casValue(2, 0, 1)
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }

	clean := newHistory()
	clean.op(0, regOp{Kind: "cas", Key: k, Old: "", New: v1}, resOK, ms(0), ms(10))
	clean.op(1, regOp{Kind: "cas", Key: k, Old: "", New: v2}, resFailed, ms(5), ms(15))
	clean.op(0, regOp{Kind: "cas", Key: k, Old: v1, New: v2}, resUnknown, ms(20), ms(30))
	clean.op(2, regOp{Kind: "probe", Key: k, Old: v2}, resOK, ms(40), ms(50))
	clean.ack(ackedWrite{member: "a1", key: k, value: v1, ord: 1, ret: ms(10)}, false)
	clean.read(localRead{member: "a1", key: k, value: v1, call: ms(11), ret: ms(12)})
	clean.read(localRead{member: "a2", key: k, value: "", call: ms(11), ret: ms(12)}) // a follower behind: allowed
	clean.read(localRead{member: "a2", key: k, value: v2, call: ms(60), ret: ms(61)})
	var an anomalies
	clean.checkLocal(&an)
	if an.total() != 0 {
		t.Errorf("expected no anomaly in a clean history, got %v", an.examples)
	}
	if res, _, err := clean.checkLinearizable(time.Minute, ""); err != nil || res != porcupine.Ok {
		t.Errorf("expected a linearizable history, got %v %v", res, err)
	}

	// A write acknowledged, then lost: the probe says the old value.
	lost := newHistory()
	lost.op(0, regOp{Kind: "cas", Key: k, Old: "", New: v1}, resOK, ms(0), ms(10))
	lost.op(2, regOp{Kind: "probe", Key: k, Old: ""}, resOK, ms(20), ms(30))
	if res, _, _ := lost.checkLinearizable(time.Minute, ""); res != porcupine.Illegal {
		t.Errorf("expected a lost write to be illegal, got %v", res)
	}
	// Two cas from the same old value, both acknowledged.
	twice := newHistory()
	twice.op(0, regOp{Kind: "cas", Key: k, Old: "", New: v1}, resOK, ms(0), ms(10))
	twice.op(1, regOp{Kind: "cas", Key: k, Old: "", New: casValue(1, 1, 0)}, resOK, ms(0), ms(10))
	if res, _, _ := twice.checkLinearizable(time.Minute, ""); res != porcupine.Illegal {
		t.Errorf("expected two cas from one value to be illegal, got %v", res)
	}

	// A member that answers older than what it acknowledged, and than
	// what it answered before.
	local := newHistory()
	local.ack(ackedWrite{member: "a1", key: k, value: v2, ord: 2, ret: ms(10)}, false)
	local.read(localRead{member: "a1", key: k, value: v1, call: ms(11), ret: ms(12)})
	local.read(localRead{member: "a2", key: k, value: v2, call: ms(11), ret: ms(12)})
	local.read(localRead{member: "a2", key: k, value: v1, call: ms(13), ret: ms(14)})
	an = anomalies{}
	local.checkLocal(&an)
	if an.byKind["read-your-writes"] != 1 || an.byKind["monotonic reads"] != 1 {
		t.Errorf("expected one read-your-writes and one monotonic-reads anomaly, got %v", an.examples)
	}
	// A put value orders by its acknowledged serial; an unacknowledged
	// one is not judged.
	const p = "p0." + chaosZone
	local = newHistory()
	local.ack(ackedWrite{member: "a1", key: p, value: "put 1", ord: 7, ret: ms(10)}, true)
	local.ack(ackedWrite{member: "a1", key: p, value: "put 2", ord: 9, ret: ms(20)}, true)
	local.read(localRead{member: "a1", key: p, value: "put 3", call: ms(21), ret: ms(22)})
	local.read(localRead{member: "a1", key: p, value: "put 1", call: ms(23), ret: ms(24)})
	an = anomalies{}
	local.checkLocal(&an)
	if an.byKind["read-your-writes"] != 1 || an.total() != 1 {
		t.Errorf("expected one read-your-writes anomaly, got %v", an.examples)
	}

	// Unknown outcomes are settled by what was read: an observed value was
	// applied before its first read returned; an unobserved cas was not
	// applied; an unobserved put was applied only if its name is present.
	res := newHistory()
	res.op(0, regOp{Kind: "cas", Key: k, Old: "", New: v1}, resUnknown, ms(0), ms(10))
	res.op(1, regOp{Kind: "cas", Key: k, Old: "", New: casValue(1, 1, 0)}, resUnknown, ms(0), ms(10))
	res.read(localRead{member: "a1", key: k, value: v1, call: ms(20), ret: ms(30)})
	res.op(0, regOp{Kind: "put", Key: p, New: "put 1"}, resUnknown, ms(0), ms(10))
	res.putName("put 1", "n1.chaos.test.")
	res.op(0, regOp{Kind: "put", Key: p, New: "put 2"}, resUnknown, ms(40), ms(50))
	res.putName("put 2", "n2.chaos.test.")
	if a, d, l := res.resolve(map[string]bool{"n2.chaos.test.": true}); a != 1 || d != 2 || l != 1 {
		t.Errorf("expected 1 applied, 2 not applied, 1 unknown, got %d %d %d", a, d, l)
	}
	if op := res.ops[0]; op.Output != resOK || op.Return != ms(30) {
		t.Errorf("expected the observed cas acknowledged at the read's return, got %v at %v", op.Output, op.Return)
	}
	if r, _, _ := res.checkLinearizable(time.Minute, ""); r != porcupine.Ok {
		t.Errorf("expected the settled history to be linearizable, got %v", r)
	}
	// A value read before the cas that wrote it could be called is illegal.
	early := newHistory()
	early.op(0, regOp{Kind: "cas", Key: k, Old: "", New: v1}, resUnknown, ms(50), ms(60))
	early.op(2, regOp{Kind: "probe", Key: k, Old: v1}, resOK, ms(10), ms(20))
	early.observe(v1, ms(20))
	early.resolve(nil)
	if r, _, _ := early.checkLinearizable(time.Minute, ""); r != porcupine.Illegal {
		t.Errorf("expected a value seen before its write to be illegal, got %v", r)
	}
}
