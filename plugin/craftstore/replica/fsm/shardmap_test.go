package fsm

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/craftdns/craftdns/internal/shardmap"

	bolt "go.etcd.io/bbolt"
)

func testShardMap(epoch uint64, members ...string) []byte {
	m := &shardmap.Map{Epoch: epoch, Key: shardmap.KeyName, Partitions: shardmap.DefaultPartitions, Load: shardmap.DefaultLoad,
		Shards: []shardmap.Shard{{Name: "a", Members: members, API: nil}}}
	for i := range members {
		m.Shards[0].API = append(m.Shards[0].API, "http://127.0.0.1:"+string(rune('1'+i))+"080")
	}
	b, _ := json.Marshal(m)
	return b
}

// TestMapSet: a shard map is set only as a transaction's part, at the
// epoch after the shard's; its part holds the map lock, not a name, and a
// second map part waits for the first; commit writes it, abort does not.
func TestMapSet(t *testing.T) {
	db := openGeneration(t)
	run := func(c *Command) (Result, *Effect, error) {
		var (
			res Result
			eff *Effect
			err error
		)
		if uerr := db.Update(func(tx *bolt.Tx) error {
			res, eff, err = Apply(Generation(tx), c, 10)
			var ferr *Error
			if err != nil && !errors.As(err, &ferr) {
				return err
			}
			return nil
		}); uerr != nil {
			t.Fatal(uerr)
		}
		return res, eff, err
	}
	current := func() *shardmap.Map {
		var m *shardmap.Map
		db.View(func(tx *bolt.Tx) error {
			var err error
			m, err = ShardMap(Generation(tx))
			return err
		})
		return m
	}
	part := func(m []byte) []byte {
		b, _ := (&Command{Op: OpMapSet, Map: m}).Marshal()
		return b
	}
	prepare := func(id byte, m []byte) error {
		_, _, err := run(&Command{Op: OpTxPrepare, Tx: [16]byte{id}, Part: part(m), Meta: []byte(`{}`)})
		return err
	}

	if _, _, err := run(&Command{Op: OpMapSet, Map: testShardMap(1, "127.0.0.1:53")}); err == nil {
		t.Error("a map set outside a transaction was taken")
	}
	if err := prepare(1, testShardMap(2, "127.0.0.1:53")); err == nil {
		t.Error("epoch 2 on a shard without a map was taken")
	}
	if err := prepare(2, []byte(`{"epoch":1,"key":"name","partitions":1021,"load":1.25,"shards":[]}`)); err == nil {
		t.Error("a map without shards was taken")
	}
	if err := prepare(3, testShardMap(1, "127.0.0.1:53")); err != nil {
		t.Fatalf("prepare epoch 1: %v", err)
	}
	if current() != nil {
		t.Error("a prepared map was written")
	}
	if err := prepare(4, testShardMap(1, "127.0.0.2:53")); !errors.Is(err, ErrBusy) {
		t.Errorf("a second map part while one is prepared: expected busy, got %v", err)
	}
	_, eff, err := run(&Command{Op: OpTxCommit, Tx: [16]byte{3}})
	if err != nil || eff == nil || eff.Map == nil || eff.Map.Epoch != 1 || eff.Tx == nil {
		t.Fatalf("commit: %v %+v", err, eff)
	}
	if m := current(); m == nil || m.Epoch != 1 || m.Shards[0].Members[0] != "127.0.0.1:53" {
		t.Fatalf("after commit: %+v", m)
	}
	if err := prepare(5, testShardMap(1, "127.0.0.3:53")); !errors.Is(err, ErrConflict) {
		t.Errorf("epoch 1 again: expected a conflict, got %v", err)
	}
	if err := prepare(6, testShardMap(2, "127.0.0.4:53")); err != nil {
		t.Fatalf("prepare epoch 2: %v", err)
	}
	if _, _, err := run(&Command{Op: OpTxAbort, Tx: [16]byte{6}}); err != nil {
		t.Fatal(err)
	}
	if m := current(); m.Epoch != 1 {
		t.Errorf("after an abort: epoch %d", m.Epoch)
	}
}
