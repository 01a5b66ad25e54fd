package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

const (
	magic       = "CRFT"
	wireVersion = 2

	kindStream   = 1
	kindSnapshot = 2

	// Handshake replies.
	replyOK           = 0
	replyWrongCluster = 1
	replyWrongID      = 2
	replyMalformed    = 3
	replyRemoved      = 4 // the dialing member was removed from the group

	// Snapshot replies.
	snapApplied = 0
	snapFailed  = 1

	maxClusterLen = 256
	handshakeLen  = 4 + 1 + 1 + 8 + 8 + 2

	// maxFrame bounds one message frame.
	maxFrame = 64 << 20
	// maxChunk bounds one snapshot chunk.
	maxChunk = 1 << 20
)

var (
	errFrameTooLarge = errors.New("frame too large")
	errMalformed     = errors.New("malformed handshake")
)

// marshalOpts encodes outgoing messages.
var marshalOpts = proto.MarshalOptions{}

// handshake is the first thing a dialer writes on a connection.
type handshake struct {
	kind    byte
	from    uint64
	to      uint64
	cluster string
}

// encode returns the wire form of h.
func (h handshake) encode() []byte {
	b := make([]byte, handshakeLen, handshakeLen+len(h.cluster))
	copy(b, magic)
	b[4] = wireVersion
	b[5] = h.kind
	binary.BigEndian.PutUint64(b[6:], h.from)
	binary.BigEndian.PutUint64(b[14:], h.to)
	binary.BigEndian.PutUint16(b[22:], uint16(len(h.cluster)))
	return append(b, h.cluster...)
}

// readHandshake reads a handshake from r. Errors wrapping errMalformed mean
// the peer speaks something else (or another version).
func readHandshake(r io.Reader) (handshake, error) {
	var b [handshakeLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return handshake{}, fmt.Errorf("reading handshake: %w", err)
	}
	if string(b[:4]) != magic || b[4] != wireVersion {
		return handshake{}, fmt.Errorf("%w: bad magic or version %d", errMalformed, b[4])
	}
	h := handshake{
		kind: b[5],
		from: binary.BigEndian.Uint64(b[6:]),
		to:   binary.BigEndian.Uint64(b[14:]),
	}
	if h.kind != kindStream && h.kind != kindSnapshot {
		return handshake{}, fmt.Errorf("%w: unknown kind %d", errMalformed, h.kind)
	}
	n := int(binary.BigEndian.Uint16(b[22:]))
	if n > maxClusterLen {
		return handshake{}, fmt.Errorf("%w: cluster name of %d bytes", errMalformed, n)
	}
	cluster := make([]byte, n)
	if _, err := io.ReadFull(r, cluster); err != nil {
		return handshake{}, fmt.Errorf("reading handshake: %w", err)
	}
	h.cluster = string(cluster)
	return h, nil
}

// replyText explains a handshake reply code.
func replyText(code byte) string {
	switch code {
	case replyOK:
		return "accepted"
	case replyWrongCluster:
		return "wrong cluster name"
	case replyWrongID:
		return "wrong member ID"
	case replyMalformed:
		return "malformed handshake"
	case replyRemoved:
		return "this member was removed from the group"
	}
	return fmt.Sprintf("unknown reply %d", code)
}

// appendFrame appends the frame of m (length prefix and protobuf encoding)
// to b.
func appendFrame(b []byte, m *raftpb.Message) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := marshalOpts.MarshalAppend(b, m)
	if err != nil {
		return b[:start], fmt.Errorf("marshalling %s: %w", m.GetType(), err)
	}
	n := len(b) - start - 4
	if n > maxFrame {
		return b[:start], fmt.Errorf("%s of %d bytes: %w", m.GetType(), n, errFrameTooLarge)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// appendKeepalive appends a keepalive frame (length zero) to b.
func appendKeepalive(b []byte) []byte { return append(b, 0, 0, 0, 0) }

// keepaliveInterval is how often a side of an idle stream shows that it is
// alive, for a stream that is declared dead after timeout without a sign.
func keepaliveInterval(timeout time.Duration) time.Duration { return timeout / 4 }

// frameReader reads message frames, reusing one buffer.
type frameReader struct {
	r   io.Reader
	buf []byte
}

// next reads and decodes the next frame. It returns io.EOF on a clean end
// between frames, and a nil message for a keepalive frame.
func (f *frameReader) next() (*raftpb.Message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes: %w", n, errFrameTooLarge)
	}
	if n == 0 {
		return nil, nil // keepalive
	}
	b, err := readFrame(f.r, n, &f.buf)
	if err != nil {
		return nil, fmt.Errorf("reading frame: %w", noEOF(err))
	}
	if cap(f.buf) > 1<<20 {
		f.buf = nil // don't pin a large buffer after one big MsgApp
	}
	m := new(raftpb.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("decoding frame: %w", err)
	}
	return m, nil
}

// readFrame reads n bytes from r into *buf, or into a buffer that grows as
// the bytes arrive when *buf is smaller: a peer that announces a large
// frame and sends little makes the member allocate little.
func readFrame(r io.Reader, n int, buf *[]byte) ([]byte, error) {
	if n <= cap(*buf) {
		b := (*buf)[:n]
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var bb bytes.Buffer
	bb.Grow(min(n, 64<<10))
	got, err := io.CopyN(&bb, r, int64(n))
	if err == io.EOF && got < int64(n) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	*buf = bb.Bytes()
	return *buf, nil
}

// noEOF turns io.EOF inside a structure into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
