package dnsdiff

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestGenerateZone(t *testing.T) {
	z1, q1 := GenerateZone("Example.COM", 1, DefaultNames)
	z2, q2 := GenerateZone("example.com.", 1, DefaultNames)
	if z1 != z2 || fmt.Sprint(q1) != fmt.Sprint(q2) {
		t.Fatal("expected the same zone and queries for the same seed")
	}
	if z3, _ := GenerateZone("example.com.", 2, DefaultNames); z3 == z1 {
		t.Error("expected another zone for another seed")
	}
	if len(q1) < 2000 {
		t.Errorf("expected a few thousand queries, got %d", len(q1))
	}

	zp := dns.NewZoneParser(strings.NewReader(z1), "example.com.", "")
	n := 0
	for _, ok := zp.Next(); ok; _, ok = zp.Next() {
		n++
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("expected a valid zone file, got %v", err)
	}
	if n < DefaultNames {
		t.Errorf("expected more than %d RRs, got %d", DefaultNames, n)
	}
}

// recorder is a testing.TB that keeps what Compare reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// NSD agrees with itself, and Compare sees a different zone.
func TestCompareNSD(t *testing.T) {
	zone, queries := GenerateZone("example.com.", 1, 50)
	a := StartNSD(t, "example.com.", zone)
	b := StartNSD(t, "example.com.", zone)
	Compare(t, a, b, queries)

	changed := strings.Replace(zone, "192.0.2.80", "192.0.2.88", 1)
	c := StartNSD(t, "example.com.", changed)
	r := &recorder{TB: t}
	Compare(r, a, c, queries)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "192.0.2.88") {
		t.Errorf("expected one report showing 192.0.2.88, got %q", r.errs)
	}
}

// A zone NSD cannot load fails the test quickly, with NSD's output.
func TestStartNSDBrokenZone(t *testing.T) {
	if nsdBinary() == "" {
		t.Skip("nsd is not installed")
	}
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartNSD(r, "example.com.", "example.com. 3600 IN A 192.0.2.1\n") // no SOA
	}()
	<-done
	if r.msg == "" {
		t.Fatal("expected StartNSD to fail")
	}
	t.Logf("StartNSD failed as expected: %.200s", r.msg)
}

// fatalRecorder is a testing.TB whose Fatal ends only the goroutine.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
