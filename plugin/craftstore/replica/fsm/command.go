package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/craftdns/craftdns/internal/shardmap"

	"github.com/miekg/dns"
)

// Op is the kind of a replicated command. Its number is written in every
// log entry and snapshot: an op keeps its number forever, and a new op takes
// the next free one at the end of the list (doc.go, "Adding a command").
type Op byte

const (
	OpChange       Op = 1  // atomic record change in one zone
	OpImportBegin  Op = 2  // start staging a whole-zone import
	OpImportChunk  Op = 3  // a chunk of records of a staged import
	OpImportCommit Op = 4  // replace (or create) the zone with the staged import
	OpDeleteZone   Op = 5  // remove a zone
	OpMemberInfo   Op = 6  // a member's advertised addresses
	OpUpdate       Op = 7  // an RFC 2136 UPDATE, prerequisites and updates
	OpTxPrepare    Op = 8  // a shard's part of a transaction: evaluate, lock, keep (txn.go)
	OpTxCommit     Op = 9  // apply a prepared part, unlock
	OpTxAbort      Op = 10 // drop a prepared part, unlock
	OpTxDecide     Op = 11 // the coordinator's decision for a transaction
	OpTxFence      Op = 12 // hold a zone's transactions for a consistent transfer (fence.go)
	OpTxUnfence    Op = 13 // release them
	OpMapSet       Op = 14 // the deployment's shard map at a new epoch: a transaction's part only (shardmap.go)
	OpKeys         Op = 15 // a zone's DNSSEC keys, sealed (keys.go)
)

// IsTx reports whether o is a transaction op, whose encoding carries the
// transaction fields (Tx, Time, Part, Meta, Outcome; Command.Marshal). A
// new op that needs them is listed here, wherever its number falls.
func (o Op) IsTx() bool {
	switch o {
	case OpTxPrepare, OpTxCommit, OpTxAbort, OpTxDecide, OpTxFence, OpTxUnfence:
		return true
	}
	return false
}

// Deletion selects what a change removes: one RR (RR set), every RRset of a
// type at a name (Type set), or everything at a name.
type Deletion struct {
	RR   dns.RR
	Name string
	Type uint16
}

// Command is the payload of one Raft log entry. Only the fields of its op are
// used. The encoding is a compact binary one (RRs in uncompressed wire
// format) because entries are written to disk and sent to every member.
type Command struct {
	Op     Op
	ID     uint64 // proposal id, for the proposer to find its waiter; 0 for none
	Zone   string // canonical origin
	Import uint64 // import id (opImport*)
	Absent bool   // OpImportBegin: commit only if the zone does not exist (seeding)
	Add    []dns.RR
	Del    []Deletion
	Member Member // OpMemberInfo
	Update []byte // OpUpdate: a packed message, prerequisites in Answer, updates in Ns

	// Transaction ops (txn.go).
	Tx      [16]byte // the transaction's ID
	Time    int64    // the proposer's clock (Unix ns): when finished IDs expire
	Part    []byte   // OpTxPrepare: the part, a marshalled OpChange or OpUpdate command
	Meta    []byte   // OpTxPrepare: the coordinator and participants (JSON)
	Outcome byte     // OpTxDecide: the outcome to record unless one is

	// Keys (OpKeys) is the zone's key set (KeySet, JSON); with Absent it
	// is set only when the zone has none.
	Keys []byte

	Map   []byte // OpMapSet: the shard map (shardmap.Map, JSON)
	Shard string // OpMapSet: the shard the part was sent to, "" when unnamed
	// Hold (OpMapSet) lists partitions of the map whose writes wait while
	// the part is prepared: a migration's critical section (shardmap.go).
	Hold []uint32
	// Moves (OpMapSet) are the record changes that move names with the
	// map (a migration's batch: OpChange commands, one per zone): they
	// are prepared, locked and committed with it, all or nothing.
	Moves []*Command
	// Drop (OpMapSet, with Hold) deletes, when the part commits, the
	// records of the held partitions' names that only their owner holds:
	// the shard hands them over (partindex.go).
	Drop bool
	// Imports (OpMapSet) are staged imports (OpImportBegin, OpImportChunk)
	// of whole zones that the part commits, before its moves: in key
	// mode "zone" the zones a batch moves to this shard, cloned before
	// the critical section; the moves then carry what changed since.
	Imports []Staged

	// Epoch is the shard map epoch the router that sent this write routed
	// it by, 0 when none did: a write routed by a placement older than
	// the shard's is refused when it is applied (shardmap.go, fenced).
	Epoch uint64
}

// Version is the state machine's version: how this binary applies the
// entries a migration of shards writes (map parts and what they carry).
// The members of one group must apply every entry alike, so routers add
// or remove shards only while every member of every shard says the same
// version (GET /v1/cluster, "fsm_version"; craftroute's migrateapi.go):
//
//	1  (implicit: members that do not say it) map parts with holds,
//	   moves and drops of names (key mode "name")
//	2  map parts that commit staged zones and drop whole zones (key mode
//	   "zone"); holds of zones
//	3  OpKeys: a zone's DNSSEC keys (keys.go)
//	4  OpKeys as a transaction's part: a zone's keys set on every shard of
//	   it at once (by its routers)
const Version = shardmap.FSMVersion

// Staged is a staged import of a zone (OpImportBegin's Import id).
type Staged struct {
	Zone   string
	Import uint64
}

const (
	delRR   = 1
	delType = 2
	delName = 3
)

func (c *Command) Marshal() ([]byte, error) {
	b := make([]byte, 0, 64+len(c.Add)*48)
	b = append(b, 1, byte(c.Op)) // format version, op
	b = binary.AppendUvarint(b, c.ID)
	b = appendString(b, c.Zone)
	b = binary.AppendUvarint(b, c.Import)
	if c.Absent {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	var err error
	b = binary.AppendUvarint(b, uint64(len(c.Add)))
	for _, rr := range c.Add {
		if b, err = appendRR(b, rr); err != nil {
			return nil, err
		}
	}
	b = binary.AppendUvarint(b, uint64(len(c.Del)))
	for _, d := range c.Del {
		switch {
		case d.RR != nil:
			b = append(b, delRR)
			if b, err = appendRR(b, d.RR); err != nil {
				return nil, err
			}
		case d.Type != 0:
			b = append(b, delType)
			b = appendString(b, d.Name)
			b = binary.BigEndian.AppendUint16(b, d.Type)
		default:
			b = append(b, delName)
			b = appendString(b, d.Name)
		}
	}
	if c.Op == OpUpdate {
		b = binary.AppendUvarint(b, uint64(len(c.Update)))
		b = append(b, c.Update...)
	}
	if c.Op.IsTx() {
		b = append(b, c.Tx[:]...)
		b = binary.AppendUvarint(b, uint64(c.Time))
		b = binary.AppendUvarint(b, uint64(len(c.Part)))
		b = append(b, c.Part...)
		b = binary.AppendUvarint(b, uint64(len(c.Meta)))
		b = append(b, c.Meta...)
		b = append(b, c.Outcome)
	}
	if c.Op == OpMapSet {
		b = binary.AppendUvarint(b, uint64(len(c.Map)))
		b = append(b, c.Map...)
		b = appendString(b, c.Shard)
		b = binary.AppendUvarint(b, uint64(len(c.Hold)))
		for _, p := range c.Hold {
			b = binary.AppendUvarint(b, uint64(p))
		}
		if len(c.Moves) > 0 || c.Drop || len(c.Imports) > 0 || c.Epoch != 0 {
			// Parts without moves or a drop are written as before; with
			// the optional epoch after them, the block says where it ends.
			b = binary.AppendUvarint(b, uint64(len(c.Moves)))
			for _, mv := range c.Moves {
				if mv.Op != OpChange || mv.Zone == "" {
					return nil, fmt.Errorf("a shard map's move is a record change of a zone")
				}
				mb, err := mv.Marshal()
				if err != nil {
					return nil, err
				}
				b = binary.AppendUvarint(b, uint64(len(mb)))
				b = append(b, mb...)
			}
			// Flags: 1 drop, 2 imports follow (a part without imports
			// is written as before them).
			var flags byte
			if c.Drop {
				flags |= 1
			}
			if len(c.Imports) > 0 {
				flags |= 2
			}
			b = append(b, flags)
			if len(c.Imports) > 0 {
				b = binary.AppendUvarint(b, uint64(len(c.Imports)))
				for _, im := range c.Imports {
					b = appendString(b, im.Zone)
					b = binary.AppendUvarint(b, im.Import)
				}
			}
		}
	}
	if c.Op == OpKeys {
		b = binary.AppendUvarint(b, uint64(len(c.Keys)))
		b = append(b, c.Keys...)
	}
	if c.Op == OpMemberInfo {
		b = binary.AppendUvarint(b, c.Member.ID)
		b = appendString(b, c.Member.Raft)
		b = appendString(b, c.Member.DNS)
		b = appendString(b, c.Member.API)
	}
	if c.Epoch != 0 {
		// Last and optional: entries written before it decode as they did.
		b = binary.AppendUvarint(b, c.Epoch)
	}
	return b, nil
}

func Unmarshal(data []byte) (*Command, error) {
	d := decoder{b: data}
	if v := d.byte(); v != 1 {
		return nil, fmt.Errorf("unknown command format %d", v)
	}
	c := &Command{Op: Op(d.byte())}
	if c.Op < OpChange || c.Op > OpKeys {
		return nil, fmt.Errorf("unknown command op %d", c.Op)
	}
	c.ID = d.uvarint()
	c.Zone = d.string()
	c.Import = d.uvarint()
	c.Absent = d.byte() == 1
	n := d.count()
	if n > 0 {
		c.Add = make([]dns.RR, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		c.Add = append(c.Add, d.rr())
	}
	n = d.count()
	for i := 0; i < n && d.err == nil; i++ {
		switch d.byte() {
		case delRR:
			c.Del = append(c.Del, Deletion{RR: d.rr()})
		case delType:
			name := d.string()
			c.Del = append(c.Del, Deletion{Name: name, Type: d.uint16()})
		case delName:
			c.Del = append(c.Del, Deletion{Name: d.string()})
		default:
			d.fail(errors.New("unknown deletion kind"))
		}
	}
	if c.Op == OpUpdate {
		c.Update = append([]byte(nil), d.bytes()...)
	}
	if c.Op.IsTx() {
		for i := range c.Tx {
			c.Tx[i] = d.byte()
		}
		c.Time = int64(d.uvarint())
		c.Part = append([]byte(nil), d.bytes()...)
		c.Meta = append([]byte(nil), d.bytes()...)
		c.Outcome = d.byte()
	}
	if c.Op == OpMapSet {
		c.Map = append([]byte(nil), d.bytes()...)
		c.Shard = d.string()
		if d.err == nil && len(d.b) > 0 { // parts written before holds end here
			n := d.count()
			for i := 0; i < n && d.err == nil; i++ {
				c.Hold = append(c.Hold, uint32(d.uvarint()))
			}
		}
		if d.err == nil && len(d.b) > 0 { // parts written before moves end here
			n := d.count()
			for i := 0; i < n && d.err == nil; i++ {
				mb := d.bytes()
				if len(mb) < 2 || Op(mb[1]) != OpChange { // no nesting: checked before decoding
					d.fail(errors.New("a shard map's move is not a record change"))
					break
				}
				mv, err := Unmarshal(mb)
				switch {
				case err != nil:
					d.fail(err)
				case mv.Op != OpChange || mv.Zone == "":
					d.fail(errors.New("a shard map's move is not a record change of a zone"))
				default:
					c.Moves = append(c.Moves, mv)
				}
			}
			if d.err == nil && len(d.b) > 0 {
				flags := d.byte()
				c.Drop = flags&1 != 0
				if flags&2 != 0 {
					n := d.count()
					for i := 0; i < n && d.err == nil; i++ {
						c.Imports = append(c.Imports, Staged{Zone: d.string(), Import: d.uvarint()})
					}
				}
			}
		}
	}
	if c.Op == OpKeys {
		c.Keys = append([]byte(nil), d.bytes()...)
	}
	if c.Op == OpMemberInfo {
		c.Member = Member{ID: d.uvarint(), Raft: d.string(), DNS: d.string(), API: d.string()}
	}
	if d.err == nil && len(d.b) > 0 {
		c.Epoch = d.uvarint()
	}
	if d.err != nil {
		return nil, fmt.Errorf("decoding command: %w", d.err)
	}
	return c, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendRR appends rr in uncompressed wire format behind a 4-byte length.
func appendRR(b []byte, rr dns.RR) ([]byte, error) {
	at := len(b)
	b = append(b, make([]byte, 4+dns.Len(rr))...)
	off, err := dns.PackRR(rr, b[at+4:], 0, nil, false)
	if err != nil {
		return nil, fmt.Errorf("packing %q: %w", rr.String(), err)
	}
	binary.BigEndian.PutUint32(b[at:], uint32(off))
	return b[:at+4+off], nil
}

// decoder reads what marshal wrote; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail(errors.New("short command"))
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uint16() uint16 {
	if len(d.b) < 2 {
		d.fail(errors.New("short command"))
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errors.New("bad varint"))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) count() int {
	v := d.uvarint()
	if v > uint64(len(d.b)) { // every element takes at least one byte
		d.fail(errors.New("bad element count"))
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(errors.New("short command"))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) rr() dns.RR {
	if len(d.b) < 4 {
		d.fail(errors.New("short command"))
		return nil
	}
	n := binary.BigEndian.Uint32(d.b)
	if uint64(n) > uint64(len(d.b)-4) {
		d.fail(errors.New("short command"))
		return nil
	}
	buf := d.b[4 : 4+n]
	d.b = d.b[4+n:]
	rr, off, err := dns.UnpackRR(buf, 0)
	switch {
	case err != nil:
		d.fail(fmt.Errorf("unpacking record: %w", err))
		return nil
	case rr == nil || off != len(buf) || rr.Header().Rrtype == dns.TypeNone:
		// miekg unpacks an empty buffer as an empty record; a record is
		// exactly its bytes.
		d.fail(errors.New("malformed record"))
		return nil
	}
	return rr
}
