package integration

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The history of a chaos run and what is checked on it.
//
// Every key is one TXT RRset of the test zone, used as a register.
// Operations that go through Raft are checked for linearizability with
// porcupine against that register:
//   - put: the HTTP API replaces the RRset (delete RRset, add one TXT);
//   - cas: an RFC 2136 UPDATE whose prerequisite says the RRset is exactly
//     the old value (or does not exist), replacing it with the new one;
//   - probe: an UPDATE with that prerequisite and no update, a read that
//     goes through the log.
//
// A write whose outcome the client does not know (a timeout, SERVFAIL, a
// 503: it may still be applied) returns "at infinity": it may take effect at
// any point after its call, or never.
//
// Members answer DNS queries from their own applied state, which is not
// linearizable by design. Local reads are checked against the documented
// weaker guarantee: a member never goes back (monotonic reads per member and
// key), a member that acknowledged a write answers with it or something
// newer afterwards (read-your-writes), and no acknowledged write is lost (the
// final reads through the log, and every member's export at the end).

// regOp is the input of one register operation.
type regOp struct {
	Kind string // put, cas or probe
	Key  string
	Old  string // cas, probe: the value the prerequisite names; "" for no RRset
	New  string // put, cas: the value written
}

// regResult is what the client learnt.
type regResult int

const (
	resOK      regResult = iota // acknowledged; a probe whose prerequisite held
	resFailed                   // a prerequisite that did not hold: applied as a no-op
	resUnknown                  // no answer, or an error: may or may not be applied
)

func (r regResult) String() string {
	return [...]string{"ok", "failed", "unknown"}[r]
}

// registerModel is the zone as independent TXT registers, partitioned by key.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(regOp).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, res := state.(string), input.(regOp), output.(regResult)
		switch in.Kind {
		case "put":
			return true, in.New
		case "cas":
			switch res {
			case resOK:
				return s == in.Old, in.New
			case resFailed:
				return s != in.Old, s
			}
			if s == in.Old {
				return true, in.New
			}
			return true, s
		default: // probe
			switch res {
			case resOK:
				return s == in.Old, s
			case resFailed:
				return s != in.Old, s
			}
			return true, s
		}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regOp)
		switch in.Kind {
		case "put":
			return fmt.Sprintf("put(%q) %v", in.New, output)
		case "cas":
			return fmt.Sprintf("cas(%q→%q) %v", in.Old, in.New, output)
		}
		return fmt.Sprintf("probe(%q) %v", in.Old, output)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
}

// localRead is one DNS query answered by a member from its own state.
type localRead struct {
	member, key, value string
	call, ret          int64
}

// ackedWrite is a write a member acknowledged: ord orders it among the
// key's writes (the version of a cas value, the zone serial of a put).
type ackedWrite struct {
	member, key, value string
	ord                int64
	ret                int64
}

// history collects what the clients did; safe for concurrent use.
type history struct {
	t0 time.Time

	mu     sync.Mutex
	ops    []porcupine.Operation
	reads  []localRead
	acked  []ackedWrite
	serial map[string]int64  // put value → the zone serial its write acknowledged
	counts map[string]int    // "kind result" → operations
	seen   map[string]int64  // value → when a read first returned it
	names  map[string]string // put value → the name its change added
}

func newHistory() *history {
	return &history{t0: time.Now(), serial: map[string]int64{}, counts: map[string]int{},
		seen: map[string]int64{}, names: map[string]string{}}
}

// now is the history's clock.
func (h *history) now() int64 { return time.Since(h.t0).Nanoseconds() }

// op records a register operation; unknown probes tell nothing and are
// only counted.
func (h *history) op(client int, in regOp, res regResult, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[in.Kind+" "+res.String()]++
	if in.Kind == "probe" && res == resUnknown {
		return
	}
	if res == resUnknown {
		ret = math.MaxInt64 // fixed up by check: after every other operation
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: res, Call: call, Return: ret})
}

func (h *history) read(r localRead) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts["read"]++
	h.reads = append(h.reads, r)
	h.observeLocked(r.value, r.ret)
}

// observe notes that a read, returning at ret, saw value.
func (h *history) observe(value string, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.observeLocked(value, ret)
}

func (h *history) observeLocked(value string, ret int64) {
	if t, ok := h.seen[value]; value != "" && (!ok || ret < t) {
		h.seen[value] = ret
	}
}

// putName notes the name that the change writing put value adds.
func (h *history) putName(value, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names[value] = name
}

// resolve settles the writes whose outcome the client did not learn, so
// that porcupine need not try each at every later point (its search grows
// with 2^unknowns). Every value is unique, and every value a writer or
// the prober starts from was read (and observed) first:
//   - a write whose value was observed was applied before that read
//     returned: it becomes acknowledged, returning then;
//   - a cas whose value was never observed was not applied: applied, it
//     could only have been replaced by a cas starting from it, or be the
//     final value, and both are observed;
//   - a put whose value was never observed was applied only if the name its
//     change added is in the final exports (present; names are never
//     deleted): if not, it was not applied; if so, it stays unknown.
//
// It returns how many writes became acknowledged, were dropped as not
// applied, and stay unknown.
func (h *history) resolve(present map[string]bool) (applied, dropped, left int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := h.ops[:0]
	for _, op := range h.ops {
		in := op.Input.(regOp)
		if op.Output.(regResult) != resUnknown {
			ops = append(ops, op)
			continue
		}
		if t, ok := h.seen[in.New]; ok {
			op.Output, op.Return = resOK, t
			ops = append(ops, op)
			applied++
			continue
		}
		if in.Kind == "put" && present[strings.ToLower(h.names[in.New])] {
			ops = append(ops, op)
			left++
			continue
		}
		dropped++
	}
	h.ops = ops
	return applied, dropped, left
}

func (h *history) ack(w ackedWrite, put bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if put {
		h.serial[w.value] = w.ord
	}
	h.acked = append(h.acked, w)
}

func (h *history) count(what string) {
	h.mu.Lock()
	h.counts[what]++
	h.mu.Unlock()
}

// casValue is the value a cas writes: its version first.
func casValue(version int64, client, seq int) string {
	return fmt.Sprintf("v=%d c=%d s=%d", version, client, seq)
}

// casVersion parses casValue's version; 0 for no value, -1 for another form.
func casVersion(v string) int64 {
	if v == "" {
		return 0
	}
	f, ok := strings.CutPrefix(v, "v=")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(strings.Fields(f)[0], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// ord orders a value among its key's values: a cas value by its version, a
// put value by the serial of its acknowledged write (-1, unordered, when
// its write was not acknowledged), no value first.
func (h *history) ord(value string) int64 {
	if value == "" {
		return 0
	}
	if strings.HasPrefix(value, "v=") {
		return casVersion(value)
	}
	if s, ok := h.serial[value]; ok {
		return s
	}
	return -1
}

// anomalies are what the checks found, by kind.
type anomalies struct {
	byKind   map[string]int
	examples []string
}

func (a *anomalies) add(kind, format string, args ...any) {
	if a.byKind == nil {
		a.byKind = map[string]int{}
	}
	a.byKind[kind]++
	if a.byKind[kind] <= 5 {
		a.examples = append(a.examples, kind+": "+fmt.Sprintf(format, args...))
	}
}

func (a *anomalies) total() int {
	n := 0
	for _, c := range a.byKind {
		n += c
	}
	return n
}

// checkLocal checks the local reads: per member and key, no read returns a
// value older than one an earlier read returned (monotonic reads) or than
// one the member acknowledged before (read-your-writes). Values without an
// order (from unacknowledged puts) are not judged.
func (h *history) checkLocal(a *anomalies) {
	h.mu.Lock()
	defer h.mu.Unlock()
	type floor struct {
		ret   int64
		ord   int64
		value string
		write bool
	}
	floors := map[[2]string][]floor{}
	for _, r := range h.reads {
		if o := h.ord(r.value); o >= 0 {
			k := [2]string{r.member, r.key}
			floors[k] = append(floors[k], floor{r.ret, o, r.value, false})
		}
	}
	for _, w := range h.acked {
		k := [2]string{w.member, w.key}
		floors[k] = append(floors[k], floor{w.ret, w.ord, w.value, true})
	}
	reads := map[[2]string][]localRead{}
	for _, r := range h.reads {
		k := [2]string{r.member, r.key}
		reads[k] = append(reads[k], r)
	}
	for k, rs := range reads {
		fs := floors[k]
		sort.Slice(fs, func(i, j int) bool { return fs[i].ret < fs[j].ret })
		sort.Slice(rs, func(i, j int) bool { return rs[i].call < rs[j].call })
		var maxRead, maxWrite floor
		maxRead.ord, maxWrite.ord = -1, -1
		j := 0
		for _, r := range rs {
			for ; j < len(fs) && fs[j].ret < r.call; j++ {
				if fs[j].write && fs[j].ord > maxWrite.ord {
					maxWrite = fs[j]
				} else if !fs[j].write && fs[j].ord > maxRead.ord {
					maxRead = fs[j]
				}
			}
			o := h.ord(r.value)
			if o < 0 {
				continue
			}
			if o < maxWrite.ord {
				a.add("read-your-writes", "%s answered %s %q at %v after acknowledging %q (order %d > %d)",
					k[0], k[1], r.value, time.Duration(r.call), maxWrite.value, maxWrite.ord, o)
			}
			if o < maxRead.ord {
				a.add("monotonic reads", "%s answered %s %q at %v after answering %q (order %d > %d)",
					k[0], k[1], r.value, time.Duration(r.call), maxRead.value, maxRead.ord, o)
			}
		}
	}
}

// checkLinearizable runs porcupine over the register operations; on a
// violation it writes the visualization to vizPath.
func (h *history) checkLinearizable(timeout time.Duration, vizPath string) (porcupine.CheckResult, int, error) {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	var last int64 // after every call and every known return
	for _, op := range ops {
		last = max(last, op.Call)
		if op.Return != math.MaxInt64 {
			last = max(last, op.Return)
		}
	}
	for i := range ops {
		if ops[i].Return == math.MaxInt64 {
			last++
			ops[i].Return = last
		}
	}
	res := porcupine.CheckOperationsTimeout(registerModel, ops, timeout)
	if res == porcupine.Illegal && vizPath != "" {
		// Again, keeping what the visualization needs (more memory).
		_, info := porcupine.CheckOperationsVerbose(registerModel, ops, timeout)
		if err := porcupine.VisualizePath(registerModel, info, vizPath); err != nil {
			return res, len(ops), err
		}
	}
	return res, len(ops), nil
}
