package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/txn"

	"github.com/miekg/dns"
)

// TestNameFilter: a member's existence filter of a zone holds every name
// with records and every empty non-terminal above one, in both memory
// modes, counts each once, holds the names a prepared transaction part
// touches until it ends, says the applied index it was built at, and
// reports a zone it does not hold.
func TestNameFilter(t *testing.T) {
	for _, paged := range []int{-1, 64} {
		t.Run(fmt.Sprintf("paged=%d", paged), func(t *testing.T) {
			c := &testCluster{t: t, dir: t.TempDir(), members: map[uint64]*Replica{}, paged: paged}
			c.addPeers(1)
			c.startAll()
			r := c.leader()
			const origin = "example.org."
			if _, err := r.PutZone(ctx(t), origin, parseTestZone(t), false); err != nil {
				t.Fatal(err)
			}
			var add []dns.RR
			for _, s := range []string{"a.b.c.example.org. 60 IN A 192.0.2.1", "x.b.c.example.org. 60 IN A 192.0.2.2", "*.w.example.org. 60 IN TXT w", `we\.ird.example.org. 60 IN TXT odd`} {
				add = append(add, mustRR(t, s))
			}
			if _, err := r.Change(ctx(t), origin, add, nil); err != nil {
				t.Fatal(err)
			}
			held := func(name string) bool {
				f, err := r.NameFilter(origin, 1)
				if err != nil {
					t.Fatal(err)
				}
				return f.MayHold(dnsname.CanonicalKey(name), dns.CountLabel(name)-1)
			}
			f, err := r.NameFilter(origin, 1)
			if err != nil {
				t.Fatal(err)
			}
			// org, example.org, ns1, www, c, b.c, a.b.c, x.b.c, w, *.w, we\.ird
			if got := f.Names(); got != 11 {
				t.Errorf("the filter counts %d names, want 11", got)
			}
			if f.Index < r.Applied()-1 || f.Index == 0 {
				t.Errorf("the filter says index %d, the member applied %d", f.Index, r.Applied())
			}
			for _, n := range []string{"example.org.", "www.example.org.", "c.example.org.", "b.c.example.org.", "a.b.c.example.org.", "w.example.org.", "*.w.example.org.", `we\.ird.example.org.`, "A.B.C.Example.ORG."} {
				if !held(n) {
					t.Errorf("%s is not in the filter", n)
				}
			}
			for _, n := range []string{"nx.example.org.", "b.example.org.", "c.b.c.example.org.", "ird.example.org."} {
				if held(n) {
					t.Errorf("%s is in the filter", n)
				}
			}

			// A prepared part's names are held until it ends.
			id := txn.NewID()
			if err := r.TxPrepareChange(ctx(t), id, origin, []dns.RR{mustRR(t, "p.q.example.org. 60 IN A 192.0.2.9")}, nil, []byte(`{"coordinator":{"shard":"a"}}`)); err != nil {
				t.Fatal(err)
			}
			if !held("p.q.example.org.") || !held("q.example.org.") {
				t.Error("the names of a prepared part are not in the filter")
			}
			if err := r.TxAbort(ctx(t), id); err != nil {
				t.Fatal(err)
			}
			if held("q.example.org.") {
				t.Error("the names of an aborted part are in the filter")
			}

			if _, err := r.NameFilter("nx.example.", 1); !errors.Is(err, ErrNotFound) {
				t.Errorf("the filter of a zone not held: got %v, want ErrNotFound", err)
			}
		})
	}
}

// TestInitialMmap: the map leaves room for the file to grow fourfold, 1
// GiB at least, 1 TiB at most (sparse files stand for large ones).
func TestInitialMmap(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ size, want int64 }{{-1, 1 << 30}, {0, 1 << 30}, {100 << 20, 1 << 30}, {2 << 30, 8 << 30}, {1 << 40, 1 << 40}} {
		path := filepath.Join(dir, fmt.Sprint(c.size))
		if c.size >= 0 {
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(c.size); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		if got := initialMmap(path); int64(got) != c.want {
			t.Errorf("a file of %d bytes: mapped with %d, want %d", c.size, got, c.want)
		}
	}
}
