package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
	// flushSize is the batch size at which the writer writes even though
	// more messages are queued.
	flushSize = 256 << 10
	// writeTimeout bounds one batch write; a peer that takes longer is
	// considered gone and redialled.
	writeTimeout = 10 * time.Second
)

var errPeerClosed = errors.New("connection closed by peer")

// peer is the sending side of the transport for one member: a bounded queue
// and a writer goroutine for the message stream, and a one-slot queue and a
// goroutine for snapshots.
type peer struct {
	t      *Transport
	id     uint64
	queue  chan *raftpb.Message
	snapc  chan *raftpb.Message
	redial chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	addr     string
	conn     net.Conn // current stream connection
	snapConn net.Conn // connection of the snapshot being sent
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	p := &peer{
		t:      t,
		id:     id,
		addr:   addr,
		queue:  make(chan *raftpb.Message, t.cfg.QueueSize),
		snapc:  make(chan *raftpb.Message, 1),
		redial: make(chan struct{}, 1),
	}
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	return p
}

func (p *peer) start() {
	p.wg.Add(2)
	go p.runStream()
	go p.runSnapshots()
}

// stop ends the peer's goroutines and closes its connections.
func (p *peer) stop() {
	p.cancel()
	p.mu.Lock()
	for _, c := range []net.Conn{p.conn, p.snapConn} {
		if c != nil {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// setAddr changes the peer's address and drops the current stream
// connection so that the writer redials.
func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if addr == p.addr {
		return
	}
	p.t.log.Infof("peer %x: address changed from %s to %s", p.id, p.addr, addr)
	p.addr = addr
	p.dropLocked(p.conn)
}

// reconnect closes the stream and snapshot connections; the writer
// redials (SetTLS).
func (p *peer) reconnect() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked(p.conn, p.snapConn)
}

// dropLocked closes conns and wakes the writer to redial. p.mu is held.
func (p *peer) dropLocked(conns ...net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	select {
	case p.redial <- struct{}{}:
	default:
	}
}

// enqueue queues m without blocking and reports whether there was room.
func (p *peer) enqueue(m *raftpb.Message, isSnap bool) bool {
	q := p.queue
	if isSnap {
		q = p.snapc
	}
	select {
	case q <- m:
		return true
	default:
		return false
	}
}

// runStream keeps a stream connection to the peer and writes queued
// messages to it.
func (p *peer) runStream() {
	defer p.wg.Done()
	backoff := minBackoff
	down := false // logged as down; log only changes
	for p.ctx.Err() == nil {
		conn, err := p.dial(kindStream, &p.conn)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			if !down {
				p.t.log.Warningf("peer %x: %v", p.id, err)
				down = true
			}
			p.t.cfg.Raft.ReportUnreachable(p.id)
			p.idle(backoff)
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if down {
			p.t.log.Infof("peer %x: connected to %s", p.id, conn.RemoteAddr())
			down = false
		}
		since := time.Now()
		err = p.writeLoop(conn)
		if p.ctx.Err() != nil {
			return
		}
		p.t.log.Warningf("peer %x: %v", p.id, err)
		down = true
		p.t.cfg.Raft.ReportUnreachable(p.id)
		if time.Since(since) > maxBackoff {
			backoff = minBackoff
		}
		p.idle(backoff)
		backoff = min(2*backoff, maxBackoff)
	}
}

// idle waits d before the next dial, or less if the address changes. What
// Raft queues meanwhile is dropped and reported: the peer is unreachable.
func (p *peer) idle(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-timer.C:
			return
		case <-p.redial:
			return
		case <-p.queue:
			p.t.cfg.Raft.ReportUnreachable(p.id)
		}
	}
}

// writeLoop writes queued messages to conn until the connection fails or
// the peer stops. Messages queued together are written with one call; a
// keepalive frame goes out when nothing was written for a keepalive
// interval, and the receiver's keepalive bytes must keep arriving: a stream
// that stays silent for StreamTimeout is dead (a partition or a paused peer
// leaves TCP waiting for minutes) and is redialled.
func (p *peer) writeLoop(conn net.Conn) error {
	timeout := p.t.cfg.StreamTimeout
	broken := make(chan error, 1)
	go func() {
		var b [64]byte
		for {
			conn.SetReadDeadline(time.Now().Add(timeout))
			if _, err := conn.Read(b[:]); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = fmt.Errorf("nothing received for %v", timeout)
				} else {
					err = errPeerClosed
				}
				conn.Close() // a Write blocked on a dead peer returns now
				broken <- err
				return
			}
		}
	}()
	defer func() {
		p.release(&p.conn, conn)
		<-broken
	}()
	keepalive := time.NewTicker(keepaliveInterval(timeout))
	defer keepalive.Stop()

	var buf []byte
	wrote := false // since the last keepalive tick
	for {
		select {
		case <-p.ctx.Done():
			return nil
		case err := <-broken:
			broken <- err // for the deferred wait
			return fmt.Errorf("stream to %s: %w", conn.RemoteAddr(), err)
		case <-keepalive.C:
			if wrote {
				wrote = false
				continue
			}
			buf = appendKeepalive(buf[:0])
		case m := <-p.queue:
			buf = p.appendOrDrop(buf[:0], m)
		}
	drain:
		for len(buf) < flushSize {
			select {
			case m := <-p.queue:
				buf = p.appendOrDrop(buf, m)
			default:
				break drain
			}
		}
		if len(buf) == 0 {
			continue
		}
		conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := conn.Write(buf); err != nil {
			return fmt.Errorf("stream to %s: %w", conn.RemoteAddr(), err)
		}
		wrote = true
		if cap(buf) > 4*flushSize {
			buf = nil // don't pin the buffer of one huge MsgApp
		}
	}
}

// appendOrDrop appends m's frame to buf; a message that cannot be encoded is
// dropped and reported.
func (p *peer) appendOrDrop(buf []byte, m *raftpb.Message) []byte {
	buf, err := appendFrame(buf, m)
	if err != nil {
		p.t.log.Warningf("peer %x: dropping message: %v", p.id, err)
		p.t.cfg.Raft.ReportUnreachable(p.id)
	}
	return buf
}

// dial connects to the peer, registers the connection in *slot (so that
// stop closes it) and performs the handshake.
func (p *peer) dial(kind byte, slot *net.Conn) (net.Conn, error) {
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	timeout := p.t.cfg.DialTimeout
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(p.ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", addr, err)
	}
	if tl := p.t.tls.Load(); tl != nil {
		conn = &tlsConn{Conn: tls.Client(conn, tl.client), raw: conn}
	}
	p.mu.Lock()
	if err := p.ctx.Err(); err != nil || p.addr != addr {
		p.mu.Unlock()
		conn.Close()
		if err == nil {
			err = fmt.Errorf("address changed from %s to %s while dialling", addr, p.addr)
		}
		return nil, err
	}
	*slot = conn
	p.mu.Unlock()

	if err := p.handshake(conn, kind, timeout); err != nil {
		p.release(slot, conn)
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	return conn, nil
}

// handshake introduces this member to the peer on conn.
func (p *peer) handshake(conn net.Conn, kind byte, timeout time.Duration) error {
	conn.SetDeadline(time.Now().Add(timeout))
	if tc, ok := conn.(*tlsConn); ok {
		// A peer that refuses this member's certificate says so when
		// the reply below is read (TLS 1.3 ends the client's part first).
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
	}
	h := handshake{kind: kind, from: p.t.cfg.ID, to: p.id, cluster: p.t.cfg.Cluster}
	if _, err := conn.Write(h.encode()); err != nil {
		return err
	}
	var reply [1]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		return err
	}
	if reply[0] == replyRemoved && p.t.cfg.OnRemoved != nil {
		p.t.cfg.OnRemoved()
	}
	if reply[0] != replyOK {
		return fmt.Errorf("refused: %s", replyText(reply[0]))
	}
	return conn.SetDeadline(time.Time{})
}

// release closes conn and clears *slot if it still holds conn.
func (p *peer) release(slot *net.Conn, conn net.Conn) {
	p.mu.Lock()
	if *slot == conn {
		*slot = nil
	}
	p.mu.Unlock()
	conn.Close()
}
