package dnsdiff

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// maxReported is how many divergences Compare describes in full.
const maxReported = 20

// Compare asks every query of both servers, addrA and addrB (UDP, EDNS0
// with a 4096 buffer, RD clear; both again over TCP when either answer is
// truncated) and fails t if their answers differ in rcode, AA, answer or
// authority section. Sections are compared as sets of RRs with names
// compared case-insensitively (owners and names in RDATA) and TTLs
// included; the additional section is not compared. The first divergences
// are shown in full, with a count of all of them.
func Compare(t testing.TB, addrA, addrB string, queries []Query) {
	t.Helper()
	diffs := make([]string, len(queries))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				diffs[i] = compareOne(addrA, addrB, queries[i])
			}
		}()
	}
	for i := range queries {
		next <- i
	}
	close(next)
	wg.Wait()

	var report []string
	n := 0
	for _, d := range diffs {
		if d == "" {
			continue
		}
		n++
		if len(report) < maxReported {
			report = append(report, d)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d queries differ between %s (A) and %s (B); the first %d:\n\n%s",
			n, len(queries), addrA, addrB, len(report), strings.Join(report, "\n"))
	}
}

// compareOne returns a description of how the two answers to q differ, ""
// if they do not.
func compareOne(addrA, addrB string, q Query) string {
	a, errA := exchange(addrA, q, "udp")
	b, errB := exchange(addrB, q, "udp")
	if (errA == nil && a.Truncated) || (errB == nil && b.Truncated) {
		a, errA = exchange(addrA, q, "tcp")
		b, errB = exchange(addrB, q, "tcp")
	}
	if errA != nil || errB != nil {
		return fmt.Sprintf(";; %s\nA: %v\nB: %v\n", q, errOrOK(errA), errOrOK(errB))
	}
	var why []string
	if a.Rcode != b.Rcode {
		why = append(why, "rcode")
	}
	if a.Authoritative != b.Authoritative {
		why = append(why, "AA")
	}
	if !SameSet(a.Answer, b.Answer) {
		why = append(why, "answer")
	}
	if !SameSet(a.Ns, b.Ns) {
		why = append(why, "authority")
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf(";; %s: %s differ\n-- A:\n%s-- B:\n%s", q, strings.Join(why, ", "), summary(a), summary(b))
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// exchange asks q at addr, retrying twice on timeouts.
func exchange(addr string, q Query, network string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Type)
	m.RecursionDesired = false
	m.SetEdns0(4096, false)
	c := &dns.Client{Net: network, UDPSize: 4096, Timeout: 2 * time.Second}
	var err error
	for try := 0; try < 3; try++ {
		var r *dns.Msg
		if r, _, err = c.Exchange(m, addr); err == nil {
			return r, nil
		}
	}
	return nil, err
}

// SameSet reports whether a and b hold the same RRs, in any order: names
// compare case-insensitively, TTLs must be equal.
func SameSet(a, b []dns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	used := make([]bool, len(b))
	for _, x := range a {
		found := false
		for j, y := range b {
			if !used[j] && x.Header().Ttl == y.Header().Ttl && dns.IsDuplicate(x, y) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// summary prints the compared parts of m, sections sorted.
func summary(m *dns.Msg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "   rcode %s, aa %t\n", dns.RcodeToString[m.Rcode], m.Authoritative)
	for _, s := range []struct {
		name string
		rrs  []dns.RR
	}{{"answer", m.Answer}, {"authority", m.Ns}} {
		if len(s.rrs) == 0 {
			continue
		}
		lines := make([]string, len(s.rrs))
		for i, rr := range s.rrs {
			lines[i] = rr.String()
		}
		slices.Sort(lines)
		fmt.Fprintf(&b, "   %s:\n", s.name)
		for _, l := range lines {
			fmt.Fprintf(&b, "\t%s\n", l)
		}
	}
	return b.String()
}

// ParseZone returns the RRs of zone file text for origin, as they are
// (no checks), and fails the test on a syntax error.
func ParseZone(t testing.TB, origin, text string) []dns.RR {
	t.Helper()
	zp := dns.NewZoneParser(strings.NewReader(text), origin, "")
	var rrs []dns.RR
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		rrs = append(rrs, rr)
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("parsing zone %s: %v", origin, err)
	}
	return rrs
}
