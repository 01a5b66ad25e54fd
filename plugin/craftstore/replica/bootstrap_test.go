package replica

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	bolt "go.etcd.io/bbolt"
)

// TestStartAfterEarlyKill: a member of a new group killed after its first
// start made its data directory but before its Raft node persisted
// anything (integration's TestSeedSurvivesKill hit it once) starts again as
// a new member: a group of one elects itself and is ready.
func TestStartAfterEarlyKill(t *testing.T) {
	dir := t.TempDir()
	// What the first start left: the directory, its owner and an empty
	// generation, no vote, no entry.
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(fsm.BucketMeta)
		if err != nil {
			return err
		}
		name, _, err := fsm.CreateGeneration(tx)
		if err != nil {
			return err
		}
		return meta.Put(fsm.KeyCurrent, name)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	r, err := Open(Config{ID: 1, Dir: dir, RaftAddr: "127.0.0.1:0",
		Peers: []Member{{ID: 1, Raft: "127.0.0.1:0"}}, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for deadline := time.Now().Add(10 * time.Second); !r.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the member never elected itself")
		}
	}
}
