package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

const (
	// chunkSize is the size of the chunks a sender cuts the stream into.
	chunkSize = 256 << 10
	// snapshotIOTimeout bounds every chunk read or write: a stream that
	// makes no progress for this long fails.
	snapshotIOTimeout = 30 * time.Second
	// snapshotReplyTimeout bounds the receiver's work after the last byte
	// (staging, Raft.Process) until it replies.
	snapshotReplyTimeout = time.Minute
)

// ErrCorruptSnapshot is returned when a snapshot stream's length or checksum
// does not match its trailer, or the Snapshotter left part of it unread.
var ErrCorruptSnapshot = errors.New("transport: corrupt snapshot stream")

var (
	errSnapshotRejected = errors.New("snapshot rejected by receiver")
	crcTable            = crc32.MakeTable(crc32.Castagnoli)
)

// runSnapshots sends the snapshots queued for the peer, one at a time.
func (p *peer) runSnapshots() {
	defer p.wg.Done()
	r := p.t.cfg.Raft
	for {
		select {
		case <-p.ctx.Done():
			select {
			case <-p.snapc:
				r.ReportSnapshot(p.id, raft.SnapshotFailure)
			default:
			}
			return
		case m := <-p.snapc:
			err := p.sendSnapshot(m)
			if err == nil {
				p.t.log.Infof("peer %x: sent snapshot at index %d", p.id, m.GetSnapshot().GetMetadata().GetIndex())
				r.ReportSnapshot(p.id, raft.SnapshotFinish)
				continue
			}
			if p.ctx.Err() == nil {
				p.t.log.Warningf("peer %x: sending snapshot: %v", p.id, err)
			}
			if !errors.Is(err, errSnapshotRejected) {
				r.ReportUnreachable(p.id)
			}
			r.ReportSnapshot(p.id, raft.SnapshotFailure)
		}
	}
}

// sendSnapshot sends m and the state Snapshotter.WriteSnapshot writes on a
// connection of its own, and waits for the receiver to apply it.
func (p *peer) sendSnapshot(m *raftpb.Message) error {
	conn, err := p.dial(kindSnapshot, &p.snapConn)
	if err != nil {
		return err
	}
	defer p.release(&p.snapConn, conn)

	w := newChunkWriter(conn)
	w.buf, err = appendFrame(w.buf, m)
	if err != nil {
		return err
	}
	if err := w.writeBuf(); err != nil {
		return err
	}
	if err := p.t.cfg.Snapshotter.WriteSnapshot(w); err != nil {
		return fmt.Errorf("writing snapshot: %w", err)
	}
	if err := w.close(); err != nil {
		return err
	}
	conn.SetReadDeadline(time.Now().Add(snapshotReplyTimeout))
	var reply [1]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		return fmt.Errorf("waiting for reply: %w", err)
	}
	if reply[0] != snapApplied {
		return errSnapshotRejected
	}
	return nil
}

// chunkWriter cuts what is written to it into chunks, each written with one
// call, and ends the stream with a trailer holding its length and CRC-32C.
type chunkWriter struct {
	conn net.Conn
	buf  []byte // a 4-byte length, then up to chunkSize bytes of data
	crc  uint32
	n    uint64
	err  error
}

func newChunkWriter(conn net.Conn) *chunkWriter {
	return &chunkWriter{conn: conn, buf: make([]byte, 0, 4+chunkSize)}
}

// Write implements io.Writer.
func (w *chunkWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		if w.err != nil {
			return written, w.err
		}
		if len(w.buf) == 0 {
			w.buf = append(w.buf, 0, 0, 0, 0)
		}
		k := min(len(b), 4+chunkSize-len(w.buf))
		w.buf = append(w.buf, b[:k]...)
		w.crc = crc32.Update(w.crc, crcTable, b[:k])
		w.n += uint64(k)
		written += k
		b = b[k:]
		if len(w.buf) == 4+chunkSize {
			w.flushChunk()
		}
	}
	return written, w.err
}

// flushChunk writes the buffered chunk.
func (w *chunkWriter) flushChunk() {
	if w.err != nil || len(w.buf) <= 4 {
		return
	}
	binary.BigEndian.PutUint32(w.buf, uint32(len(w.buf)-4))
	w.err = w.writeBuf()
}

// writeBuf writes and empties the buffer.
func (w *chunkWriter) writeBuf() error {
	w.conn.SetWriteDeadline(time.Now().Add(snapshotIOTimeout))
	_, err := w.conn.Write(w.buf)
	w.buf = w.buf[:0]
	if err != nil {
		return fmt.Errorf("sending snapshot: %w", err)
	}
	return nil
}

// close writes the last chunk and the trailer.
func (w *chunkWriter) close() error {
	w.flushChunk()
	if w.err != nil {
		return w.err
	}
	w.buf = binary.BigEndian.AppendUint32(w.buf, 0)
	w.buf = binary.BigEndian.AppendUint64(w.buf, w.n)
	w.buf = binary.BigEndian.AppendUint32(w.buf, w.crc)
	w.err = w.writeBuf()
	return w.err
}

// chunkReader reads the payload of a chunked snapshot stream. It returns
// io.EOF only after the trailer has been verified.
type chunkReader struct {
	r    *bufio.Reader
	conn net.Conn
	left int // bytes left in the current chunk
	crc  uint32
	n    uint64
	err  error // sticky
}

// Read implements io.Reader.
func (c *chunkReader) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(b) == 0 {
		return 0, nil
	}
	for c.left == 0 {
		c.conn.SetReadDeadline(time.Now().Add(snapshotIOTimeout))
		var hdr [4]byte
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			c.err = fmt.Errorf("reading snapshot: %w", noEOF(err))
			return 0, c.err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 {
			c.err = c.trailer()
			return 0, c.err
		}
		if n > maxChunk {
			c.err = fmt.Errorf("%w: chunk of %d bytes", ErrCorruptSnapshot, n)
			return 0, c.err
		}
		c.left = int(n)
	}
	if len(b) > c.left {
		b = b[:c.left]
	}
	k, err := c.r.Read(b)
	c.crc = crc32.Update(c.crc, crcTable, b[:k])
	c.n += uint64(k)
	c.left -= k
	if err != nil {
		c.err = fmt.Errorf("reading snapshot: %w", noEOF(err))
	}
	return k, c.err
}

// trailer verifies the stream's length and checksum and returns io.EOF if
// they match.
func (c *chunkReader) trailer() error {
	var t [12]byte
	if _, err := io.ReadFull(c.r, t[:]); err != nil {
		return fmt.Errorf("reading snapshot trailer: %w", noEOF(err))
	}
	n, crc := binary.BigEndian.Uint64(t[:8]), binary.BigEndian.Uint32(t[8:])
	if n != c.n || crc != c.crc {
		return fmt.Errorf("%w: got %d bytes with CRC-32C %08x, sender wrote %d with %08x",
			ErrCorruptSnapshot, c.n, c.crc, n, crc)
	}
	return io.EOF
}

// finish reads to the end of the stream and verifies the trailer. Unread
// payload means the Snapshotter disagrees with the sender about the format.
func (c *chunkReader) finish() error {
	k, err := io.Copy(io.Discard, c)
	if err != nil {
		return err
	}
	if k > 0 {
		return fmt.Errorf("%w: snapshotter left %d bytes unread", ErrCorruptSnapshot, k)
	}
	return nil
}

// receiveSnapshot reads a snapshot connection's header and stream, stages
// the state with the Snapshotter and hands the MsgSnap to Raft.
func (t *Transport) receiveSnapshot(conn net.Conn, br *bufio.Reader, from uint64) error {
	err := t.stageSnapshot(conn, br, from)
	reply := byte(snapApplied)
	if err != nil {
		reply = snapFailed
	}
	conn.SetWriteDeadline(time.Now().Add(snapshotIOTimeout))
	if _, werr := conn.Write([]byte{reply}); err == nil && werr != nil {
		err = fmt.Errorf("replying: %w", werr)
	}
	return err
}

func (t *Transport) stageSnapshot(conn net.Conn, br *bufio.Reader, from uint64) error {
	conn.SetReadDeadline(time.Now().Add(snapshotIOTimeout))
	fr := frameReader{r: br}
	m, err := fr.next()
	if err != nil {
		return fmt.Errorf("reading snapshot header: %w", noEOF(err))
	}
	if m.GetType() != raftpb.MessageType_MsgSnap || m.GetTo() != t.cfg.ID || m.GetFrom() != from {
		return fmt.Errorf("unexpected snapshot header %s from %x to %x", m.GetType(), m.GetFrom(), m.GetTo())
	}
	t.snapMu.Lock()
	defer t.snapMu.Unlock()
	r := &chunkReader{r: br, conn: conn}
	if err := t.cfg.Snapshotter.ReceiveSnapshot(m, r); err != nil {
		return fmt.Errorf("receiving snapshot: %w", err)
	}
	if err := r.finish(); err != nil {
		return err
	}
	// Bounded like every step from the transport (inbox.go): a node that
	// does not take the snapshot in time gets it again from its leader.
	ctx, cancel := context.WithTimeout(t.ctx, stepTimeout)
	defer cancel()
	if err := t.cfg.Raft.Process(ctx, m); err != nil {
		return fmt.Errorf("processing snapshot: %w", err)
	}
	t.log.Infof("received snapshot at index %d from %x", m.GetSnapshot().GetMetadata().GetIndex(), from)
	return nil
}
