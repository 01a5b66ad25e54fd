// Package xfrstream is how a craftstore member streams a zone transfer to
// a router over its HTTP API (GET or POST /v1/zones/{zone}/xfr): the
// records a transfer.Transferer would hand the transfer plugin, in the
// order it would, as a sequence of frames. A frame is a 4-byte big-endian
// length and a packed DNS message whose answer section holds one batch of
// records; a frame of length 0 ends a complete stream. A stream that ends
// without it was cut short (the member failed), and its records must be
// thrown away.
//
// The answer's headers say which state the stream was read from: the
// zone's serial on the shard and the shard's serial base (Serial, Base),
// which a router in key mode "name" combines into the zone's serial.
//
// # Cuts
//
// A router in key mode "name" reads every transfer from one cut through the
// shards and presents it with one zone serial. When it removes the fences
// (DELETE Path/{id}, the Cut as the body) every shard records the cut, so
// that an IXFR from that serial later finds each shard's state in it
// (GET CutPath) and asks each shard for the difference since
// (?serial=its serial&net=1): the journal's changes folded into one
// difference, each section in canonical order of owner names, then by
// text (Less), which the router merges.
package xfrstream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/zonerules"

	"github.com/miekg/dns"
)

// ContentType is the media type of a stream.
const ContentType = "application/vnd.craftdns.xfr"

// Headers of the answer that carry the state the stream was read from.
const (
	HeaderSerial = "Craftdns-Serial"
	HeaderBase   = "Craftdns-Base"
)

// Cut is the state of every shard a router's transfer was read from, and
// the zone serial it presented that state with.
type Cut struct {
	Serial uint32           `json:"serial"`
	Shards map[string]State `json:"shards"`
}

// Released is a member's answer to the removal of a fence: Held is false
// when the fence had run out (a transaction may have prepared in the zone
// since), so the router's cut is not one.
type Released struct {
	Held bool `json:"held"`
}

// State is one shard's state in a cut.
type State struct {
	Serial uint32 `json:"serial"`
	Base   uint32 `json:"base"`
}

// CutPath is the path of the cut recorded for zone serial on a member.
func CutPath(origin string, serial uint32) string {
	return Path(origin) + "/cuts/" + strconv.FormatUint(uint64(serial), 10)
}

// MaxFrame bounds one frame: a batch of records packs far below it.
const MaxFrame = 16 << 20

// Path is the path of zone origin's transfer on a member; with a fence, the
// member sets the fence first (POST), and DELETE Path/{id} removes it.
func Path(origin string) string { return "/v1/zones/" + url.PathEscape(origin) + "/xfr" }

// Writer writes the frames of one stream.
type Writer struct {
	w   *bufio.Writer
	buf []byte
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 64<<10)} }

// Write writes rrs as one frame.
func (w *Writer) Write(rrs []dns.RR) error {
	m := &dns.Msg{Answer: rrs}
	m.Compress = true
	packed, err := m.PackBuffer(w.buf)
	if err != nil {
		return err
	}
	w.buf = packed[:0]
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(packed)))
	if _, err := w.w.Write(l[:]); err != nil {
		return err
	}
	_, err = w.w.Write(packed)
	return err
}

// End writes the frame that ends a complete stream and flushes.
func (w *Writer) End() error {
	if _, err := w.w.Write([]byte{0, 0, 0, 0}); err != nil {
		return err
	}
	return w.w.Flush()
}

// Flush sends what is buffered.
func (w *Writer) Flush() error { return w.w.Flush() }

// ErrShort is returned when a stream ends before its end frame.
var ErrShort = errors.New("transfer stream cut short")

// Reader reads the frames of one stream.
type Reader struct {
	r   *bufio.Reader
	buf []byte
	end bool
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the records of the next frame; io.EOF after the end frame.
func (r *Reader) Next() ([]dns.RR, error) {
	if r.end {
		return nil, io.EOF
	}
	var l [4]byte
	if _, err := io.ReadFull(r.r, l[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrShort, err)
	}
	n := binary.BigEndian.Uint32(l[:])
	if n == 0 {
		r.end = true
		return nil, io.EOF
	}
	if n > MaxFrame {
		return nil, fmt.Errorf("transfer frame of %d bytes", n)
	}
	if cap(r.buf) < int(n) {
		// Grow as the bytes arrive, not as the length says.
		var bb bytes.Buffer
		bb.Grow(min(int(n), 64<<10))
		if got, err := io.CopyN(&bb, r.r, int64(n)); err != nil || got != int64(n) {
			return nil, fmt.Errorf("%w: %v", ErrShort, err)
		}
		r.buf = bb.Bytes()
	} else if _, err := io.ReadFull(r.r, r.buf[:n]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrShort, err)
	}
	b := r.buf[:n]
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return nil, fmt.Errorf("transfer frame: %w", err)
	}
	for _, rr := range m.Answer {
		// No meta types, no other class, and RDATA: a header alone (as an
		// UPDATE deletes with) is no record of a zone.
		if h := rr.Header(); h.Class != dns.ClassINET || zonerules.MetaType(h.Rrtype) || h.Rdlength == 0 {
			return nil, fmt.Errorf("transfer frame: %s record of class %s and %d bytes of RDATA is no zone data", dns.TypeToString[h.Rrtype], dns.ClassToString[h.Class], h.Rdlength)
		}
	}
	return m.Answer, nil
}

// ParseUint32 reads a serial header.
func ParseUint32(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	return uint32(v), err
}

// Text is rr's text with a lower-case owner name: records that differ in
// the case of their owner only are one record.
func Text(rr dns.RR) string {
	h := rr.Header()
	name := h.Name
	h.Name = dnsname.Lower(name)
	s := rr.String()
	h.Name = name
	return s
}

// Less orders the records of a difference's section: by owner name in DNS
// canonical order (dnsname.CanonicalKey), then by Text.
func Less(a, b dns.RR) bool { return Compare(a, b) < 0 }

// Compare compares a and b in the order of Less: -1, 0 (the same record)
// or +1.
func Compare(a, b dns.RR) int {
	if c := bytes.Compare(dnsname.CanonicalKey(a.Header().Name), dnsname.CanonicalKey(b.Header().Name)); c != 0 {
		return c
	}
	return strings.Compare(Text(a), Text(b))
}
