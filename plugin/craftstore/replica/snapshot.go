package replica

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A Raft snapshot message carries only metadata (index, term, ConfState);
// the state follows it on the wire as a stream of the generation bucket:
// the leader writes it from one bbolt read transaction, the follower writes
// it into a new generation bucket in batches, and the Ready that hands the
// snapshot to the application switches meta/current to that bucket. Neither
// side holds the state in memory. The streamed data may be newer than the
// snapshot's metadata index (the leader applied more meanwhile); its own
// applied index comes with it, and entries up to that index are skipped.

const (
	recEnd    = 0
	recKV     = 1
	recBucket = 2 // enter a nested bucket
	recLeave  = 3 // leave it

	snapMagic = "craftstore-snapshot-1\n"

	// receiveBatch is how many keys a follower writes per transaction.
	receiveBatch = 20000
)

// stagedSnapshot is a received state waiting for raft to install it.
type stagedSnapshot struct {
	mu      sync.Mutex
	gen     []byte // generation bucket name
	index   uint64 // snapshot metadata index and term it came with
	term    uint64
	applied uint64 // applied index of the data
}

type snapshotter Replica

// WriteSnapshot streams the current state to w.
func (s *snapshotter) WriteSnapshot(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	err := s.db.View(func(tx *bolt.Tx) error {
		if _, err := bw.WriteString(snapMagic); err != nil {
			return err
		}
		return writeBucket(bw, fsm.Generation(tx))
	})
	if err != nil {
		return err
	}
	if err := bw.WriteByte(recEnd); err != nil {
		return err
	}
	return bw.Flush()
}

func writeBucket(w *bufio.Writer, b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil { // nested bucket
			if err := writeRec(w, recBucket, k, nil); err != nil {
				return err
			}
			if err := writeBucket(w, b.Bucket(k)); err != nil {
				return err
			}
			return w.WriteByte(recLeave)
		}
		return writeRec(w, recKV, k, v)
	})
}

// writeRec writes kind, then the key behind its length, then for recKV the
// value behind its length.
func writeRec(w *bufio.Writer, kind byte, k, v []byte) error {
	var tmp [binary.MaxVarintLen64]byte
	w.WriteByte(kind)
	w.Write(tmp[:binary.PutUvarint(tmp[:], uint64(len(k)))])
	w.Write(k)
	if kind != recKV {
		return nil
	}
	w.Write(tmp[:binary.PutUvarint(tmp[:], uint64(len(v)))])
	_, err := w.Write(v) // a bufio.Writer keeps its first error
	return err
}

// ReceiveSnapshot stages the state streamed with snapshot message m.
func (s *snapshotter) ReceiveSnapshot(m *pb.Message, rd io.Reader) error {
	r := (*Replica)(s)
	r.staged.mu.Lock()
	defer r.staged.mu.Unlock()
	r.dropStaged()

	br := bufio.NewReaderSize(rd, 256<<10)
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapMagic {
		return fmt.Errorf("not a craftstore snapshot stream")
	}
	var gen []byte
	err := r.db.Update(func(tx *bolt.Tx) error {
		name, _, err := fsm.CreateGeneration(tx)
		gen = name
		return err
	})
	if err != nil {
		return err
	}
	if err := r.receiveInto(gen, br); err != nil {
		r.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(gen) })
		return err
	}
	var applied uint64
	r.db.View(func(tx *bolt.Tx) error {
		applied, _ = fsm.Applied(tx.Bucket(gen))
		return nil
	})
	meta := m.GetSnapshot().GetMetadata()
	r.staged.gen, r.staged.index, r.staged.term, r.staged.applied = gen, meta.GetIndex(), meta.GetTerm(), applied
	r.log.Infof("member %d received snapshot %d (data applied to %d)", r.cfg.ID, meta.GetIndex(), applied)
	return nil
}

// receiveInto writes the records of a stream into generation gen, a batch
// of keys per transaction, reopening the bucket path in each.
func (r *Replica) receiveInto(gen []byte, br *bufio.Reader) error {
	path := [][]byte{}
	for end := false; !end; {
		err := r.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(gen)
			for _, p := range path {
				b = b.Bucket(p)
			}
			for n := 0; n < receiveBatch; n++ {
				kind, err := br.ReadByte()
				if err != nil {
					return fmt.Errorf("snapshot stream: %w", err)
				}
				switch kind {
				case recEnd:
					if len(path) != 0 {
						return errors.New("snapshot stream ends inside a bucket")
					}
					end = true
					return nil
				case recLeave:
					if len(path) == 0 {
						return errors.New("snapshot stream leaves the top bucket")
					}
					path = path[:len(path)-1]
					b = tx.Bucket(gen)
					for _, p := range path {
						b = b.Bucket(p)
					}
				case recBucket:
					k, err := readBytes(br)
					if err != nil {
						return err
					}
					if b, err = b.CreateBucketIfNotExists(k); err != nil {
						return err
					}
					path = append(path, k)
				case recKV:
					k, err := readBytes(br)
					if err != nil {
						return err
					}
					v, err := readBytes(br)
					if err != nil {
						return err
					}
					if err := b.Put(k, v); err != nil {
						return err
					}
				default:
					return fmt.Errorf("snapshot stream: unknown record %d", kind)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func readBytes(br *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, fmt.Errorf("snapshot stream: %w", err)
	}
	if n > 64<<20 {
		return nil, fmt.Errorf("snapshot stream: record of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, fmt.Errorf("snapshot stream: %w", err)
	}
	return b, nil
}

// dropStaged deletes a staged generation that was never installed.
func (r *Replica) dropStaged() {
	if r.staged.gen == nil {
		return
	}
	gen := r.staged.gen
	r.staged.gen = nil
	r.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(gen) != nil {
			return tx.DeleteBucket(gen)
		}
		return nil
	})
}

// installSnapshot switches to the staged generation inside the Ready's
// transaction, with raft's snapshot metadata.
func (r *Replica) installSnapshot(tx *bolt.Tx, snap *pb.Snapshot) error {
	r.staged.mu.Lock()
	defer r.staged.mu.Unlock()
	meta := snap.GetMetadata()
	if r.staged.gen == nil || r.staged.index != meta.GetIndex() || r.staged.term != meta.GetTerm() {
		return fmt.Errorf("snapshot %d/%d from raft does not match the staged state", meta.GetIndex(), meta.GetTerm())
	}
	if err := r.store.ApplySnapshot(tx, snap); err != nil {
		return err
	}
	m := tx.Bucket(fsm.BucketMeta)
	old := append([]byte(nil), m.Get(fsm.KeyCurrent)...)
	if err := m.Put(fsm.KeyCurrent, r.staged.gen); err != nil {
		return err
	}
	if err := tx.DeleteBucket(old); err != nil {
		return err
	}
	r.confState = meta.GetConfState()
	tx.OnCommit(func() {
		// Not before: a transaction that fails is run again, and needs the
		// staged state.
		r.snapIndex = meta.GetIndex()
		r.staged.mu.Lock()
		r.staged.gen = nil
		r.staged.mu.Unlock()
	})
	return nil
}

// afterSnapshot rebuilds the views and peers from the installed state.
func (r *Replica) afterSnapshot() error {
	if err := r.loadAllZones(); err != nil {
		return err
	}
	if err := r.loadShardMap(); err != nil {
		return err
	}
	var members []Member
	var applied uint64
	err := r.db.View(func(tx *bolt.Tx) error {
		var err error
		applied, _ = fsm.Applied(fsm.Generation(tx))
		removed := fsm.RemovedIDs(fsm.Generation(tx))
		r.removedIDs.Store(&removed)
		members, err = fsm.Members(fsm.Generation(tx))
		return err
	})
	if err != nil {
		return err
	}
	r.applied.Store(applied)
	r.keysVersion.Add(1) // any zone's keys may differ
	r.signalApplied()
	for _, m := range members {
		if m.ID != r.cfg.ID {
			r.tr.AddPeer(m.ID, m.Raft)
		}
	}
	return nil
}

func marshalMember(m Member) ([]byte, error) { return json.Marshal(m) }
