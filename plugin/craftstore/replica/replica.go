// Package replica is one member of a craftstore Raft group: a bbolt file
// holding the Raft log and the zone data, the Raft node and its Ready loop,
// the peer transport, and the in-memory zone views that answer queries.
//
// Every committed entry is applied to bbolt in the same transaction that
// persists the Raft Ready it came with, together with the applied index, so
// one fsync covers a whole Ready and a crash never loses or re-applies an
// entry. The views are updated after that transaction commits; a proposer
// is answered after its entry is applied to the views of its own member.
//
// What an entry does to the state is package fsm's (the state machine,
// deterministic, over bbolt); this package drives Raft around it: the
// node and its Ready loop (node.go), proposals and their waiters
// (propose.go), reads that confirm the state is current (fresh.go),
// readiness and storage health (health.go), leadership hand-off
// (handoff.go), snapshots (snapshot.go), and the views that answer
// queries (views.go, txview.go).
package replica

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/plugin/craftstore/raftlog"
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"
	"github.com/craftdns/craftdns/plugin/craftstore/transport"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Logger is what the replica logs through (CoreDNS's clog.P fits).
type Logger interface {
	Debugf(format string, v ...any) // shown with CoreDNS's debug plugin
	Infof(format string, v ...any)
	Warningf(format string, v ...any)
	Errorf(format string, v ...any)
}

// Config configures a replica.
type Config struct {
	ID       uint64   // member id, non-zero, never reused
	Cluster  string   // cluster name; peers of another cluster are refused
	Dir      string   // data directory; the bbolt file is Dir/craftstore.db
	RaftAddr string   // listen (and advertised) address for peers
	Peers    []Member // initial members of a new group (this one included)
	Join     bool     // this member was added to a running group
	// SnapshotEntries is how many applied entries trigger a local snapshot
	// and log compaction; CatchupEntries stay in the log behind it so that
	// slightly lagging members catch up without a snapshot.
	SnapshotEntries uint64
	CatchupEntries  uint64
	Tick            time.Duration // Raft tick, default 100ms
	Logger          Logger
	Observer        Observer // optional: metrics
	// Journal is how many changes per zone the IXFR journal keeps: 0 means
	// DefaultJournal, a negative value turns the journal off (every
	// transfer is then a full one). Trimming happens in apply: members
	// should use the same value to hold the same journal.
	Journal int
	// OnChange, if set, is called from the Ready loop with the origin of
	// each zone whose data changed, once the views show the change (for
	// NOTIFY). It must not block.
	OnChange func(zone string)
	// TLS, when set, is the mutual TLS of the Raft transport
	// (transport.LoadTLS); nil: plain TCP.
	TLS *transport.TLS
	// PagedCache, when above 0, puts the member in paged mode (paged.go):
	// the zones' views read the bbolt file, with a cache of that many
	// decoded names each (at least zone.MinPagedCache); 0: every record
	// is held decoded in memory.
	PagedCache int
}

// Observer is told about proposals and applies, for metrics.
type Observer interface {
	// Applied is called after each Ready with the entries applied and how
	// long persisting and applying them took.
	Applied(entries int, d time.Duration)
	// Proposed is called when a proposal ends: nil when it was applied, a
	// *Error when it was refused or timed out.
	Proposed(err error)
	// StorageFailed is called each time persisting or loading state fails
	// (the Ready loop retries).
	StorageFailed()
}

// FileName is the name of the bbolt file in the data directory.
const FileName = "craftstore.db"

// Replica is a running member.
type Replica struct {
	cfg   Config
	log   Logger
	db    *bolt.DB
	store *raftlog.Storage
	node  raft.Node
	tr    *transport.Transport

	zones atomic.Pointer[zoneSet]
	// snap is the read transaction paged queries share (paged.go), nil
	// while the Ready loop writes; snapMu serializes its replacement, and
	// snapDone closes when its renewing goroutine has stopped.
	snap     atomic.Pointer[readSnap]
	snapMu   sync.Mutex
	snapDone chan struct{}
	// seeded holds the zones whose seed import committed (import.go).
	seeded atomic.Pointer[map[string]bool]
	// locks are the names transactions hold on this shard (txview.go).
	locks lockView

	mu        sync.Mutex
	waiters   map[uint64]chan applied
	late      map[uint64]late // proposals whose caller gave up (WithLate)
	draining  bool            // Drain was called: new writes are refused
	refusedAt time.Time       // when the last write was refused since
	nextID    atomic.Uint64

	// Owned by the Ready loop.
	confState *pb.ConfState
	snapIndex uint64
	staged    stagedSnapshot
	// voted is the term and vote on disk: a leader sends a Ready's
	// messages before persisting it only while they are unchanged.
	voted struct{ term, vote uint64 }

	shardMap atomic.Pointer[shardmap.Place] // the shard map applied last, and this shard's place in it (fsm/shardmap.go)
	// keysVersion changes with the zones' DNSSEC keys (keys.go).
	keysVersion atomic.Uint64

	applied atomic.Uint64
	// raftApplied is the index of the last entry handed to raft as applied
	// (a conf change among them applied to the stored ConfState): below
	// applied while the entries of a snapshot whose data was newer than
	// its metadata come again (persist). Set after the transaction that
	// reaches it committed.
	raftApplied atomic.Uint64
	// appliedSignal is closed, and replaced, each time applied rises.
	appliedSignal atomic.Pointer[chan struct{}]
	freshReads    freshReads
	// pending is what the Ready being persisted and applied changes, nil
	// between Readys (pending.go); pendingParts, owned by the Ready loop,
	// what prepared transaction parts change when they commit.
	pending      atomic.Pointer[pendingReady]
	pendingParts map[[16]byte]*partTouch
	// beforePersist, when set (tests), is called by the Ready loop with
	// each Ready it persists, once its pending changes are published.
	beforePersist atomic.Pointer[func(raft.Ready)]
	appliedAt     atomic.Uint64 // term of the applied entry
	commit        atomic.Uint64
	term          atomic.Uint64
	leader        atomic.Uint64
	health        health // Ready loop only
	ready         atomic.Bool
	// leaderless is set while the member has known no leader for
	// staleTicks (health.go): writes to it fail at once.
	leaderless atomic.Bool
	// storageFailing holds the error of a Ready that could not be
	// persisted while the Ready loop retries it.
	storageFailing atomic.Pointer[error]
	removed        atomic.Bool
	removedc       chan struct{}
	removedIDs     atomic.Pointer[map[uint64]bool]
	fresh          bool // the data directory was new

	stopc chan struct{}
	donec chan struct{}
	stop  sync.Once
}

type applied struct {
	res Result
	err error
}

// initialMmap returns the size bbolt maps the file at path with from the
// start: address space, not memory (only the pages read are resident, as
// file-backed memory). A writer that grows the file past the map remaps it,
// which waits for every read transaction to end while new ones wait for it
// (bbolt #392): a long read (a snapshot streaming to a follower, a filter
// being built, a zone transfer) would stall writes and then every paged
// query. So the map leaves room for the file to grow to four times its size
// at the start, 1 GiB at least, 1 TiB at most.
func initialMmap(path string) int {
	size := int64(0)
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}
	return int(min(max(1<<30, 4*size), 1<<40))
}

// Open opens (or creates) the member's data directory and starts Raft.
func Open(cfg Config) (*Replica, error) {
	if cfg.ID == 0 {
		return nil, errors.New("member id must be non-zero")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "craftdns"
	}
	if cfg.SnapshotEntries == 0 {
		cfg.SnapshotEntries = 10000
	}
	if cfg.CatchupEntries == 0 {
		cfg.CatchupEntries = cfg.SnapshotEntries / 2
	}
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = nopLogger{}
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, err
	}
	readAhead(filepath.Join(cfg.Dir, FileName))
	db, err := bolt.Open(filepath.Join(cfg.Dir, FileName), 0o600, &bolt.Options{
		Timeout:         5 * time.Second,
		NoFreelistSync:  true,
		InitialMmapSize: initialMmap(filepath.Join(cfg.Dir, FileName)),
		FreelistType:    bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", filepath.Join(cfg.Dir, FileName), err)
	}
	r := &Replica{cfg: cfg, log: cfg.Logger, db: db, waiters: map[uint64]chan applied{}, pendingParts: map[[16]byte]*partTouch{}, late: map[uint64]late{},
		stopc: make(chan struct{}), donec: make(chan struct{}), removedc: make(chan struct{})}
	r.nextID.Store(rand.Uint64() &^ (1 << 63))
	sig := make(chan struct{})
	r.appliedSignal.Store(&sig)
	empty := zoneSet{}
	r.zones.Store(&empty)
	r.seeded.Store(&map[string]bool{})
	if err := r.open(); err != nil {
		db.Close()
		return nil, err
	}
	return r, nil
}

// checkOwner refuses a data directory made for another cluster or another
// member id: started there, the member would take another group's log and
// zones for its own, or vote with another member's Raft state. A directory
// that does not say (new, or from before it was recorded) is marked for
// this cluster and member.
func (r *Replica) checkOwner(meta *bolt.Bucket) error {
	dir := r.cfg.Dir
	if c := meta.Get(fsm.KeyCluster); c != nil && string(c) != r.cfg.Cluster {
		return fmt.Errorf("data directory %s belongs to cluster %q, not %q: start the member with its own directory, or with cluster %q", dir, c, r.cfg.Cluster, c)
	}
	if b := meta.Get(fsm.KeyMember); len(b) == 8 && binary.BigEndian.Uint64(b) != r.cfg.ID {
		return fmt.Errorf("data directory %s belongs to member %d, not %d: every member needs a directory of its own", dir, binary.BigEndian.Uint64(b), r.cfg.ID)
	}
	if meta.Get(fsm.KeyCluster) == nil {
		if err := meta.Put(fsm.KeyCluster, []byte(r.cfg.Cluster)); err != nil {
			return err
		}
	}
	if meta.Get(fsm.KeyMember) == nil {
		return meta.Put(fsm.KeyMember, binary.BigEndian.AppendUint64(nil, r.cfg.ID))
	}
	return nil
}

// open prepares buckets, views, transport and the Raft node.
func (r *Replica) open() error {
	var members []Member
	var appliedIndex uint64
	err := r.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(fsm.BucketMeta)
		if err != nil {
			return err
		}
		if err := r.checkOwner(meta); err != nil {
			return err // the transaction rolls back: nothing is written
		}
		if meta.Get(fsm.KeyCurrent) == nil {
			r.fresh = true
			name, _, err := fsm.CreateGeneration(tx)
			if err != nil {
				return err
			}
			if err := meta.Put(fsm.KeyCurrent, name); err != nil {
				return err
			}
		}
		// Generations other than the current one are leftovers of a snapshot
		// transfer that did not finish.
		cur := meta.Get(fsm.KeyCurrent)
		var stale [][]byte
		tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if bytes.HasPrefix(name, []byte("data.")) && !bytes.Equal(name, cur) {
				stale = append(stale, append([]byte(nil), name...))
			}
			return nil
		})
		for _, name := range stale {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		g := fsm.Generation(tx)
		appliedIndex, _ = fsm.Applied(g)
		removed := fsm.RemovedIDs(g)
		r.removedIDs.Store(&removed)
		members, err = fsm.Members(g)
		return err
	})
	if err != nil {
		return err
	}
	if r.store, err = raftlog.Open(r.db); err != nil {
		return err
	}
	if err := r.loadAllZones(); err != nil {
		return err
	}
	if err := r.loadShardMap(); err != nil {
		return err
	}

	hs, cs, err := r.store.InitialState()
	if err != nil {
		return err
	}
	snap, err := r.store.Snapshot()
	if err != nil {
		return err
	}
	r.confState = cs
	r.snapIndex = snap.GetMetadata().GetIndex()
	r.applied.Store(appliedIndex)
	r.raftApplied.Store(min(appliedIndex, hs.GetCommit())) // raft.Config.Applied below
	r.commit.Store(hs.GetCommit())
	r.term.Store(hs.GetTerm())
	r.voted.term, r.voted.vote = hs.GetTerm(), hs.GetVote()
	r.health.index = hs.GetCommit()
	// A new group's member starts its Raft node with the group's initial
	// members; so does one whose directory was made by a start that ended
	// before its node persisted anything (killed in its first moments):
	// no vote, no entry, no snapshot. Restarted as it was, it would know no
	// member, not even itself, and never elect a leader.
	last, err := r.store.LastIndex()
	if err != nil {
		return err
	}
	fresh := raft.IsEmptyHardState(hs) && last == 0 && r.snapIndex == 0

	r.tr, err = transport.New(transport.Config{
		ID:          r.cfg.ID,
		Cluster:     r.cfg.Cluster,
		Listen:      r.cfg.RaftAddr,
		Raft:        (*raftAdapter)(r),
		Snapshotter: (*snapshotter)(r),
		TLS:         r.cfg.TLS,
		Logger:      r.log,
		// Two election timeouts: a stream silent for that long is dead.
		StreamTimeout: 20 * r.cfg.Tick,
		IsRemoved:     r.isRemoved,
		OnRemoved:     r.setRemoved,
	})
	if err != nil {
		return err
	}
	// raft refuses an applied index beyond the commit index it knows; after
	// a snapshot install the data may be ahead of both, and entries up to
	// the data's applied index are skipped when they come again.
	rc := &raft.Config{
		ID:              r.cfg.ID,
		ElectionTick:    10,
		HeartbeatTick:   1,
		Storage:         r.store,
		Applied:         min(appliedIndex, hs.GetCommit()),
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		CheckQuorum:     true,
		PreVote:         true,
		Logger:          raftLogger{r.log},
	}
	switch {
	case fresh && !r.cfg.Join:
		if len(r.cfg.Peers) == 0 {
			return errors.New("a new group needs its initial members")
		}
		var rp []raft.Peer
		for _, m := range r.cfg.Peers {
			ctx, _ := json.Marshal(m)
			rp = append(rp, raft.Peer{ID: m.ID, Context: ctx})
		}
		r.node = raft.StartNode(rc, rp)
	default:
		r.node = raft.RestartNode(rc)
	}
	if err := r.tr.Start(); err != nil {
		r.node.Stop()
		return fmt.Errorf("raft transport on %s: %w", r.cfg.RaftAddr, err)
	}
	peers := members
	if fresh {
		peers = r.cfg.Peers
	}
	for _, m := range peers {
		if m.ID != r.cfg.ID {
			r.tr.AddPeer(m.ID, m.Raft)
		}
	}
	if r.cfg.PagedCache > 0 {
		r.renewSnap()
		r.snapDone = make(chan struct{})
		go r.renewSnaps()
	}
	go r.run()
	return nil
}

// Close stops Raft, the transport and closes the bbolt file.
func (r *Replica) Close() error {
	r.stop.Do(func() { close(r.stopc) })
	<-r.donec
	if r.snapDone != nil {
		<-r.snapDone
	}
	r.dropSnap()
	return r.db.Close()
}

// SetTLS replaces the certificates of the Raft transport's mutual TLS
// (transport.SetTLS): the member redials its peers with them. It reports
// whether they changed; TLS is turned on or off only by a restart.
func (r *Replica) SetTLS(t *transport.TLS) (bool, error) { return r.tr.SetTLS(t) }

// RaftAddr returns the address the transport listens on.
func (r *Replica) RaftAddr() string { return r.tr.Addr().String() }

// Created reports whether this run created the member's data directory.
func (r *Replica) Created() bool { return r.fresh }

// ID returns the member id.
func (r *Replica) ID() uint64 { return r.cfg.ID }

// Ready reports whether the member may answer for its group (health.go):
// it knows a leader, has applied what the leader told it was committed, and
// its storage works.
func (r *Replica) Ready() bool { return r.ready.Load() }

// Status is a member's view of the group.
type Status struct {
	ID      uint64 `json:"id"`
	Leader  uint64 `json:"leader"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// Ready tells whether the member may answer for its group (see Ready).
	Ready bool `json:"ready"`
	// StorageError is the error that keeps the member's storage failing.
	StorageError string   `json:"storage_error,omitempty"`
	Members      []Member `json:"members"`
	// FSMVersion is how this member applies a migration's entries
	// (fsm.Version).
	FSMVersion int `json:"fsm_version"`
}

// Status returns the member's view of the group.
func (r *Replica) Status() (Status, error) {
	s := Status{ID: r.cfg.ID, Leader: r.leader.Load(), Term: r.term.Load(),
		Commit: r.commit.Load(), Applied: r.applied.Load(), Ready: r.Ready(), FSMVersion: fsm.Version}
	if err := r.StorageError(); err != nil {
		// Its view of the group is as old as its last persisted Ready.
		s.Leader = raft.None
		s.StorageError = err.Error()
	}
	err := r.db.View(func(tx *bolt.Tx) error {
		var err error
		s.Members, err = fsm.Members(fsm.Generation(tx))
		return err
	})
	if s.Members == nil {
		s.Members = []Member{}
	}
	return s, err
}

// IsLeader reports whether this member is the leader. A member whose
// storage fails is not: it cannot persist or send anything, and its
// followers elect another.
func (r *Replica) IsLeader() bool { return r.leader.Load() == r.cfg.ID && r.Healthy() }

// Removed reports whether this member was removed from the group.
func (r *Replica) Removed() bool { return r.removed.Load() }

type nopLogger struct{}

func (nopLogger) Debugf(string, ...any)   {}
func (nopLogger) Infof(string, ...any)    {}
func (nopLogger) Warningf(string, ...any) {}
func (nopLogger) Errorf(string, ...any)   {}
