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

// tent is a name (its node, which holds the name) or a sub-trie (child):
// 16 bytes, so that the nodes a write copies stay small.
type tent struct {
	child *tnode
	val   *node
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
	for shift := uint(0); n != nil; shift += trieBits {
		if shift >= trieLeaf {
			for i := range n.ents {
				if n.ents[i].val.name == key {
					return n.ents[i].val
				}
			}
			return nil
		}
		bit := uint64(1) << ((h >> shift) & trieSlots)
		if n.bitmap&bit == 0 {
			return nil
		}
		e := &n.ents[bits.OnesCount64(n.bitmap&(bit-1))]
		if e.child == nil {
			if e.val.name == key {
				return e.val
			}
			return nil
		}
		n = e.child
	}
	return nil
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
// a level, not two): room in sizes 1, 2, 4, ... 64.
func newTnode(ed *edit, bitmap uint64, ents []tent, extra int) *tnode {
	var t *tnode
	switch n := len(ents) + extra; {
	case n <= 1:
		b := new(struct {
			t tnode
			a [1]tent
		})
		t = &b.t
		t.ents = b.a[:0]
	case n <= 2:
		b := new(struct {
			t tnode
			a [2]tent
		})
		t = &b.t
		t.ents = b.a[:0]
	case n <= 4:
		b := new(struct {
			t tnode
			a [4]tent
		})
		t = &b.t
		t.ents = b.a[:0]
	case n <= 8:
		b := new(struct {
			t tnode
			a [8]tent
		})
		t = &b.t
		t.ents = b.a[:0]
	case n <= 16:
		b := new(struct {
			t tnode
			a [16]tent
		})
		t = &b.t
		t.ents = b.a[:0]
	case n <= 32:
		b := new(struct {
			t tnode
			a [32]tent
		})
		t = &b.t
		t.ents = b.a[:0]
	case n <= 64:
		b := new(struct {
			t tnode
			a [64]tent
		})
		t = &b.t
		t.ents = b.a[:0]
	default: // a collision list longer than 64
		t = &tnode{ents: make([]tent, 0, n)}
	}
	t.bitmap, t.ed = bitmap, ed.id
	t.ents = append(t.ents, ents...)
	return t
}

// insert returns m (ed's) with e inserted at i, in a larger node of ed when
// m has no room.
func (m *tnode) insert(ed *edit, i int, e tent) *tnode {
	if len(m.ents) == cap(m.ents) {
		m = newTnode(ed, m.bitmap, m.ents, 1+len(m.ents)) // doubles
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
			if n.ents[i].val.name != key {
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
			m.ents[i].val = val
			return m, 0
		}
		if val == nil {
			return n, 0
		}
		m := n.mine(ed)
		return m.insert(ed, len(m.ents), tent{val: val}), 1
	}
	bit := uint64(1) << ((h >> shift) & trieSlots)
	i := bits.OnesCount64(n.bitmap & (bit - 1))
	if n.bitmap&bit == 0 {
		if val == nil {
			return n, 0
		}
		m := n.mine(ed).insert(ed, i, tent{val: val})
		m.bitmap |= bit
		return m, 1
	}
	e := n.ents[i]
	switch {
	case e.child != nil:
		c, delta := assoc(e.child, ed, shift+trieBits, h, key, val)
		if c == e.child {
			return n, delta
		}
		m := n.mine(ed)
		switch {
		case c == nil:
			return m.drop(i, bit), delta
		case len(c.ents) == 1 && c.ents[0].child == nil:
			m.ents[i] = c.ents[0] // one name left below: it moves up
		default:
			m.ents[i].child = c
		}
		return m, delta
	case e.val.name == key:
		m := n.mine(ed)
		if val == nil {
			return m.drop(i, bit), -1
		}
		m.ents[i].val = val
		return m, 0
	}
	// Another name holds the slot: both go one level down.
	if val == nil {
		return n, 0
	}
	c, _ := assoc(nil, ed, shift+trieBits, maphash.String(trieSeed, e.val.name), e.val.name, e.val)
	c, _ = assoc(c, ed, shift+trieBits, h, key, val)
	m := n.mine(ed)
	m.ents[i] = tent{child: c}
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
