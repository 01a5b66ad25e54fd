package craftroute

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// tcpMux is a member's TCP side: a few persistent connections, each
// carrying many queries at once (pipelined, RFC 7766 §6.2.1.1): a query
// takes a connection round robin and an ID free on it, writes its
// length-prefixed message, and one reader per connection hands each answer
// to the query waiting for its ID, in whatever order the member answers.
// The router asks over TCP when an answer does not fit UDP (truncated, or
// longer than the query's buffer); a member at a tls:// address it asks
// every query over TLS (RFC 7858), on the same connections.
//
// A connection unused for tcpIdle is closed and dialed anew before the
// member's own idle timeout (CoreDNS's: 10 s) can close it under a query;
// a query that meets a connection the member closed anyway is asked again
// once on a new one.
type tcpMux struct {
	addr string
	tls  *tls.Config // nil: plain TCP

	mu      sync.Mutex
	conns   []*tcpConn // up to muxSockets, dialed on use
	closed  bool
	next    uint32
	dialErr string // the last dial's error, logged when it changes; "" after a dial that worked
}

const (
	tcpIdle     = 5 * time.Second
	tcpDialWait = time.Second
)

type tcpConn struct {
	c        net.Conn
	wmu      sync.Mutex // one message written at a time
	lastUsed time.Time  // under tcpMux.mu
	pending
}

var errTCPLost = errors.New("member closed the TCP connection")

// newTCPMux returns the mux of the member at addr (host:port), whose
// connections are TLS when tc is not nil.
func newTCPMux(addr string, tc *tls.Config) *tcpMux { return &tcpMux{addr: addr, tls: tc} }

// dial opens one connection: TCP, and the TLS handshake when the member
// is asked over TLS, within tcpDialWait in all.
func (u *tcpMux) dial() (net.Conn, error) {
	d := &net.Dialer{Timeout: tcpDialWait}
	if u.tls == nil {
		return d.Dial("tcp", u.addr)
	}
	return (&tls.Dialer{NetDialer: d, Config: u.tls}).Dial("tcp", u.addr)
}

// conn returns a live connection, dialing one when needed.
func (u *tcpMux) conn() (*tcpConn, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errMuxClosed
	}
	if u.conns == nil {
		u.conns = make([]*tcpConn, muxSockets())
	}
	u.next++
	i := int(u.next % uint32(len(u.conns)))
	tc := u.conns[i]
	now := time.Now()
	if tc != nil {
		dead := tc.isClosed() || (tc.inflight.Load() == 0 && now.Sub(tc.lastUsed) > tcpIdle)
		if !dead {
			tc.lastUsed = now
			return tc, nil
		}
		tc.close(errMuxClosed)
	}
	c, err := u.dial()
	if err != nil {
		u.conns[i] = nil
		if e := err.Error(); e != u.dialErr && u.tls != nil {
			// A TLS handshake that fails (a certificate either end
			// refuses) fails every query: said once, not per query.
			log.Warningf("member tls://%s: %v", u.addr, err)
			u.dialErr = e
		}
		return nil, err
	}
	u.dialErr = ""
	tc = &tcpConn{c: c, lastUsed: now}
	u.conns[i] = tc
	go tc.read()
	return tc, nil
}

// close closes every connection; queries in flight fail.
func (u *tcpMux) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for _, tc := range u.conns {
		if tc != nil {
			tc.close(errMuxClosed)
		}
	}
	u.conns = nil
}

// close marks the connection dead, closes it and fails its queries.
func (tc *tcpConn) close(why error) {
	code := -1
	if errors.Is(why, errTCPLost) {
		code = lostRead
	}
	tc.fail(code, true)
	tc.c.Close()
}

// lostRead is what a waiter gets when the member closed the connection.
const lostRead = -3

// exchange sends query q (its ID is set here) and returns the answer:
// in w.buf, or in a buffer of its own when longer. It waits at most
// timeout.
func (u *tcpMux) exchange(q []byte, w *waiter, timeout time.Duration) ([]byte, error) {
	for try := 0; ; try++ {
		ans, err := u.exchangeOnce(q, w, timeout)
		if errors.Is(err, errTCPLost) && try == 0 {
			continue // the member closed a connection it found idle: once more on a new one
		}
		return ans, err
	}
}

func (u *tcpMux) exchangeOnce(q []byte, w *waiter, timeout time.Duration) ([]byte, error) {
	tc, err := u.conn()
	if err != nil {
		return nil, err
	}
	id, err := tc.add(w, errTCPLost)
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint16(q, id)
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(q)))
	tc.wmu.Lock()
	tc.c.SetWriteDeadline(time.Now().Add(timeout))
	_, err = (&net.Buffers{l[:], q}).WriteTo(tc.c)
	tc.wmu.Unlock()
	if err != nil {
		tc.close(errTCPLost)
		// The close failed w (and every query on tc): take its answer.
		<-w.ch
		return nil, errTCPLost
	}
	w.t.Reset(timeout)
	select {
	case n := <-w.ch:
		w.t.Stop()
		return w.result(n)
	case <-w.t.C:
		if !tc.take(id, w) {
			return w.result(<-w.ch)
		}
		return nil, errMuxTimeout
	}
}

// result is the answer a waiter was handed, by its code n.
func (w *waiter) result(n int) ([]byte, error) {
	switch {
	case n == lostRead:
		return nil, errTCPLost
	case n < 0:
		return nil, errMuxFailed
	case n > len(w.buf):
		big := w.big
		w.big = nil
		return big, nil
	}
	return w.buf[:n], nil
}

// read takes the member's answers until the connection ends.
func (tc *tcpConn) read() {
	buf := make([]byte, 0xFFFF)
	for {
		var l [2]byte
		if _, err := io.ReadFull(tc.c, l[:]); err != nil {
			tc.close(errTCPLost)
			return
		}
		n := int(binary.BigEndian.Uint16(l[:]))
		msg := buf[:n]
		if _, err := io.ReadFull(tc.c, msg); err != nil || n < 2 {
			tc.close(errTCPLost)
			return
		}
		w := tc.pop(binary.BigEndian.Uint16(msg))
		if w == nil {
			continue // late (its query timed out)
		}
		if n > len(w.buf) {
			w.big = append([]byte(nil), msg...)
		} else {
			copy(w.buf[:], msg)
		}
		w.ch <- n
	}
}
