package zone

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"
)

// trie maps canonical owner names to nodes: a persistent hash array mapped
// trie (Bagwell), 64 ways a level on 6 bits of the name's hash, names whose
// 60 bits of hash collide in a list at the bottom. A version of the zone
// holds its root; a write copies the path to each name it changes (about
// four trie nodes for a million names) and shares the rest with the
// version readers may still hold, so a version is never changed once
// published and reads need no lock.
//
// A write carries an edit token: trie nodes (and zone nodes) it made are
// its own and it changes them in place, so a bulk load or a large change
// copies each path once, not once per name.
type trie struct {
	root *tnode
	n    int // names
}

// edit is a write's token. The nodes a write makes hold its id, not a
// pointer to it: a pointer more in every node would be one more for the
// garbage collector to follow in every cycle.
type edit struct {
	id uint64 // unique in the process, never 0
	pk packer // packs the write's RRs (dataNode)
}

// edits numbers the writes.
var edits atomic.Uint64

func newEdit() *edit { return &edit{id: edits.Add(1)} }

type tnode struct {
	bitmap uint64 // which of the 64 slots hold an entry; unused at the bottom
	ents   []tent // the entries of the set slots, in slot order
	ed     uint64 // the id of the write that made this node
}

// tent is a name (its node, which holds the name) or a sub-trie: 16
// bytes, so that the nodes a write copies stay small. A sub-trie's entry
// holds the sub-trie's bitmap too, and a trie node's entries follow its
// header at entsAt: a lookup reads a level's entry without reading the
// level's header, one cache line a level instead of two.
type tent struct {
	p    unsafe.Pointer // *tnode when bits is not 0, else *node
	bits uint64         // the sub-trie's bitmap (1 for a collision list); 0: a name
}

// child returns the sub-trie of e, nil if e is a name.
func (e tent) child() *tnode {
	if e.bits == 0 {
		return nil
	}
	return (*tnode)(e.p)
}

// val returns the name of e, nil if e is a sub-trie.
func (e tent) val() *node {
	if e.bits != 0 {
		return nil
	}
	return (*node)(e.p)
}

func nameEnt(v *node) tent { return tent{p: unsafe.Pointer(v)} }

func childEnt(c *tnode) tent {
	b := c.bitmap
	if b == 0 {
		b = 1 // a collision list, which has no bitmap
	}
	return tent{p: unsafe.Pointer(c), bits: b}
}

// entsAt is where a trie node's entries start in its allocation (newTnode),
// for every node above the collision lists.
const entsAt = unsafe.Offsetof(tnode1{}.a)

type tnode1 struct {
	t tnode
	a [1]tent
}

var trieSeed = maphash.MakeSeed()

const (
	trieBits  = 6
	trieSlots = 1<<trieBits - 1
	trieLeaf  = 60 // the shift at which names collide in a list
)

// get returns the node at key, nil if none.
func (t *trie) get(key string) *node {
	return t.find(maphash.String(trieSeed, key), key)
}

// getBytes is get for a name in a byte slice (a lookup's stack buffer): it
// does not allocate.
func (t *trie) getBytes(key []byte) *node {
	return t.find(maphash.Bytes(trieSeed, key), unsafe.String(unsafe.SliceData(key), len(key)))
}

func (t *trie) find(h uint64, key string) *node {
	n := t.root
	if n == nil {
		return nil
	}
	p, bitmap := unsafe.Pointer(n), n.bitmap
	for shift := uint(0); ; shift += trieBits {
		if shift >= trieLeaf {
			n := (*tnode)(p)
			for i := range n.ents {
				if v := n.ents[i].val(); v.name == key {
					return v
				}
			}
			return nil
		}
		bit := uint64(1) << ((h >> shift) & trieSlots)
		if bitmap&bit == 0 {
			return nil
		}
		e := (*tent)(unsafe.Add(p, entsAt+uintptr(bits.OnesCount64(bitmap&(bit-1)))*unsafe.Sizeof(tent{})))
		if e.bits == 0 {
			if v := (*node)(e.p); v.name == key {
				return v
			}
			return nil
		}
		p, bitmap = e.p, e.bits
	}
}

// set makes key map to val (nil: removes key) in t, changing in place only
// the trie nodes ed made. val.name is key.
func (t *trie) set(ed *edit, key string, val *node) {
	root, delta := assoc(t.root, ed, 0, maphash.String(trieSeed, key), key, val)
	t.root = root
	t.n += delta
}

// mine returns n if ed made it, else a copy of n that ed makes, with room
// for one more entry.
func (n *tnode) mine(ed *edit) *tnode {
	if n.ed == ed.id {
		return n
	}
	if len(n.ents) >= 1<<trieBits {
		// A full node takes no more entries (a collision list that does
		// grows in insert): room for one more would double it.
		return newTnode(ed, n.bitmap, n.ents, 0)
	}
	return newTnode(ed, n.bitmap, n.ents, 1)
}

// newTnode returns a node of ed holding ents, with room for extra more,
// allocated together with its entries (a lookup then takes one cache miss
// a level, not two), in the smallest of tnodeSizes that holds them.
func newTnode(ed *edit, bitmap uint64, ents []tent, extra int) *tnode {
	var t *tnode
	if n := len(ents) + extra; n <= 1<<trieBits {
		t = tnodeSizes[tnodeSize[n]].mk()
	} else { // a collision list longer than 64
		t = &tnode{ents: make([]tent, 0, n)}
	}
	t.bitmap, t.ed = bitmap, ed.id
	t.ents = append(t.ents, ents...)
	return t
}

// tnodeSizes are the numbers of entries trie nodes have room for: every
// number up to 8, which is how many names most nodes at the bottom of a
// trie hold (a million names fill two levels of 64 and put 1-8 names in
// most nodes of the third), then steps of an eighth to a quarter. A node
// of n entries takes 40+16n bytes, rounded up to one of the runtime's
// size classes; sizes in powers of two left a third of the entries of a
// zone's trie empty (BenchmarkMemory).
var tnodeSizes = [...]struct {
	n  int
	mk func() *tnode
}{
	{1, mkTnode[[1]tent]}, {2, mkTnode[[2]tent]}, {3, mkTnode[[3]tent]}, {4, mkTnode[[4]tent]},
	{5, mkTnode[[5]tent]}, {6, mkTnode[[6]tent]}, {7, mkTnode[[7]tent]}, {8, mkTnode[[8]tent]},
	{10, mkTnode[[10]tent]}, {12, mkTnode[[12]tent]}, {14, mkTnode[[14]tent]}, {16, mkTnode[[16]tent]},
	{20, mkTnode[[20]tent]}, {24, mkTnode[[24]tent]}, {32, mkTnode[[32]tent]}, {40, mkTnode[[40]tent]},
	{48, mkTnode[[48]tent]}, {64, mkTnode[[64]tent]},
}

// tnodeSize is the index in tnodeSizes of the smallest size that holds n
// entries, for n up to 64.
var tnodeSize = func() (idx [1<<trieBits + 1]uint8) {
	i := 0
	for n := range idx {
		for tnodeSizes[i].n < n {
			i++
		}
		idx[n] = uint8(i)
	}
	return idx
}()

// mkTnode allocates a trie node with its entries (A is an array of tent)
// right after it, at entsAt.
func mkTnode[A any]() *tnode {
	b := new(struct {
		t tnode
		a A
	})
	b.t.ents = unsafe.Slice((*tent)(unsafe.Pointer(&b.a)), unsafe.Sizeof(b.a)/unsafe.Sizeof(tent{}))[:0]
	return &b.t
}

// insert returns m (ed's) with e inserted at i, in a larger node of ed when
// m has no room.
func (m *tnode) insert(ed *edit, i int, e tent) *tnode {
	if len(m.ents) == cap(m.ents) {
		// Up to a full node, the next of tnodeSizes, its entries with it
		// (entsAt); only a collision list grows past that, doubling.
		grow := 1
		if len(m.ents) >= 1<<trieBits {
			grow = len(m.ents)
		}
		m = newTnode(ed, m.bitmap, m.ents, grow)
	}
	m.ents = slices.Insert(m.ents, i, e)
	return m
}

// assoc returns the trie n with key mapped to val (removed when val is
// nil; nil when nothing is left) and the change in the number of names.
func assoc(n *tnode, ed *edit, shift uint, h uint64, key string, val *node) (*tnode, int) {
	if n == nil {
		if val == nil {
			return nil, 0
		}
		n = newTnode(ed, 0, nil, 2)
	}
	if shift >= trieLeaf {
		for i := range n.ents {
			if n.ents[i].val().name != key {
				continue
			}
			m := n.mine(ed)
			if val == nil {
				m.ents = slices.Delete(m.ents, i, i+1)
				if len(m.ents) == 0 {
					return nil, -1
				}
				return m, -1
			}
			m.ents[i] = nameEnt(val)
			return m, 0
		}
		if val == nil {
			return n, 0
		}
		m := n.mine(ed)
		return m.insert(ed, len(m.ents), nameEnt(val)), 1
	}
	bit := uint64(1) << ((h >> shift) & trieSlots)
	i := bits.OnesCount64(n.bitmap & (bit - 1))
	if n.bitmap&bit == 0 {
		if val == nil {
			return n, 0
		}
		m := n.mine(ed).insert(ed, i, nameEnt(val))
		m.bitmap |= bit
		return m, 1
	}
	e := n.ents[i]
	if c0 := e.child(); c0 != nil {
		c, delta := assoc(c0, ed, shift+trieBits, h, key, val)
		if c == c0 && childEnt(c) == e {
			// Unchanged, or changed in place without a new bitmap. A
			// child changed in place is ed's, so n is ed's too (ed
			// copied the path to it): a new bitmap is written in n.
			return n, delta
		}
		m := n.mine(ed)
		switch {
		case c == nil:
			return m.drop(i, bit), delta
		case len(c.ents) == 1 && c.ents[0].bits == 0:
			m.ents[i] = c.ents[0] // one name left below: it moves up
		default:
			m.ents[i] = childEnt(c)
		}
		return m, delta
	}
	if old := e.val(); old.name == key {
		m := n.mine(ed)
		if val == nil {
			return m.drop(i, bit), -1
		}
		m.ents[i] = nameEnt(val)
		return m, 0
	}
	// Another name holds the slot: both go one level down.
	if val == nil {
		return n, 0
	}
	old := e.val()
	c, _ := assoc(nil, ed, shift+trieBits, maphash.String(trieSeed, old.name), old.name, old)
	c, _ = assoc(c, ed, shift+trieBits, h, key, val)
	m := n.mine(ed)
	m.ents[i] = childEnt(c)
	return m, 1
}

// drop removes entry i (slot bit) from m, which ed made; nil when nothing
// is left.
func (m *tnode) drop(i int, bit uint64) *tnode {
	m.ents = slices.Delete(m.ents, i, i+1)
	m.bitmap &^= bit
	if len(m.ents) == 0 {
		return nil
	}
	return m
}

// walk calls fn with every name below t, until fn returns false.
func (t *tnode) walk(fn func(*node) bool) bool {
	for _, e := range t.ents {
		if c := e.child(); c != nil {
			if !c.walk(fn) {
				return false
			}
		} else if n := e.val(); n != nil && !fn(n) {
			return false
		}
	}
	return true
}
