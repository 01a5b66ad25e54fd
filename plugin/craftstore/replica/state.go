package replica

import (
	"github.com/craftdns/craftdns/plugin/craftstore/replica/fsm"

	"github.com/miekg/dns"
)

// The state machine is package fsm; these are the names of it that the
// replica's users see.

type (
	// Member is one member of the Raft group, as the cluster API shows it.
	Member = fsm.Member
	// Deletion selects what a change removes (fsm.Deletion).
	Deletion = fsm.Deletion
	// Result is what applying a command produced (fsm.Result).
	Result = fsm.Result
	// Error is a refusal of one kind with a message for the client.
	Error = fsm.Error
	// XfrStart opens a transfer (fsm.XfrStart).
	XfrStart = fsm.XfrStart
	// Staged is a staged import of a zone a map part commits (fsm.Staged).
	Staged = fsm.Staged
)

// The kinds of failure, for errors.Is (fsm/errors.go says what each means).
var (
	ErrInvalid     = fsm.ErrInvalid
	ErrNotFound    = fsm.ErrNotFound
	ErrConflict    = fsm.ErrConflict
	ErrUnavailable = fsm.ErrUnavailable
	ErrTooLarge    = fsm.ErrTooLarge
	ErrUpstream    = fsm.ErrUpstream
	ErrInternal    = fsm.ErrInternal
	ErrBusy        = fsm.ErrBusy
	ErrNotReady    = fsm.ErrNotReady
	ErrStaleMap    = fsm.ErrStaleMap
	ErrWrongShard  = fsm.ErrWrongShard
)

// Errorf returns an Error of kind.
func Errorf(kind error, format string, a ...any) *Error { return fsm.Errorf(kind, format, a...) }

// Refused reports whether err is a refusal of the request itself
// (fsm.Refused).
func Refused(err error) bool { return fsm.Refused(err) }

// CheckUpdate makes the checks of an RFC 2136 UPDATE that do not depend on
// the zone's state (fsm.CheckUpdate).
func CheckUpdate(zone string, prereq, updates []dns.RR) (int, string) {
	return fsm.CheckUpdate(zone, prereq, updates)
}

// FenceTTL is how long a transfer's fence holds a zone's transactions
// unless it is released (fsm.FenceTTL).
const FenceTTL = fsm.FenceTTL
