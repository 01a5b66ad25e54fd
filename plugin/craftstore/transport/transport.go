package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Raft is the local node as the transport sees it. raft.Node provides
// ReportUnreachable and ReportSnapshot; Process usually wraps raft.Node.Step.
type Raft interface {
	// Process hands an incoming message to the local node. It may block
	// (raft.Node.Step holds a proposal until the node knows a leader) but
	// must return once ctx ends; the transport calls it with a deadline,
	// never from a connection's reader.
	Process(ctx context.Context, m *raftpb.Message) error
	// ReportUnreachable tells the node that the last send to id failed.
	ReportUnreachable(id uint64)
	// ReportSnapshot tells the node how sending a snapshot to id ended.
	ReportSnapshot(id uint64, status raft.SnapshotStatus)
}

// Snapshotter streams the member's state machine. The MsgSnap itself carries
// only metadata; the state follows it on the wire.
type Snapshotter interface {
	// WriteSnapshot writes the current state to w (leader side).
	WriteSnapshot(w io.Writer) error
	// ReceiveSnapshot reads what WriteSnapshot wrote from r and stages it
	// (follower side). It is called before m is handed to Raft.Process, and
	// m is handed over only if it returns nil and the stream's checksum is
	// correct; staged state must therefore not be used until Raft delivers
	// m's snapshot in a Ready. r returns io.EOF only after the checksum has
	// been verified.
	ReceiveSnapshot(m *raftpb.Message, r io.Reader) error
}

// Logger is what the transport logs through; CoreDNS's clog.P satisfies it.
type Logger interface {
	Infof(format string, args ...any)
	Warningf(format string, args ...any)
}

// Defaults for Config fields left zero.
const (
	DefaultQueueSize     = 4096
	DefaultDialTimeout   = time.Second
	DefaultStreamTimeout = 2 * time.Second
)

// Config configures a Transport.
type Config struct {
	// ID is this member's Raft ID; it must not be zero.
	ID uint64
	// Cluster names the cluster; connections from another cluster are refused.
	Cluster string
	// Listen is the host:port to accept peer connections on.
	Listen string
	// Raft receives incoming messages and send reports.
	Raft Raft
	// Snapshotter writes and receives snapshot state.
	Snapshotter Snapshotter
	// QueueSize is the per-peer outgoing queue length (DefaultQueueSize if 0).
	QueueSize int
	// DialTimeout bounds a dial and its handshake (DefaultDialTimeout if 0).
	DialTimeout time.Duration
	// StreamTimeout is how long a stream connection may stay silent before
	// it counts as dead and is redialled (DefaultStreamTimeout if 0). Both
	// sides of an idle stream send keepalives four times as often.
	StreamTimeout time.Duration
	// IsRemoved, when set, tells whether a member id was removed from the
	// group: connections from it are refused with a reply that makes its
	// transport call OnRemoved (etcd's rafthttp answers such peers 410 Gone).
	IsRemoved func(id uint64) bool
	// OnRemoved, when set, is called (possibly repeatedly) when a peer
	// refuses this member because it was removed from the group.
	OnRemoved func()
	// TLS, when set, makes every connection mutual TLS (LoadTLS): peers
	// without a certificate from its CA can neither connect nor be
	// connected to. A transport runs with TLS or without for its whole
	// life; SetTLS changes the certificates.
	TLS *TLS
	// Logger logs connection changes; nil logs nothing.
	Logger Logger
}

// Transport sends and receives the Raft messages of one member.
type Transport struct {
	cfg    Config
	log    Logger
	ctx    context.Context // cancelled by Stop
	cancel context.CancelFunc

	stopped atomic.Bool
	once    sync.Once
	tls     atomic.Pointer[TLS] // nil: plain TCP

	mu       sync.RWMutex
	peers    map[uint64]*peer
	ln       net.Listener
	incoming map[net.Conn]struct{}
	streams  map[uint64]net.Conn // newest incoming stream per sender

	snapMu sync.Mutex // one snapshot received at a time
	wg     sync.WaitGroup
}

// New checks cfg and returns a Transport that has not started listening.
func New(cfg Config) (*Transport, error) {
	switch {
	case cfg.ID == 0:
		return nil, errors.New("transport: member ID must not be zero")
	case cfg.Raft == nil:
		return nil, errors.New("transport: Raft is required")
	case cfg.Snapshotter == nil:
		return nil, errors.New("transport: Snapshotter is required")
	case len(cfg.Cluster) > maxClusterLen:
		return nil, fmt.Errorf("transport: cluster name longer than %d bytes", maxClusterLen)
	case cfg.QueueSize < 0 || cfg.DialTimeout < 0 || cfg.StreamTimeout < 0:
		return nil, errors.New("transport: negative QueueSize, DialTimeout or StreamTimeout")
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.StreamTimeout == 0 {
		cfg.StreamTimeout = DefaultStreamTimeout
	}
	t := &Transport{
		cfg:      cfg,
		log:      cfg.Logger,
		peers:    make(map[uint64]*peer),
		incoming: make(map[net.Conn]struct{}),
		streams:  make(map[uint64]net.Conn),
	}
	if t.log == nil {
		t.log = nopLogger{}
	}
	t.tls.Store(cfg.TLS)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// SetTLS replaces the certificates of a transport that runs with TLS (a
// Corefile reload that read the files again). Connections made from then
// on use them; the open ones are closed, and redialled, so that a peer
// whose certificate the new CA no longer accepts is cut off at once. It
// reports whether anything changed; turning TLS on or off needs a restart.
func (t *Transport) SetTLS(n *TLS) (bool, error) {
	old := t.tls.Load()
	if (old == nil) != (n == nil) {
		return false, errors.New("transport: TLS is turned on or off only by a restart")
	}
	if old.Equal(n) {
		return false, nil
	}
	t.tls.Store(n)
	t.mu.Lock()
	for c := range t.incoming {
		c.Close()
	}
	peers := make([]*peer, 0, len(t.peers))
	for _, p := range t.peers {
		peers = append(peers, p)
	}
	t.mu.Unlock()
	for _, p := range peers {
		p.reconnect()
	}
	return true, nil
}

// Start listens on cfg.Listen and serves incoming connections.
func (t *Transport) Start() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return errors.New("transport: stopped")
	}
	if t.ln != nil {
		return errors.New("transport: already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(t.ctx, "tcp", t.cfg.Listen)
	if err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	t.ln = ln
	t.wg.Add(1)
	go t.serve(ln)
	return nil
}

// Addr returns the address the transport listens on, or nil before Start.
func (t *Transport) Addr() net.Addr {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ln == nil {
		return nil
	}
	return t.ln.Addr()
}

// AddPeer starts sending to member id at addr. Adding a known peer with a new
// address redials it; with the same address it does nothing.
func (t *Transport) AddPeer(id uint64, addr string) {
	if id == 0 || id == t.cfg.ID {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return
	}
	if p, ok := t.peers[id]; ok {
		p.setAddr(addr)
		return
	}
	p := newPeer(t, id, addr)
	t.peers[id] = p
	p.start()
}

// RemovePeer stops sending to member id, closes its connections and waits
// for its goroutines; what was queued for it is dropped.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p, ok := t.peers[id]
	delete(t.peers, id)
	// Its incoming stream goes too: when it redials, IsRemoved can refuse it.
	if c := t.streams[id]; c != nil {
		c.Close()
	}
	t.mu.Unlock()
	if ok {
		p.stop()
	}
}

// Send queues msgs for their recipients and returns without blocking. A
// message that does not fit into its peer's queue is dropped and the peer is
// reported unreachable (a dropped MsgSnap is also reported as a failed
// snapshot). Send takes ownership of the messages: the caller must not modify
// them afterwards.
func (t *Transport) Send(msgs []*raftpb.Message) {
	if t.stopped.Load() {
		return
	}
	for _, m := range msgs {
		if m == nil {
			continue
		}
		to := m.GetTo()
		t.mu.RLock()
		p := t.peers[to]
		t.mu.RUnlock()
		isSnap := m.GetType() == raftpb.MessageType_MsgSnap
		if p != nil && p.enqueue(m, isSnap) {
			continue
		}
		t.cfg.Raft.ReportUnreachable(to)
		if isSnap {
			t.cfg.Raft.ReportSnapshot(to, raft.SnapshotFailure)
		}
	}
}

// Stop closes the listener, every connection and every goroutine of the
// transport, and waits for them. It is safe to call more than once.
func (t *Transport) Stop() {
	t.once.Do(func() {
		t.stopped.Store(true)
		t.cancel()
		t.mu.Lock()
		peers := t.peers
		t.peers = make(map[uint64]*peer)
		if t.ln != nil {
			t.ln.Close()
		}
		for c := range t.incoming {
			c.Close()
		}
		t.mu.Unlock()
		for _, p := range peers {
			p.stop()
		}
		t.wg.Wait()
	})
}

// track registers an incoming connection so that Stop closes it. It returns
// false (and closes c) once the transport is stopped.
func (t *Transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		c.Close()
		return false
	}
	t.incoming[c] = struct{}{}
	return true
}

// untrack forgets an incoming connection.
func (t *Transport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.incoming, c)
	t.mu.Unlock()
}

type nopLogger struct{}

func (nopLogger) Infof(string, ...any)    {}
func (nopLogger) Warningf(string, ...any) {}
