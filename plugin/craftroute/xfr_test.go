package craftroute

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/craftdns/craftdns/internal/xfrstream"

	"github.com/miekg/dns"
)

func rrs(t *testing.T, lines ...string) []dns.RR {
	t.Helper()
	out := make([]dns.RR, len(lines))
	for i, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = rr
	}
	return out
}

// stream is a shard's transfer stream of the frames given; without end, it
// is cut short.
func stream(t *testing.T, shard string, zoneSerial uint32, end bool, frames ...[]dns.RR) *shardXfr {
	t.Helper()
	var b bytes.Buffer
	w := xfrstream.NewWriter(&b)
	for _, f := range frames {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if end {
		w.End()
	} else {
		w.Flush()
	}
	return &shardXfr{shard: &Shard{Name: shard}, body: io.NopCloser(&b), rd: xfrstream.NewReader(&b),
		idle: time.NewTimer(time.Hour), zoneSerial: zoneSerial}
}

func collect(t *testing.T, merge func(send func([]dns.RR) error) error) ([]string, error) {
	t.Helper()
	var out []string
	err := merge(func(batch []dns.RR) error {
		for _, rr := range batch {
			f := strings.Fields(rr.String())
			out = append(out, f[0]+" "+strings.Join(f[3:], " "))
		}
		return nil
	})
	return out, err
}

const (
	soaA = "example.org. 300 IN SOA ns1.example.org. h.example.org. 7 3600 600 86400 300"
	soaB = "example.org. 300 IN SOA ns1.example.org. h.example.org. 12 3600 600 86400 300"
)

// TestMergeFull: the shards' zones merged in canonical order, the names
// every shard holds once, a DNAME owner with the RRsets only its own shard
// holds, framed by the SOA at the zone serial.
func TestMergeFull(t *testing.T) {
	a := stream(t, "a", 20, true,
		rrs(t, soaA, "example.org. 300 IN NS ns1.example.org.", "a.example.org. 60 IN A 192.0.2.1"),
		rrs(t, "d.example.org. 60 IN DNAME a.example.org.", "sub.example.org. 60 IN NS ns.sub.example.org.", "ns.sub.example.org. 60 IN A 192.0.2.53", "z.example.org. 60 IN A 192.0.2.26", soaA))
	b := stream(t, "b", 20, true,
		rrs(t, soaB, "example.org. 300 IN NS ns1.example.org.", "d.example.org. 60 IN DNAME a.example.org.", "d.example.org. 60 IN TXT \"beside\"", "ns1.example.org. 60 IN A 192.0.2.2", "sub.example.org. 60 IN NS ns.sub.example.org."),
		rrs(t, "ns.sub.example.org. 60 IN A 192.0.2.53", soaB))
	xs := []*shardXfr{a, b}
	if err := startFull(xs); err != nil {
		t.Fatal(err)
	}
	got, err := collect(t, func(send func([]dns.RR) error) error { return mergeFull(xs, 0, send) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"example.org. SOA ns1.example.org. h.example.org. 20 3600 600 86400 300",
		"example.org. NS ns1.example.org.",
		"a.example.org. A 192.0.2.1",
		"d.example.org. DNAME a.example.org.",
		"d.example.org. TXT \"beside\"",
		"ns1.example.org. A 192.0.2.2",
		"sub.example.org. NS ns.sub.example.org.",
		"ns.sub.example.org. A 192.0.2.53",
		"z.example.org. A 192.0.2.26",
		"example.org. SOA ns1.example.org. h.example.org. 20 3600 600 86400 300",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("expected\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}

	// Up to date: the SOA alone.
	xs = []*shardXfr{stream(t, "a", 20, true, rrs(t, soaA, "a.example.org. 60 IN A 192.0.2.1", soaA))}
	startFull(xs)
	if got, _ := collect(t, func(send func([]dns.RR) error) error { return mergeFull(xs, 20, send) }); len(got) != 1 {
		t.Errorf("IXFR from the zone serial: expected the SOA alone, got %v", got)
	}

	// A stream cut short, or without its closing SOA, fails the transfer.
	for _, x := range []*shardXfr{
		stream(t, "a", 20, false, rrs(t, soaA, "a.example.org. 60 IN A 192.0.2.1"), rrs(t, soaA)),
		stream(t, "a", 20, true, rrs(t, soaA, "a.example.org. 60 IN A 192.0.2.1")),
		stream(t, "a", 20, true, rrs(t, soaA, "a.example.org. 60 IN A 192.0.2.1", soaA, "b.example.org. 60 IN A 192.0.2.1")),
	} {
		xs := []*shardXfr{x}
		if err := startFull(xs); err != nil {
			continue
		}
		if _, err := collect(t, func(send func([]dns.RR) error) error { return mergeFull(xs, 0, send) }); err == nil {
			t.Error("expected a broken stream to fail the transfer")
		}
	}
}

// TestMergeIncremental: the shards' differences merged into one, a change
// every shard made (the apex) once; a shard that did not change sends the
// SOA alone; a shard that sends its whole zone makes it a full transfer.
func TestMergeIncremental(t *testing.T) {
	old := "example.org. 300 IN SOA ns1.example.org. h.example.org. 5 3600 600 86400 300"
	a := stream(t, "a", 20, true, rrs(t, soaA, old,
		"example.org. 300 IN NS ns0.example.org.", "gone.example.org. 60 IN A 192.0.2.9", soaA,
		"example.org. 300 IN NS ns2.example.org.", "new.example.org. 60 IN A 192.0.2.10", soaA))
	b := stream(t, "b", 20, true, rrs(t, soaB, old, "example.org. 300 IN NS ns0.example.org."),
		rrs(t, soaB, "example.org. 300 IN NS ns2.example.org.", "b.example.org. 60 IN TXT \"x\"", soaB))
	c := stream(t, "c", 20, true, rrs(t, soaA))
	xs := []*shardXfr{a, b, c}
	if ok, err := startIncremental(xs); !ok || err != nil {
		t.Fatalf("expected incremental streams, got %v %v", ok, err)
	}
	got, err := collect(t, func(send func([]dns.RR) error) error { return mergeIncremental(xs, 18, send) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"example.org. SOA ns1.example.org. h.example.org. 20 3600 600 86400 300",
		"example.org. SOA ns1.example.org. h.example.org. 18 3600 600 86400 300",
		"example.org. NS ns0.example.org.",
		"gone.example.org. A 192.0.2.9",
		"example.org. SOA ns1.example.org. h.example.org. 20 3600 600 86400 300",
		"example.org. NS ns2.example.org.",
		"b.example.org. TXT \"x\"",
		"new.example.org. A 192.0.2.10",
		"example.org. SOA ns1.example.org. h.example.org. 20 3600 600 86400 300",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("expected\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}

	full := []*shardXfr{stream(t, "a", 20, true, rrs(t, soaA, "a.example.org. 60 IN A 192.0.2.1", soaA))}
	if ok, err := startIncremental(full); ok || err != nil {
		t.Errorf("a shard that sends its whole zone: expected no incremental transfer, got %v %v", ok, err)
	}
}
