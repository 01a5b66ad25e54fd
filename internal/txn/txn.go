// Package txn is the protocol of changes that span shards: two-phase commit
// over the shards' Raft groups, which craftroute drives and craftstore
// members take part in. It holds the protocol's types and its contract;
// the state machine is craftstore's (replica/fsm/txn.go), the driver
// craftroute's.
//
// # Why
//
// In key mode "name" the names of one zone live on several shards (Raft
// groups), so an RFC 2136 UPDATE or an API record change whose names span
// shards must be all or nothing across groups that share no log.
//
// # Protocol
//
// A transaction has a random ID, the shards it touches (the participants),
// and a coordinator: the participant whose name sorts first. Its Raft log
// holds the decision, the commit point.
//
//  1. Prepare. The router sends each participant its part (the
//     prerequisites and updates, or the API change, for the names the
//     shard holds) with the ID, the coordinator's API addresses and the
//     participants. The part is one entry in the participant's log. When
//     it is applied, every member evaluates it against the same state: the
//     prerequisites, the zone's rules (CNAME and other data, the apex SOA
//     and NS), and the locks. A part that passes is recorded as prepared
//     (in bbolt, with the zone's data) and locks every name it reads or
//     writes; it changes no data yet. The vote is yes, or no with the
//     reason (an rcode and an Extended DNS Error for an UPDATE, an HTTP
//     status for the API). A part that meets a name locked by another
//     transaction votes no with Busy.
//  2. Decide. With a yes from every participant the router asks the
//     coordinator to decide commit; otherwise it decides abort. A decision
//     is one entry in the coordinator's log, and the first decision for an
//     ID wins: a later one gets the recorded outcome back. From the moment
//     commit is recorded the transaction is committed, even if nobody
//     applied it yet.
//  3. Finish. The router tells every participant the outcome. Commit
//     applies the prepared part (the data, the serial bump, the journal,
//     the routers' change notices) and releases its locks in one entry;
//     abort releases the locks. The router answers its client once every
//     participant finished, so a client that got success reads its write
//     through any router and any member.
//
// # Recovery
//
// A participant whose prepared part waits longer than the resolve delay
// (the router died, or lost a message) asks the coordinator for the
// outcome, proposing abort if nothing was decided, and finishes the part
// itself. So no lock outlives a dead router by more than a few seconds,
// and a participant never needs the router that began the transaction.
//
// # Invariants
//
//   - Atomicity: a part is applied only after commit was recorded by the
//     coordinator; a part is dropped only after abort was recorded, or
//     before any decision could be commit (the part voted no, and commit
//     needs every yes). The coordinator records one outcome per ID.
//   - Isolation: from prepare to finish, the part's names are locked on its
//     shard. Other writes to them (single-shard changes, other
//     transactions) are refused with Busy and retried by their sender, so
//     conflicting writes run one after the other; the prerequisites, read
//     at prepare under the locks, still hold at commit.
//   - Atomic visibility: a member asked about a name that a prepared part
//     holds, or that such a name can change (an ancestor, a descendant, a
//     wildcard that covers it), reads the decision at the coordinator
//     (StatusPath: a read of the coordinator group's current state, from a
//     majority of its members or confirmed with its leader) before it
//     answers. Decided, it finishes the part itself and answers from
//     the state after it. Not decided, it answers from the state before:
//     the commit, if it comes, is recorded after that read, and every part
//     applies only after the commit, so the answer is one of a moment
//     before the transaction; such an answer is marked for routers, which
//     do not cache it (shardproto's held mark). When the coordinator
//     cannot say (its group has no quorum), the query waits for the
//     outcome. A reader therefore sees either none or all of a
//     transaction, and waits for one only while its coordinator is down.
//   - Idempotence: prepare, decide, commit and abort may be repeated (the
//     router retries on a timeout); an ID is remembered after it finished,
//     so a prepare that arrives after its abort is refused.
//   - Durability: every step is a Raft entry, acknowledged once applied by
//     a majority; prepared parts, decisions and finished IDs are in the
//     replicated state (and in snapshots).
//
// # Limits
//
// A transaction's parts are evaluated each against its own shard's state,
// which holds every name of the part (key mode "name" places a name and its
// RRsets on one shard; the apex and delegations are on every shard and
// therefore in every part). Finished IDs and decisions are kept for
// Retention, then forgotten: a message delayed longer than that is refused
// as unknown.
package txn

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// ID names one transaction: 16 random bytes, hex in URLs and JSON.
type ID [16]byte

// NewID returns a random ID.
func NewID() ID {
	var id ID
	rand.Read(id[:])
	return id
}

// String is the ID in hex.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// ParseID reads an ID in hex.
func ParseID(s string) (ID, error) {
	var id ID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("transaction id %q: not %d hex digits", s, 2*len(id))
	}
	copy(id[:], b)
	return id, nil
}

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	*id = v
	return err
}

// Outcome is a transaction's fate.
type Outcome string

// Outcomes.
const (
	Commit Outcome = "commit"
	Abort  Outcome = "abort"
)

// Timing of the protocol.
const (
	// ResolveAfter is how long a prepared part waits for its outcome before
	// its shard asks the coordinator (and proposes abort when nothing was
	// decided).
	ResolveAfter = time.Second
	// Retention is how long finished IDs and decisions are remembered.
	Retention = time.Hour
	// RoutedWait bounds how long a member keeps a router's query for a name
	// a prepared part holds before it answers Held: well within a router's
	// timeout for one member, which then asks again (and does not take the
	// member for down).
	RoutedWait = 200 * time.Millisecond
)

// HeldText is the Extended DNS Error text (with code Not Ready) of a
// SERVFAIL that says a prepared part holds the name and its outcome is not
// known yet: the query may be asked again.
const HeldText = "a transaction in progress holds the name"

// Coordinator names the coordinator shard and its members' API base URLs,
// for a participant that must ask it for the outcome.
type Coordinator struct {
	Shard string   `json:"shard"`
	APIs  []string `json:"apis"`
}

// Prepare is the body of POST /v1/txn/{id}/prepare: a participant's part
// of transaction ID for zone. Exactly one of Update (an RFC 2136 message,
// packed, whose zone is Zone: prerequisites in its answer section, updates
// in its authority section) and Change (an API record change) is set.
// Key is the TSIG key that signed the UPDATE at the router (which checked
// the signature); the member applies its allow rules for that key.
type Prepare struct {
	Zone         string          `json:"zone"`
	Coordinator  Coordinator     `json:"coordinator"`
	Participants []string        `json:"participants"`
	Update       []byte          `json:"update,omitempty"`
	Key          string          `json:"key,omitempty"`
	Change       *zoneapi.Change `json:"change,omitempty"`
	// Map is a part of a change of the shard map: the map at its next
	// epoch, one part on every shard (Zone empty), Shard naming the one
	// the part is for (a member learns which shard of the map it is in).
	Map   *shardmap.Map `json:"map,omitempty"`
	Shard string        `json:"shard,omitempty"`
	// Hold lists partitions of the shard's map whose writes wait while
	// the map part is prepared (a migration's critical section: the
	// partitions it moves away from this shard).
	Hold []uint32 `json:"hold,omitempty"`
	// Moves are record changes, one per zone, that move names with the
	// map part (a migration's batch: their deletion from the shard that
	// hands them over, their addition to the one that takes them). They
	// are prepared, locked, and committed or dropped with the map, all or
	// nothing: the names are never on neither shard, and on both only as
	// the same records.
	Moves []Move `json:"moves,omitempty"`
	// Drop, with Hold, deletes when the part commits the records of the
	// held partitions' names that only their owner holds: the shard
	// hands them over (the names another shard's Moves add).
	Drop bool `json:"drop,omitempty"`
	// Imports are zones staged on the shard (craftstore's PUT
	// /v1/stage/{zone}) that the part makes its own when it commits,
	// before its moves: in key mode "zone" a migration's batch clones the
	// zones it moves before the critical section, and the moves carry
	// what changed on the old owner since.
	Imports []Staged `json:"imports,omitempty"`
	// Keys is a part that sets Zone's DNSSEC key set on the shard: a
	// zone split over shards by name has one key set, on every shard of
	// it, set by its routers in one transaction (its first keys, each
	// rollover's step).
	Keys *Keys `json:"keys,omitempty"`
}

// Keys is a key set part (Prepare.Keys): Set is the zone's key set
// (dnssec.KeySet, JSON, its private keys sealed), applied only where the
// zone has none with Absent, and only over the set its Prev names.
type Keys struct {
	Set    []byte `json:"set"`
	Absent bool   `json:"absent,omitempty"`
}

// KeysPath is the member API's path of a zone's key set (GET, with the
// shards' token): ZoneKeys.
func KeysPath(zone string) string { return "/v1/zones/" + url.PathEscape(zone) + "/keys" }

// ZoneKeys is a zone's key set as a member holds it: Set nil when the
// zone has none; Hash identifies it (dnssec.SetHash).
type ZoneKeys struct {
	Zone string `json:"zone"`
	Set  []byte `json:"set"`
	Hash string `json:"hash,omitempty"`
}

// Staged is a zone staged on a shard: its import's ID there, and the
// serial and size of what was staged.
type Staged struct {
	Zone    string `json:"zone"`
	Import  uint64 `json:"import"`
	Serial  uint32 `json:"serial,omitempty"`
	Records int    `json:"records,omitempty"`
}

// StagePattern is the member API route that stages a zone for a shard
// map part to commit: PUT with the zone's text, answered with Staged.
const StagePattern = "/v1/stage/{zone}"

// StagePath is StagePattern's path for zone (canonical).
func StagePath(zone string) string { return "/v1/stage/" + url.PathEscape(zone) }

// Move is one zone's record change in a map part (Prepare.Moves).
type Move struct {
	Zone   string         `json:"zone"`
	Change zoneapi.Change `json:"change"`
}

// Meta is what a participant keeps with a prepared part for its recovery.
type Meta struct {
	Coordinator  Coordinator `json:"coordinator"`
	Participants []string    `json:"participants"`
}

// PreparePath is the path of a prepare on a participant member.
func PreparePath(id ID) string { return "/v1/txn/" + id.String() + "/prepare" }

// DecidePath is the path of a decision on a coordinator member.
func DecidePath(id ID) string { return "/v1/txn/" + id.String() + "/decide" }

// StatusPath is the path of a decision's read on a coordinator member
// (GET): the answer is a Decision read from the group's current state
// (the member confirms it with its leader first), its Outcome "" while
// nothing was decided. It decides nothing. With LocalRead as its query,
// the member answers at once from its own state, with Local set when it
// applied no decision: a majority of such answers says what a confirmed
// read would (FromMajority), without the group's leader.
func StatusPath(id ID) string { return "/v1/txn/" + id.String() }

// LocalRead is the query of a decision's read answered from the member's
// own state (StatusPath).
const LocalRead = "read=local"

// FinishPath is the path that applies outcome on a participant member.
func FinishPath(id ID, outcome Outcome) string {
	return "/v1/txn/" + id.String() + "/" + string(outcome)
}

// Vote is a participant's answer to a prepare. Yes is false with the
// reason: Rcode for an UPDATE part whose prerequisites or rules failed (with
// Error for the Extended DNS Error text), Busy when a name is locked by
// another transaction, Error alone for anything else.
// Status is the HTTP status that refuses the failed part of an API change
// (400 invalid, 404 no zone, 409 conflict).
type Vote struct {
	Yes    bool   `json:"yes"`
	Rcode  int    `json:"rcode,omitempty"`
	Status int    `json:"status,omitempty"`
	Busy   bool   `json:"busy,omitempty"`
	Error  string `json:"error,omitempty"`
	// StaleMap is the shard's map epoch when it refused the part because
	// the router placed it by an older placement (internal/shardmap): the
	// router reads the map and runs the request again.
	StaleMap uint64 `json:"stale_map,omitempty"`
}

// Decide is the body of POST /v1/txn/{id}/decide on a coordinator member:
// record Outcome unless an outcome is recorded already. The answer is a
// Decision with the recorded outcome.
type Decide struct {
	Outcome Outcome `json:"outcome"`
}

// Decision is the outcome recorded for a transaction.
type Decision struct {
	Outcome Outcome `json:"outcome"`
	// Local is set in the answer to a LocalRead by a member that applied
	// no decision.
	Local *Local `json:"local,omitempty"`
}

// Local is what a coordinator member's own state says of a decision it
// did not apply: the first decision of the transaction its log holds past
// what it applied (Logged), the term of its Raft state, the voters of the
// configuration it applied, and Unsure when anything keeps it from
// vouching for either (a change of the configuration in its log, a state
// older than its data).
type Local struct {
	Member uint64   `json:"member"`
	Voters []uint64 `json:"voters"`
	Term   uint64   `json:"term"`
	Logged *Logged  `json:"logged,omitempty"`
	Unsure bool     `json:"unsure,omitempty"`
}

// Logged is a decision in a member's Raft log, not applied yet.
type Logged struct {
	Index   uint64  `json:"index"`
	Term    uint64  `json:"term"`
	Outcome Outcome `json:"outcome"`
}

// FromMajority reads the decision off answers to a LocalRead of one
// transaction, when a majority of the voters of one configuration, each
// reporting that configuration and not Unsure, say the same:
//
//   - none of them logged a decision: nothing was decided before they were
//     asked (ok, outcome ""). A decision is recorded once a majority of the
//     voters hold it in their logs, where it stays (applied, or past the
//     applied index: Logged), and any two majorities share a member; a
//     change of the configuration is committed the same way, so a majority
//     that logged none still has the current configuration.
//   - each logged the same first decision, in the term it is in: that
//     decision is committed (ok, its outcome). An entry of a term on a
//     majority whose members saw no later term is in the log of every
//     later leader (Raft's election restriction), as when the leader of
//     that term counts it committed; the first decision stands.
//
// ok is false when the answers cannot tell.
func FromMajority(answers []Local) (o Outcome, ok bool) {
	voters := make([][]uint64, len(answers)) // each answer's, sorted
	for i, a := range answers {
		voters[i] = sorted(a.Voters)
	}
	for i, a := range answers {
		if a.Unsure || len(a.Voters) == 0 || (a.Logged != nil && a.Logged.Term != a.Term) {
			continue
		}
		seen := map[uint64]bool{}
		for j, b := range answers {
			same := !b.Unsure && !seen[b.Member] && slices.Contains(voters[i], b.Member) && slices.Equal(voters[j], voters[i])
			switch {
			case !same:
			case a.Logged == nil && b.Logged == nil:
				seen[b.Member] = true
			case a.Logged != nil && b.Logged != nil && *b.Logged == *a.Logged && b.Term == a.Logged.Term:
				seen[b.Member] = true
			}
		}
		if 2*len(seen) > len(voters[i]) {
			if a.Logged == nil {
				return "", true
			}
			return a.Logged.Outcome, true
		}
	}
	return "", false
}

// sorted returns a sorted copy of ids.
func sorted(ids []uint64) []uint64 {
	s := slices.Clone(ids)
	slices.Sort(s)
	return s
}

// Finished is the answer to POST /v1/txn/{id}/commit and /abort: the
// outcome the participant applied and the zone's serial on the shard after
// it.
type Finished struct {
	Outcome Outcome `json:"outcome"`
	Serial  uint32  `json:"serial,omitempty"`
}

// PackUpdate packs the prerequisite and update sections of an RFC 2136
// UPDATE into a message (prerequisites in the answer section, updates in
// the authority section), as a prepare carries it and as craftstore
// replicates an UPDATE. The RRs that carry no RDATA (class ANY or NONE with
// RDLENGTH 0: "RRset exists", "delete RRset", ...) are packed as a header
// alone: miekg unpacks them as empty typed RRs (an empty *dns.SOA, say),
// which would not pack back to what arrived.
func PackUpdate(prereq, updates []dns.RR) ([]byte, error) {
	m := &dns.Msg{Answer: headerOnly(prereq), Ns: headerOnly(updates)}
	return m.Pack()
}

func headerOnly(rrs []dns.RR) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		h := rr.Header()
		if (h.Class == dns.ClassANY || h.Class == dns.ClassNONE) && h.Rdlength == 0 {
			rr = &dns.ANY{Hdr: *h}
		}
		out[i] = rr
	}
	return out
}
