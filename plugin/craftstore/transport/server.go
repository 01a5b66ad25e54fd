package transport

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// handshakeTimeout bounds how long an incoming connection may take to
// introduce itself.
const handshakeTimeout = 5 * time.Second

// serve accepts peer connections until the listener is closed.
func (t *Transport) serve(ln net.Listener) {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if t.stopped.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or similar: back off like net/http.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warningf("accepting peer connection: %v; retrying in %v", err, delay)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		if tl := t.tls.Load(); tl != nil {
			c = &tlsConn{Conn: tls.Server(c, tl.server), raw: c}
		}
		if !t.track(c) {
			continue
		}
		t.wg.Add(1)
		go t.handle(c)
	}
}

// handle runs one incoming connection.
func (t *Transport) handle(c net.Conn) {
	defer t.wg.Done()
	defer t.untrack(c)
	defer c.Close()

	h, br, err := t.accept(c)
	if err != nil {
		// A bare connect and close (a port probe) is not worth a line.
		if !t.stopped.Load() && !errors.Is(err, io.EOF) {
			t.log.Warningf("refused peer connection from %s: %v", c.RemoteAddr(), err)
		}
		return
	}
	switch h.kind {
	case kindStream:
		err = t.readStream(c, br, h.from)
	case kindSnapshot:
		err = t.receiveSnapshot(c, br, h.from)
	}
	if err != nil && !t.stopped.Load() {
		t.log.Warningf("connection from member %x at %s: %v", h.from, c.RemoteAddr(), err)
	}
}

// accept reads and answers the handshake on c.
func (t *Transport) accept(c net.Conn) (handshake, *bufio.Reader, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if tc, ok := c.(*tlsConn); ok {
		if err := tc.Handshake(); err != nil {
			return handshake{}, nil, fmt.Errorf("TLS: %w", err)
		}
	}
	br := bufio.NewReaderSize(c, 64<<10)
	h, err := readHandshake(br)
	code := byte(replyOK)
	switch {
	case errors.Is(err, errMalformed):
		code = replyMalformed
	case err != nil:
		return h, nil, err
	case h.cluster != t.cfg.Cluster:
		code = replyWrongCluster
		err = fmt.Errorf("member %x is in cluster %q, not %q", h.from, h.cluster, t.cfg.Cluster)
	case t.cfg.IsRemoved != nil && t.cfg.IsRemoved(h.from):
		code = replyRemoved
		err = fmt.Errorf("member %x was removed from the group", h.from)
	case h.to != t.cfg.ID || h.from == 0 || h.from == t.cfg.ID:
		code = replyWrongID
		err = fmt.Errorf("member %x addressed member %x, this is %x", h.from, h.to, t.cfg.ID)
	}
	if _, werr := c.Write([]byte{code}); err == nil && werr != nil {
		err = fmt.Errorf("replying to handshake: %w", werr)
	}
	if err != nil {
		return h, nil, err
	}
	return h, br, c.SetDeadline(time.Time{})
}

// readStream hands the messages arriving on a stream connection to Raft, in
// order, until the connection ends. It never waits for Raft (see inbox), so
// everything the peer sends is read as it arrives; it writes a keepalive
// byte back every keepalive interval and drops the connection when nothing
// (not even a keepalive frame) arrived for StreamTimeout.
func (t *Transport) readStream(c net.Conn, br *bufio.Reader, from uint64) error {
	t.mu.Lock()
	if old := t.streams[from]; old != nil {
		old.Close() // the peer redialled; its old connection is dead
	}
	t.streams[from] = c
	t.mu.Unlock()
	in := newInbox(t, from)
	done := make(chan struct{})
	pongs := t.sendKeepalives(c, done)
	defer func() {
		close(done)
		<-pongs
		in.close()
		t.mu.Lock()
		if t.streams[from] == c {
			delete(t.streams, from)
		}
		t.mu.Unlock()
	}()

	timeout := t.cfg.StreamTimeout
	refresh := keepaliveInterval(timeout)
	var deadlineSet time.Time
	fr := frameReader{r: br}
	for {
		// Moving the deadline once per keepalive interval is enough: it
		// then fires between timeout-refresh and timeout after the last frame.
		if now := time.Now(); now.Sub(deadlineSet) >= refresh {
			c.SetReadDeadline(now.Add(timeout))
			deadlineSet = now
		}
		m, err := fr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			t.mu.RLock()
			superseded := t.streams[from] != c
			t.mu.RUnlock()
			if superseded || t.stopped.Load() {
				return nil // closed by the peer's newer stream, or by Stop
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("nothing received for %v", timeout)
			}
			return err
		}
		if m == nil || !t.accepts(m, from) {
			continue
		}
		in.put(m)
	}
}

// sendKeepalives writes a keepalive byte to c every keepalive interval
// until done is closed or a write fails; the returned channel is closed
// when it has stopped.
func (t *Transport) sendKeepalives(c net.Conn, done <-chan struct{}) <-chan struct{} {
	stopped := make(chan struct{})
	interval := keepaliveInterval(t.cfg.StreamTimeout)
	go func() {
		defer close(stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			c.SetWriteDeadline(time.Now().Add(t.cfg.StreamTimeout))
			if _, err := c.Write([]byte{0}); err != nil {
				c.Close() // the reader sees the failure too
				return
			}
		}
	}()
	return stopped
}

// accepts tells whether m, which arrived on a stream from member from, is
// for this member. A MsgSnap is not: its state would be missing.
func (t *Transport) accepts(m *raftpb.Message, from uint64) bool {
	return m.GetTo() == t.cfg.ID && m.GetFrom() == from && m.GetType() != raftpb.MessageType_MsgSnap
}
