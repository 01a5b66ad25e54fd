package namefilter

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/miekg/dns"
)

func key(name string) []byte { return dnsname.CanonicalKey(name) }

// TestHolds: every name added, and every ancestor of it, is held; the
// names counted are the distinct ones when keys come in canonical order.
func TestHolds(t *testing.T) {
	names := []string{"example.org.", "a.b.c.example.org.", "x.b.c.example.org.", "*.w.example.org.", "y.example.org.", `we\.ird.example.org.`}
	keys := make([][]byte, len(names))
	for i, n := range names {
		keys[i] = key(n)
	}
	slices.SortFunc(keys, bytes.Compare)
	f := New(len(names), 42)
	var prev []byte
	for _, k := range keys {
		f.AddKeys(k, SharedPrefix(prev, k))
		prev = k
	}
	// org, example.org, c.example.org, b.c..., a.b.c..., x.b.c...,
	// w.example.org, *.w..., y..., we\.ird...
	if got := f.Names(); got != 10 {
		t.Errorf("Names() = %d, want 10", got)
	}
	held := []string{"org.", "example.org.", "c.example.org.", "b.c.example.org.", "a.b.c.example.org.", "w.example.org.", "*.w.example.org.", `we\.ird.example.org.`}
	for _, n := range held {
		// Labels of the name itself: only the name counts.
		if !f.MayHold(key(n), dns.CountLabel(n)-1) {
			t.Errorf("%s is not held", n)
		}
	}
	// Absent names whose only relevant names are absent.
	for _, c := range []struct {
		name   string
		labels int // the owner's closest encloser
	}{
		{"nx.example.org.", 2},
		{"nx.c.example.org.", 3},
		{"deep.nx.example.org.", 2},
	} {
		if f.MayHold(key(c.name), c.labels) {
			// A false positive is possible; with this seed there is none.
			t.Errorf("MayHold(%s, %d) = true", c.name, c.labels)
		}
	}
	// A deeper encloser held here, or the wildcard at the owner's.
	for _, c := range []struct {
		name   string
		labels int
	}{
		{"nx.b.c.example.org.", 2},  // b.c.example.org is deeper than 2 labels
		{"nx.w.example.org.", 3},    // *.w.example.org
		{"q.a.b.c.example.org.", 4}, // a.b.c.example.org has 5
		{"b.c.example.org.", 2},     // the name itself
	} {
		if !f.MayHold(key(c.name), c.labels) {
			t.Errorf("MayHold(%s, %d) = false", c.name, c.labels)
		}
	}
}

// TestRootWildcard: the root zone's wildcard counts for labels 0.
func TestRootWildcard(t *testing.T) {
	f := New(1, 7)
	f.AddKey(key("*."))
	if !f.MayHold(key("nx."), 0) {
		t.Error("the root wildcard is not seen")
	}
	g := New(1, 7)
	g.AddKey(key("com."))
	if g.MayHold(key("nx."), 0) {
		t.Error("a root zone without a wildcard holds nx.")
	}
}

// TestFalsePositives: absent names pass at about the designed rate.
func TestFalsePositives(t *testing.T) {
	const n = 100000
	f := New(n, 0x5eed)
	for i := range n {
		f.AddKey(key(fmt.Sprintf("host-%d.example.org.", i)))
	}
	fp := 0
	for i := range n {
		if f.MayHold(key(fmt.Sprintf("nx-%d.example.org.", i)), 2) {
			fp++
		}
	}
	// 2^21 bits for 100,000 names (21 a name, k 12): well under 1%; the
	// wildcard "*.example.org." is probed too.
	if rate := float64(fp) / n; rate > 0.01 {
		t.Errorf("false positives %.4f, want under 0.01 (%d bits, k %d)", rate, len(f.words)*64, f.k)
	}
	for i := range n {
		if !f.MayHold(key(fmt.Sprintf("host-%d.example.org.", i)), 2) {
			t.Fatalf("host-%d is not held", i)
		}
	}
}

// TestSeeds: two seeds set different bits for one name.
func TestSeeds(t *testing.T) {
	a, b := New(1000, 1), New(1000, 2)
	a.AddKey(key("x.example."))
	b.AddKey(key("x.example."))
	if slices.Equal(a.words, b.words) {
		t.Error("the seed does not change the bits")
	}
}

func TestEncoding(t *testing.T) {
	f := New(5000, 99)
	f.Index, f.Epoch = 1234, 7
	for i := range 5000 {
		f.AddKey(key(fmt.Sprintf("n%d.zone.", i)))
	}
	b, err := f.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != f.EncodedLen() {
		t.Fatalf("encoded %d bytes, EncodedLen %d", len(b), f.EncodedLen())
	}
	g, err := Decode(b, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if g.seed != f.seed || g.k != f.k || g.log2 != f.log2 || g.Names() != f.Names() || g.Index != 1234 || g.Epoch != 7 || !slices.Equal(g.words, f.words) {
		t.Error("decoded filter differs")
	}
	if _, err := Decode(b, f.Bytes()-1); err == nil {
		t.Error("a filter over the limit was decoded")
	}
	for _, bad := range [][]byte{nil, b[:HeaderLen], b[:len(b)-1], append(slices.Clone(b), 0), append([]byte("XNF1"), b[4:]...)} {
		if _, err := Decode(bad, 1<<30); err == nil {
			t.Errorf("Decode of %d bad bytes succeeded", len(bad))
		}
	}
	bad := slices.Clone(b)
	bad[5] = 40 // 2^40 bits
	if _, err := Decode(bad, 1<<30); err == nil {
		t.Error("a size over MaxBits was decoded")
	}
}

func FuzzDecode(f *testing.F) {
	g := New(10, 1)
	g.AddKey(key("a.b."))
	b, _ := g.AppendBinary(nil)
	f.Add(b)
	f.Add([]byte("CNF1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Decode(b, 1<<16)
		if err != nil {
			return
		}
		out, _ := g.AppendBinary(nil)
		if !bytes.Equal(out, b) {
			t.Error("a decoded filter encodes differently")
		}
		g.MayHold(key("x.a.b."), 1)
	})
}

func BenchmarkMayHold(b *testing.B) {
	f := New(1000000, 3)
	k := key("nx-12345.devices.example.org.")
	for b.Loop() {
		f.MayHold(k, 3)
	}
}
