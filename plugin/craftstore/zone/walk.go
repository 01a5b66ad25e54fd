package zone

import "github.com/miekg/dns"

// The steps of RFC 1034 §4.3.2 (3a-3c) as separate facts about a lower-case
// query name: where it exists, which delegation covers it, which wildcard
// could synthesize it. Names are byte slices (usually a stack buffer);
// offsets into them denote the name's ancestors. Callers hold the read lock.

// closestEncloser returns the deepest existing name among name and its
// ancestors in the zone (RFC 4592 §3.3.1; empty non-terminals exist) and its
// offset in name: 0 when name itself exists. ok is false when name is not in
// the zone.
func (z *Zone) closestEncloser(name []byte) (n *node, off int, ok bool) {
	apex := len(name) - len(z.origin)
	if apex < 0 || string(name[apex:]) != z.origin {
		return nil, 0, false
	}
	for off = 0; off < apex; off = nextLabel(name, off) {
		if n := z.names[string(name[off:])]; n != nil {
			return n, off, true
		}
	}
	if off == len(name) && apex == len(name)-1 {
		off = apex // the root zone: "." is the final byte, not a label start
	}
	if off != apex {
		return nil, 0, false // the origin matched in the middle of a label
	}
	return z.apex, apex, true
}

// exact returns the node at name, nil if name does not exist in the zone.
func (z *Zone) exact(name []byte) *node {
	return z.names[string(name)]
}

// delegation returns the zone cut that covers name, nil if none (RFC 1034
// §4.3.2 step 3b). encl is the closest encloser of name at offset off; only
// it and its ancestors can hold NS. With nested cuts the topmost one wins:
// everything below it, other cuts included, is not authoritative data. A DS
// query for the cut itself is answered by this, the parent, side (RFC 4035
// §3.1.4.1), so that cut does not count; a cut above it still does.
func (z *Zone) delegation(name []byte, encl *node, off int, qtype uint16) *node {
	cut, _ := z.delegationAt(name, encl, off, qtype)
	return cut
}

// delegationAt is delegation, with the offset of the cut in name.
func (z *Zone) delegationAt(name []byte, encl *node, off int, qtype uint16) (*node, int) {
	if z.cuts == 0 {
		return nil, 0
	}
	apex := len(name) - len(z.origin)
	var cut *node
	cutOff := 0
	for n := encl; off < apex; off = nextLabel(name, off) {
		if n == nil {
			n = z.names[string(name[off:])]
		}
		if n != nil && n.flags&fCut != 0 {
			cut, cutOff = n, off
		}
		n = nil
	}
	if cut != nil && cutOff == 0 && qtype == dns.TypeDS {
		return nil, 0
	}
	return cut, cutOff
}

// dname returns the DNAME that applies to name, and the offset of its owner
// in name, or nil: the topmost name strictly above name (at offset off or
// above, encl being the node at off) that holds a DNAME (RFC 6672 §3.2; a
// zone holds no names below a DNAME owner, so this is the closest encloser
// whenever there is one).
func (z *Zone) dname(name []byte, encl *node, off int) (*node, int) {
	if z.dnames == 0 {
		return nil, 0
	}
	apex := len(name) - len(z.origin)
	if off == 0 {
		// name itself exists: a DNAME there does not apply to it.
		if apex == 0 {
			return nil, 0
		}
		encl, off = nil, nextLabel(name, 0)
	}
	var d *node
	dOff := 0
	for n := encl; off < apex; off = nextLabel(name, off) {
		if n == nil {
			n = z.names[string(name[off:])]
		}
		if n != nil && n.flags&fDNAME != 0 {
			d, dOff = n, off
		}
		n = nil
	}
	if z.apex.flags&fDNAME != 0 {
		d, dOff = z.apex, apex
	}
	return d, dOff
}

// wildcard returns the source of synthesis for a name whose closest encloser
// is encl: the node "*.<closest encloser>", nil if it does not exist (RFC
// 4592 §3.3.1). Only the closest encloser's wildcard child counts, so a
// wildcard never matches a name at or below an existing name, empty
// non-terminals included (RFC 4592 §2.2.2). A wildcard that is itself an
// empty non-terminal is still a source: it synthesizes NODATA.
func (z *Zone) wildcard(encl *node) *node {
	if encl.flags&fWild == 0 {
		return nil
	}
	return z.wilds[encl]
}
