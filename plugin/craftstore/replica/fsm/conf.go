package fsm

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ConfChange is a change of the group's membership as the state machine
// records it (the replica reads it from Raft's ConfChange entry): a member
// added, as a voter or a learner, with its addresses in Context (a JSON
// Member), or removed.
type ConfChange struct {
	ID      uint64
	Remove  bool
	Learner bool
	Context []byte
}

// ApplyConfChange keeps the members table in step with the configuration.
// skip leaves the table as it is (an entry the state holds already) and
// returns the effect alone.
func ApplyConfChange(g *bolt.Bucket, cc ConfChange, skip bool) (*Effect, error) {
	id := cc.ID
	if !cc.Remove {
		m := Member{ID: id}
		if len(cc.Context) > 0 {
			if err := json.Unmarshal(cc.Context, &m); err != nil {
				return nil, fmt.Errorf("conf change context: %w", err)
			}
		}
		m.Learner = cc.Learner
		if !skip {
			if err := PutMember(g, m); err != nil {
				return nil, err
			}
		}
		return &Effect{Member: &m}, nil
	}
	if !skip {
		if err := g.Bucket(BucketMembers).Delete(IDKey(id)); err != nil {
			return nil, err
		}
		rb, err := g.CreateBucketIfNotExists(BucketRemoved)
		if err != nil {
			return nil, err
		}
		if err := rb.Put(IDKey(id), nil); err != nil {
			return nil, err
		}
	}
	return &Effect{Removed: id}, nil
}
