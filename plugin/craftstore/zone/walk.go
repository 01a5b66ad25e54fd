package zone

import "github.com/miekg/dns"

// The steps of RFC 1034 §4.3.2 (3a-3c) as separate facts about a lower-case
// query name: where it exists, which delegation covers it, which wildcard
// could synthesize it. Names are byte slices (usually a stack buffer);
// offsets into them denote the name's ancestors. They read one version.

// closestEncloser returns the deepest existing name among name and its
// ancestors in the zone (RFC 4592 §3.3.1; empty non-terminals exist) and its
// offset in name: 0 when name itself exists. ok is false when name is not in
// the zone.
func (z *view) closestEncloser(name []byte) (n *node, off int, ok bool) {
	apex := len(name) - len(z.origin)
	if apex < 0 || string(name[apex:]) != z.origin {
		return nil, 0, false
	}
	for off = 0; off < apex; off = nextLabel(name, off) {
		if n := z.get(name[off:]); n != nil {
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
func (z *view) exact(name []byte) *node {
	return z.get(name)
}

// above returns what name's ancestors say about it, in one walk from its
// closest encloser encl (at offset off in name) up to the apex:
//
//   - cut, the zone cut that covers name, nil if none (RFC 1034 §4.3.2 step
//     3b). Only encl and its ancestors can hold NS. With nested cuts the
//     topmost one wins: everything below it, other cuts included, is not
//     authoritative data. A DS query for the cut itself is answered by this,
//     the parent, side (RFC 4035 §3.1.4.1), so that cut does not count; a
//     cut above it still does.
//   - d, the DNAME that substitutes name, nil if none: the topmost name
//     strictly above name that holds a DNAME (RFC 6672 §3.2; a zone holds no
//     names below a DNAME owner, so it is the closest encloser whenever there
//     is one).
//
// Each comes with the offset of its owner in name. Zones without cuts and
// DNAMEs skip the walk.
func (z *view) above(name []byte, encl *node, off int, qtype uint16) (cut *node, cutOff int, d *node, dOff int) {
	if z.cuts == 0 && z.dnames == 0 {
		return nil, 0, nil, 0
	}
	apex := len(name) - len(z.origin)
	for n := encl; off < apex; off = nextLabel(name, off) {
		if n == nil {
			n = z.get(name[off:])
		}
		if n != nil {
			if n.flags&fCut != 0 && (off > 0 || qtype != dns.TypeDS) {
				cut, cutOff = n, off
			}
			if n.flags&fDNAME != 0 && off > 0 {
				d, dOff = n, off
			}
		}
		n = nil
	}
	if apex > 0 && z.apex.flags&fDNAME != 0 {
		d, dOff = z.apex, apex
	}
	return cut, cutOff, d, dOff
}

// wildcard returns the source of synthesis for a name whose closest encloser
// is encl, at offset off in name: the node "*.<closest encloser>", nil if it
// does not exist (RFC 4592 §3.3.1). Only the closest encloser's wildcard
// child counts, so a wildcard never matches a name at or below an existing
// name, empty non-terminals included (RFC 4592 §2.2.2). A wildcard that is
// itself an empty non-terminal is still a source: it synthesizes NODATA.
func (z *view) wildcard(name []byte, off int, encl *node) *node {
	if z.src == nil && encl.flags&fWild == 0 {
		return nil // a paged read looks the wildcard up
	}
	var buf [258]byte
	w := append(buf[:0], '*')
	if string(name[off:]) != "." {
		w = append(w, '.')
	}
	return z.get(append(w, name[off:]...))
}
