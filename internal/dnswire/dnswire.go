// Package dnswire reads DNS messages in wire form (RFC 1035 §4) without
// unpacking them: the header's fields, and each record's owner, type,
// class, TTL and RDATA as offsets into the message. A router that relays
// an answer as bytes checks it with these and changes it in place (the
// ID, the OPT record at its end) instead of building a dns.Msg.
//
// Every function checks what it reads against the message's length and
// returns false on anything malformed; none allocates.
package dnswire

import "encoding/binary"

// HeaderLen is the length of a message header.
const HeaderLen = 12

// Header flags (the second 16-bit word of the header).
const (
	FlagQR = 1 << 15
	FlagAA = 1 << 10
	FlagTC = 1 << 9
	FlagRD = 1 << 8
	FlagRA = 1 << 7
	FlagAD = 1 << 5
	FlagCD = 1 << 4
)

// Header is a message's header.
type Header struct {
	ID                         uint16
	Flags                      uint16 // QR, opcode, AA, TC, RD, RA, Z, AD, CD, rcode
	QD, AN, NS, AR             uint16 // the sections' counts
	Opcode, Rcode              uint8  // from Flags (the rcode's low 4 bits)
	Response, Truncated, Authz bool   // QR, TC, AA
}

// ParseHeader reads msg's header.
func ParseHeader(msg []byte) (Header, bool) {
	if len(msg) < HeaderLen {
		return Header{}, false
	}
	f := binary.BigEndian.Uint16(msg[2:])
	return Header{
		ID:        binary.BigEndian.Uint16(msg),
		Flags:     f,
		QD:        binary.BigEndian.Uint16(msg[4:]),
		AN:        binary.BigEndian.Uint16(msg[6:]),
		NS:        binary.BigEndian.Uint16(msg[8:]),
		AR:        binary.BigEndian.Uint16(msg[10:]),
		Opcode:    uint8(f>>11) & 0xF,
		Rcode:     uint8(f & 0xF),
		Response:  f&FlagQR != 0,
		Truncated: f&FlagTC != 0,
		Authz:     f&FlagAA != 0,
	}, true
}

// maxName is the longest name in wire form (RFC 1035 §2.3.4).
const maxName = 255

// SkipName returns the offset just after the domain name at off: after its
// root label, or after the compression pointer that ends it (the name it
// points to is not followed). It reports false for a name that runs past
// msg, is longer than 255 bytes, or uses a label type other than a length
// or a pointer.
func SkipName(msg []byte, off int) (int, bool) {
	n := 0
	for {
		if off >= len(msg) {
			return 0, false
		}
		c := int(msg[off])
		switch c & 0xC0 {
		case 0x00:
			if c == 0 {
				return off + 1, n+1 <= maxName
			}
			n += c + 1
			off += c + 1
			if n > maxName {
				return 0, false
			}
		case 0xC0:
			if off+2 > len(msg) {
				return 0, false
			}
			return off + 2, true
		default:
			return 0, false
		}
	}
}

// HasPointer reports whether the name at off is compressed (ends in a
// pointer). The name must be well formed (SkipName).
func HasPointer(msg []byte, off int) bool {
	for off < len(msg) {
		c := int(msg[off])
		switch {
		case c == 0:
			return false
		case c&0xC0 == 0xC0:
			return true
		}
		off += c + 1
	}
	return false
}

// RR is one resource record's place in a message.
type RR struct {
	Off   int // where its owner name starts
	Type  uint16
	Class uint16
	TTL   uint32
	Rdlen int
	Rdata int // where its RDATA starts
	End   int // just after its RDATA
}

// NextRR reads the record at off.
func NextRR(msg []byte, off int) (RR, bool) {
	p, ok := SkipName(msg, off)
	if !ok || p+10 > len(msg) {
		return RR{}, false
	}
	rr := RR{
		Off:   off,
		Type:  binary.BigEndian.Uint16(msg[p:]),
		Class: binary.BigEndian.Uint16(msg[p+2:]),
		TTL:   binary.BigEndian.Uint32(msg[p+4:]),
		Rdlen: int(binary.BigEndian.Uint16(msg[p+8:])),
		Rdata: p + 10,
	}
	rr.End = rr.Rdata + rr.Rdlen
	if rr.End > len(msg) {
		return RR{}, false
	}
	return rr, true
}

// SkipQuestions returns the offset after the question section of msg,
// which holds qd questions, starting at the header's end.
func SkipQuestions(msg []byte, qd int) (int, bool) {
	off := HeaderLen
	for range qd {
		p, ok := SkipName(msg, off)
		if !ok || p+4 > len(msg) {
			return 0, false
		}
		off = p + 4
	}
	return off, true
}

// Option is one EDNS0 option in an OPT record's RDATA (RFC 6891 §6.1.2).
type Option struct {
	Code uint16
	Off  int // where the option starts (its code)
	Data []byte
}

// NextOption reads the option at off of rdata (an OPT record's RDATA).
func NextOption(rdata []byte, off int) (Option, int, bool) {
	if off+4 > len(rdata) {
		return Option{}, 0, false
	}
	code := binary.BigEndian.Uint16(rdata[off:])
	n := int(binary.BigEndian.Uint16(rdata[off+2:]))
	end := off + 4 + n
	if end > len(rdata) {
		return Option{}, 0, false
	}
	return Option{Code: code, Off: off, Data: rdata[off+4 : end : end]}, end, true
}
