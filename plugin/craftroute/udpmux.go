package craftroute

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// udpMux is a member's side of the forwarding fast path (fast.go): a few
// connected UDP sockets to the member, each shared by every query the
// router sends it at a time. A query takes a socket round robin, a message
// ID free on it, and writes; one reader per socket takes the member's
// answers in batches (recvmmsg, golang.org/x/net's ReadBatch) and hands
// each to the query waiting for its ID. Under load a batch read brings
// several answers for one system call, where a socket per query (the proxy
// package's) reads each apart.
//
// A connected socket takes datagrams from the member's address only, and a
// message ID is drawn at random among the free ones (math/rand/v2, seeded
// by the runtime): an answer is taken only for a query in flight with its
// ID. Anything that does not fit the buffer (maxFastAnswer) fails that
// query, which the slow path then asks again (the proxy, TCP when
// truncated).
type udpMux struct {
	addr  string
	conns atomic.Pointer[[]*muxConn] // dialed on first use, nil once closed

	mu     sync.Mutex // dialing and closing
	closed bool
}

// maxFastAnswer bounds an answer the fast path takes over UDP (a relayed
// answer is at most 1,220 bytes plus the private options): a longer one
// fails the query, which the slow path asks again.
const maxFastAnswer = 4096

// muxBatch is how many answers one read takes at most.
const muxBatch = 16

type muxConn struct {
	c *net.UDPConn
	pending
}

// pending are the queries in flight on one socket or connection, by
// message ID.
type pending struct {
	mu       sync.Mutex
	m        map[uint16]*waiter
	closed   bool
	inflight atomic.Int32 // len(m), read without the lock
}

// add registers w under a free random ID; err when closed.
func (p *pending) add(w *waiter, closed error) (uint16, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, closed
	}
	if p.m == nil {
		p.m = map[uint16]*waiter{}
	}
	for range 64 {
		id := uint16(rand.Uint32())
		if _, used := p.m[id]; !used {
			p.m[id] = w
			p.inflight.Add(1)
			return id, nil
		}
	}
	return 0, errMuxBusy
}

// take removes id's waiter w; false when the reader took it first.
func (p *pending) take(id uint16, w *waiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[id] == w {
		delete(p.m, id)
		p.inflight.Add(-1)
		return true
	}
	return false
}

// pop removes and returns id's waiter (the reader's), nil when there is
// none.
func (p *pending) pop(id uint16) *waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.m[id]
	if w != nil {
		delete(p.m, id)
		p.inflight.Add(-1)
	}
	return w
}

// fail hands code to every query in flight, and takes no more when
// closing.
func (p *pending) fail(code int, closing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = p.closed || closing
	for id, w := range p.m {
		delete(p.m, id)
		p.inflight.Add(-1)
		w.ch <- code
	}
}

// isClosed reports whether fail closed it.
func (p *pending) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// muxPerSocket is how many queries in flight a socket takes before the
// next one is used.
const muxPerSocket = 64

// truncatedRead is what a waiter gets for an answer longer than its
// buffer.
const truncatedRead = -2

// waiter is one query in flight: the reader copies its answer into buf and
// sends the length on ch (-1: it failed). Reused through waiters.
type waiter struct {
	ch  chan int
	t   *time.Timer
	buf [maxFastAnswer]byte
	big []byte             // a TCP answer longer than buf (tcpmux.go)
	q   [fastQueryMax]byte // the query, written by fast.go
}

var waiters = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{ch: make(chan int, 1), t: t}
}}

// Every path of udpMux.exchange and tcpMux.exchange that registered a
// waiter either takes it back from the pending set or receives the one
// code the reader (or a failure) sends it: a waiter returns to the pool
// with nothing in its channel (TestWaiterEmptyAfterRefused).

var (
	errMuxClosed  = errors.New("member connection closed")
	errMuxTimeout = errors.New("member did not answer in time")
	errMuxFailed  = errors.New("member answer could not be read")
	errMuxTooLong = errors.New("member answer longer than the fast path's buffer")
	errMuxBusy    = errors.New("no free message ID")
)

func newUDPMux(addr string) *udpMux { return &udpMux{addr: addr} }

// muxSockets is how many sockets a member gets: 4, or one per core up to
// 16. Every answer in flight waits in a socket's receive buffer until its
// reader takes it, and a full buffer drops answers (the query then waits
// for its timeout): spread over several sockets, each with a receive
// buffer of muxReadBuffer, a router's queries in flight to one member fit.
func muxSockets() int { return min(max(runtime.GOMAXPROCS(0), 4), 16) }

// muxReadBuffer is the receive buffer asked for each socket (SO_RCVBUF;
// the kernel caps it at net.core.rmem_max, 208 KiB by default on Linux).
const muxReadBuffer = 4 << 20

// conn returns the socket for the next query, dialing them on first use.
// A query takes no lock here once they are dialed.
func (u *udpMux) conn() (*muxConn, error) {
	p := u.conns.Load()
	if p == nil {
		var err error
		if p, err = u.dial(); err != nil {
			return nil, err
		}
	}
	conns := *p
	// The first socket with room: few queries in flight share one
	// socket, so that its reader takes their answers together; more
	// spill over to the next, so that no receive buffer overflows.
	best := conns[0]
	for _, mc := range conns {
		n := mc.inflight.Load()
		if n < muxPerSocket {
			return mc, nil
		}
		if n < best.inflight.Load() {
			best = mc
		}
	}
	return best, nil
}

// dial opens the sockets, unless another query did or they were closed.
func (u *udpMux) dial() (*[]*muxConn, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errMuxClosed
	}
	if p := u.conns.Load(); p != nil {
		return p, nil
	}
	conns := make([]*muxConn, 0, muxSockets())
	for range cap(conns) {
		c, err := net.Dial("udp", u.addr)
		if err != nil {
			for _, mc := range conns {
				mc.close()
			}
			return nil, err
		}
		uc := c.(*net.UDPConn)
		uc.SetReadBuffer(muxReadBuffer) // best effort: capped by the kernel
		mc := &muxConn{c: uc}
		conns = append(conns, mc)
		go mc.read()
	}
	u.conns.Store(&conns)
	return &conns, nil
}

// close closes the sockets; queries in flight fail.
func (u *udpMux) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	if p := u.conns.Swap(nil); p != nil {
		// A query that loaded them before finds them closed (pending.add).
		for _, mc := range *p {
			mc.close()
		}
	}
}

func (mc *muxConn) close() {
	mc.fail(-1, true)
	mc.c.Close()
}

// exchange sends query q (its ID is set here) and returns the answer in
// w.buf (its length), waiting at most timeout.
func (u *udpMux) exchange(q []byte, w *waiter, timeout time.Duration) (int, error) {
	mc, err := u.conn()
	if err != nil {
		return 0, err
	}
	id, err := mc.add(w, errMuxClosed)
	if err != nil {
		return 0, err
	}
	binary.BigEndian.PutUint16(q, id)
	if _, err := mc.c.Write(q); err != nil {
		// A member that is gone: ICMP port unreachable is reported to
		// the next call on the socket, this write or the reader's read,
		// which then fails every query on it, this one too: its code is
		// taken here, so that the waiter goes back to the pool empty.
		if !mc.take(id, w) {
			<-w.ch
		}
		return 0, err
	}
	w.t.Reset(timeout)
	select {
	case n := <-w.ch:
		w.t.Stop()
		switch {
		case n == truncatedRead:
			return 0, errMuxTooLong
		case n < 0:
			return 0, errMuxFailed
		}
		return n, nil
	case <-w.t.C:
		if !mc.take(id, w) {
			// The reader took it meanwhile: its send is on the way.
			if n := <-w.ch; n >= 0 {
				return n, nil
			}
		}
		return 0, errMuxTimeout
	}
}

// batchReader is ipv4's and ipv6's PacketConn (their Message is one type).
type batchReader interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
}

// read takes the member's answers until the socket is closed.
func (mc *muxConn) read() {
	var br batchReader
	if a, ok := mc.c.RemoteAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		br = ipv6.NewPacketConn(mc.c)
	} else {
		br = ipv4.NewPacketConn(mc.c)
	}
	ms := make([]ipv4.Message, muxBatch)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, maxFastAnswer)}
	}
	for {
		n, err := br.ReadBatch(ms, 0)
		if err != nil {
			if mc.isClosed() {
				return
			}
			// ICMP port unreachable reaches a connected socket's next
			// read: the member is not there, every query fails.
			mc.fail(-1, false)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				time.Sleep(10 * time.Millisecond) // not a busy loop on a persistent error
			}
			continue
		}
		for i := range ms[:n] {
			m := &ms[i]
			if m.N < 2 {
				continue
			}
			b := m.Buffers[0][:m.N]
			w := mc.pop(binary.BigEndian.Uint16(b))
			if w == nil {
				continue // late (its query timed out), or not ours
			}
			if m.Flags&syscall.MSG_TRUNC != 0 {
				w.ch <- truncatedRead
				continue
			}
			w.ch <- copy(w.buf[:], b)
		}
	}
}
