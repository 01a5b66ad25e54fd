package zone

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestTrie: random sets and removals agree with a map; a version taken
// before a write (another edit) is unchanged by it; collisions at the
// bottom of the trie work (a hash function that collides is forced by
// taking names whose hashes the test does not control: every name is also
// checked through the collision path by a direct assoc at trieLeaf).
func TestTrie(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var tr trie
	want := map[string]*node{}
	type snap struct {
		t    trie
		want map[string]*node
	}
	var snaps []snap
	for round := range 40 {
		ed := newEdit()
		for range 500 {
			k := fmt.Sprintf("n%d.example.org.", rnd.IntN(3000))
			if rnd.IntN(3) == 0 {
				tr.set(ed, k, nil)
				delete(want, k)
			} else {
				v := &node{name: k, kids: uint32(rnd.IntN(1000))}
				tr.set(ed, k, v)
				want[k] = v
			}
		}
		if tr.n != len(want) {
			t.Fatalf("round %d: %d names, want %d", round, tr.n, len(want))
		}
		checkTrie(t, tr.root, 0)
		for k, v := range want {
			if got := tr.get(k); got != v {
				t.Fatalf("round %d: %s: got %p, want %p", round, k, got, v)
			}
			if got := tr.getBytes([]byte(k)); got != v {
				t.Fatalf("round %d: %s (bytes): got %p, want %p", round, k, got, v)
			}
		}
		for i := range 3000 {
			k := fmt.Sprintf("n%d.example.org.", i)
			if _, ok := want[k]; !ok && tr.get(k) != nil {
				t.Fatalf("round %d: %s found after its removal", round, k)
			}
		}
		w := make(map[string]*node, len(want))
		for k, v := range want {
			w[k] = v
		}
		snaps = append(snaps, snap{tr, w})
	}
	for i, s := range snaps {
		checkTrie(t, s.t.root, 0)
		for k, v := range s.want {
			if s.t.get(k) != v {
				t.Fatalf("version %d changed by a later write: %s", i, k)
			}
		}
	}

	// The list at the bottom: names that share 60 bits of hash, more than
	// a node's 64 slots, written by several edits (a later edit copies the
	// list, full or not, and grows it).
	const colliding = 70
	ed := newEdit()
	var bottom *tnode
	for i := range colliding {
		if i%16 == 0 {
			ed = newEdit()
		}
		bottom, _ = assoc(bottom, ed, trieLeaf, 42, fmt.Sprint(i), &node{name: fmt.Sprint(i), kids: uint32(i)})
	}
	if len(bottom.ents) != colliding {
		t.Fatalf("collision list of %d names, want %d", len(bottom.ents), colliding)
	}
	for i := range colliding {
		if n := findAt(bottom, fmt.Sprint(i)); n == nil || n.kids != uint32(i) {
			t.Fatalf("collision list: %d not found", i)
		}
	}
	for i := range colliding {
		bottom, _ = assoc(bottom, newEdit(), trieLeaf, 42, fmt.Sprint(i), nil)
	}
	if bottom != nil {
		t.Fatalf("collision list not empty after removing every name: %+v", bottom)
	}
}

// findAt looks key up in the collision list n.
func findAt(n *tnode, key string) *node {
	for i := range n.ents {
		if v := n.ents[i].val(); v.name == key {
			return v
		}
	}
	return nil
}

// checkTrie checks what find relies on: above the collision lists, a trie
// node's entries are where entsAt says and its bitmap has a bit per entry,
// and an entry for a sub-trie holds the sub-trie's bitmap (1 for a list).
func checkTrie(t *testing.T, n *tnode, shift uint) {
	t.Helper()
	if n == nil {
		return
	}
	if shift >= trieLeaf {
		for _, e := range n.ents {
			if e.bits != 0 {
				t.Fatalf("collision list at shift %d holds a sub-trie", shift)
			}
		}
		return
	}
	if len(n.ents) == 0 || bits.OnesCount64(n.bitmap) != len(n.ents) {
		t.Fatalf("trie node at shift %d: %d entries, bitmap %x", shift, len(n.ents), n.bitmap)
	}
	if got := uintptr(unsafe.Pointer(unsafe.SliceData(n.ents))) - uintptr(unsafe.Pointer(n)); got != entsAt {
		t.Fatalf("trie node at shift %d: entries at %d from its start, not %d", shift, got, entsAt)
	}
	for _, e := range n.ents {
		c := e.child()
		if c == nil {
			continue
		}
		if want := childEnt(c).bits; e.bits != want {
			t.Fatalf("entry at shift %d: bitmap %x, its sub-trie's %x", shift, e.bits, want)
		}
		checkTrie(t, c, shift+trieBits)
	}
}

// TestTnodeSizes: every size of trie node holds its entries right after
// it (entsAt, where find reads them), with room for exactly its number,
// and newTnode picks the smallest size that holds what it is asked for.
func TestTnodeSizes(t *testing.T) {
	ed := newEdit()
	for i, s := range tnodeSizes {
		n := s.mk()
		if cap(n.ents) != s.n || len(n.ents) != 0 {
			t.Errorf("size %d: len %d cap %d", s.n, len(n.ents), cap(n.ents))
		}
		if at := unsafe.Pointer(unsafe.SliceData(n.ents)); at != unsafe.Add(unsafe.Pointer(n), entsAt) {
			t.Errorf("size %d: entries at %p, not at the node's entsAt", s.n, at)
		}
		if i > 0 && tnodeSizes[i-1].n >= s.n {
			t.Errorf("sizes out of order at %d", s.n)
		}
	}
	for want := 1; want <= 1<<trieBits; want++ {
		got, smallest := cap(newTnode(ed, 0, nil, want).ents), 0
		for _, s := range tnodeSizes {
			if s.n >= want {
				smallest = s.n
				break
			}
		}
		if got != smallest {
			t.Errorf("newTnode for %d entries: room for %d, want %d", want, got, smallest)
		}
	}
	if got := cap(newTnode(ed, 0, nil, 100).ents); got != 100 {
		t.Errorf("a collision list of 100: room for %d", got)
	}
}
