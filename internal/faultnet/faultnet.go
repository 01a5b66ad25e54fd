// Package faultnet puts a TCP proxy on loopback in front of each directed
// link between the members of a test cluster, so that a test can break
// exactly the links it names, without root and without touching the
// machine's network: pass, hold, drop, reset or delay what flows.
//
// A directed link is what one member dials to reach another (craftstore's
// Raft transport dials one stream per peer; the answers to a stream come
// back on the peer's own stream, so a→b and b→a are separate links). The
// dialing member is configured with the link's address instead of the
// target's. Modes:
//
//   - Pass forwards both directions of every connection.
//   - Hold stops reading, as a switch that drops packets does: connections
//     stay open, what is sent piles up in the kernel's socket buffers and
//     then blocks the sender, and it all arrives late once the link passes
//     again (TCP retransmits). A connection dialled during a hold is
//     accepted, but reaches the target only when the hold ends.
//   - Drop reads what arrives and throws it away: the sender sees a live
//     connection that delivers nothing, a message lost for good.
//   - Reset closes every connection with a TCP reset, and resets each new
//     one at once, as a peer that rejects connections does.
//   - Delay forwards everything after a fixed delay, in order.
package faultnet

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a link does with the bytes that reach it.
type Mode int

// The modes of a link; the package doc says what each does.
const (
	Pass Mode = iota
	Hold
	Drop
	Reset
	Delay
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Hold:
		return "hold"
	case Drop:
		return "drop"
	case Reset:
		return "reset"
	case Delay:
		return "delay"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// chunkSize is what a direction reads at once; queueChunks bounds what one
// direction holds in user space (Delay), so that a slow link pushes back on
// the sender as a real one does.
const (
	chunkSize   = 32 << 10
	queueChunks = 64
)

// Net is a set of links. Its zero value is not usable: use New.
type Net struct {
	mu     sync.Mutex
	links  map[[2]string]*Link
	closed bool
}

// New returns an empty Net.
func New() *Net { return &Net{links: map[[2]string]*Link{}} }

// Link is one directed link: a listener on loopback that forwards each
// connection to the target address.
type Link struct {
	From, To string // names of the dialing and the dialled member
	target   string
	ln       net.Listener

	mu    sync.Mutex
	cond  *sync.Cond
	mode  Mode
	delay time.Duration
	conns map[*pipe]struct{}
	done  bool
	wg    sync.WaitGroup
}

// Link starts the link from → to, forwarding to target, and returns it.
// Dialling Addr() then reaches target through the link, in mode Pass.
func (n *Net) Link(from, to, target string) (*Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("faultnet: closed")
	}
	if _, ok := n.links[[2]string{from, to}]; ok {
		return nil, fmt.Errorf("faultnet: link %s→%s exists", from, to)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{From: from, To: to, target: target, ln: ln, conns: map[*pipe]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	n.links[[2]string{from, to}] = l
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Get returns the link from → to, or nil.
func (n *Net) Get(from, to string) *Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[[2]string{from, to}]
}

// Links returns every link that starts or ends at one of the named members;
// with no names, every link.
func (n *Net) Links(members ...string) []*Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*Link
	for k, l := range n.links {
		if len(members) == 0 || contains(members, k[0]) || contains(members, k[1]) {
			out = append(out, l)
		}
	}
	return out
}

// Between returns the links a → b and b → a that exist.
func (n *Net) Between(a, b string) []*Link {
	var out []*Link
	for _, l := range []*Link{n.Get(a, b), n.Get(b, a)} {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

// Isolate sets every link to and from member to mode.
func (n *Net) Isolate(member string, mode Mode) { Set(mode, n.Links(member)...) }

// Heal sets every link to Pass.
func (n *Net) Heal() { Set(Pass, n.Links()...) }

// Close stops every link and closes its connections.
func (n *Net) Close() {
	n.mu.Lock()
	n.closed = true
	links := make([]*Link, 0, len(n.links))
	for _, l := range n.links {
		links = append(links, l)
	}
	n.mu.Unlock()
	for _, l := range links {
		l.Close()
	}
}

// Set puts every link in mode (Delay keeps each link's delay; see SetDelay).
func Set(mode Mode, links ...*Link) {
	for _, l := range links {
		l.Set(mode)
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// Addr is the address to dial instead of the target's.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Mode returns the link's mode.
func (l *Link) Mode() Mode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode
}

// Set changes the link's mode; it applies at once to every connection.
func (l *Link) Set(mode Mode) {
	l.mu.Lock()
	l.mode = mode
	var reset []*pipe
	if mode == Reset {
		for p := range l.conns {
			reset = append(reset, p)
		}
	}
	l.cond.Broadcast()
	l.mu.Unlock()
	for _, p := range reset {
		p.reset()
	}
}

// SetDelay sets the link to Delay, forwarding everything d after it arrived.
func (l *Link) SetDelay(d time.Duration) {
	l.mu.Lock()
	l.delay = d
	l.mu.Unlock()
	l.Set(Delay)
}

// Close stops the listener and closes every connection of the link.
func (l *Link) Close() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	l.cond.Broadcast()
	conns := make([]*pipe, 0, len(l.conns))
	for p := range l.conns {
		conns = append(conns, p)
	}
	l.mu.Unlock()
	l.ln.Close()
	for _, p := range conns {
		p.close()
	}
	l.wg.Wait()
}

// await waits while the link holds and returns the mode it passes with;
// ok is false once the link or the pipe p is closed.
func (l *Link) await(p *pipe) (mode Mode, delay time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.mode == Hold && !l.done && !p.gone.Load() {
		l.cond.Wait()
	}
	return l.mode, l.delay, !l.done && !p.gone.Load()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		p := &pipe{l: l, client: c.(*net.TCPConn)}
		l.mu.Lock()
		if l.done {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.conns[p] = struct{}{}
		reset := l.mode == Reset
		l.wg.Add(1)
		l.mu.Unlock()
		if reset {
			p.reset()
		}
		go p.run()
	}
}

// pipe is one proxied connection.
type pipe struct {
	l      *Link
	client *net.TCPConn
	gone   atomic.Bool
	mu     sync.Mutex
	server *net.TCPConn
}

func (p *pipe) run() {
	defer p.l.wg.Done()
	defer func() {
		p.close()
		p.l.mu.Lock()
		delete(p.l.conns, p)
		p.l.mu.Unlock()
	}()
	// The target is dialled once the link passes: during a hold the
	// connection waits, as a SYN retransmitted through a partition does.
	mode, _, ok := p.l.await(p)
	if !ok || mode == Reset {
		return
	}
	c, err := net.DialTimeout("tcp", p.l.target, 5*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.server = c.(*net.TCPConn)
	p.mu.Unlock()
	if p.gone.Load() {
		c.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.forward(p.server, p.client); done <- struct{}{} }()
	go func() { p.forward(p.client, p.server); done <- struct{}{} }()
	<-done
	p.close()
	<-done
}

// close closes both ends of the pipe and wakes its forwarders.
func (p *pipe) close() {
	p.gone.Store(true)
	p.mu.Lock()
	p.client.Close()
	if p.server != nil {
		p.server.Close()
	}
	p.mu.Unlock()
	p.l.mu.Lock()
	p.l.cond.Broadcast()
	p.l.mu.Unlock()
}

// reset closes both ends with a TCP reset (SO_LINGER 0).
func (p *pipe) reset() {
	p.mu.Lock()
	p.client.SetLinger(0)
	if p.server != nil {
		p.server.SetLinger(0)
	}
	p.mu.Unlock()
	p.close()
}

type chunk struct {
	b  []byte
	at time.Time
}

// forward copies src to dst as the link's mode says: the reader stops
// reading while the link holds; the writer throws chunks away while it
// drops and writes each one its delay after it arrived while it delays.
func (p *pipe) forward(dst, src *net.TCPConn) {
	l := p.l
	q := make(chan chunk, queueChunks)
	go func() {
		defer close(q)
		for {
			if _, _, ok := l.await(p); !ok {
				return
			}
			b := make([]byte, chunkSize)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b: b[:n], at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		dst.Close()
		src.Close()
		for range q { // let the reader end
		}
	}()
	for c := range q {
		mode, delay, ok := l.await(p)
		if !ok {
			return
		}
		switch mode {
		case Drop:
			continue
		case Reset:
			return
		case Delay:
			time.Sleep(time.Until(c.at.Add(delay)))
			if m, _, ok := l.await(p); !ok || m == Reset {
				return
			} else if m == Drop {
				continue
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
