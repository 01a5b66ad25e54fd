package fsm

import (
	"errors"
	"fmt"
)

// The kinds of failure, for errors.Is. The replica speaks neither HTTP nor
// DNS: the API maps a kind to an HTTP status, the UPDATE path to an rcode.
var (
	// ErrInvalid: the request is malformed or breaks a rule of the zone
	// (a deleted SOA, a name outside the zone). Nothing was written.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound: no such zone or member.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the change contradicts the zone's state (CNAME and other
	// data, a member that exists, a superseded import). Nothing was written.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the member cannot commit now (no leader, no quorum in
	// time, failing storage, shutting down). A write proposed before it
	// failed may still be applied later; it was not acknowledged.
	ErrUnavailable = errors.New("unavailable")
	// ErrTooLarge: the request or zone is larger than allowed.
	ErrTooLarge = errors.New("too large")
	// ErrUpstream: a primary that a zone is transferred from failed.
	ErrUpstream = errors.New("upstream failed")
	// ErrInternal: the member's own state is broken (a zone without SOA).
	ErrInternal = errors.New("internal")
	// ErrBusy: a name the write touches is locked by a transaction in
	// progress (prepared on this shard, not finished; txn.go). Nothing was
	// written; the write may be retried once the transaction finished.
	ErrBusy = errors.New("busy")
	// ErrNotReady: the member takes no writes now (it is stopping, was
	// removed, its storage fails, or it has known no leader for a while)
	// and proposed nothing, so the write can go to another member at once.
	// It is an ErrUnavailable too.
	ErrNotReady = fmt.Errorf("not ready: %w", ErrUnavailable)
	// ErrStaleMap: the router that sent the write routed it by a shard map
	// older than this shard's placement (shardmap.go): nothing was written;
	// the router reads the map and sends it again. It is an ErrConflict
	// too.
	ErrStaleMap = fmt.Errorf("stale shard map: %w", ErrConflict)
	// ErrWrongShard: a client wrote to a member, not through a router, a
	// name its shard does not hold alone (unrouted.go): nothing was
	// written. It is an ErrConflict too.
	ErrWrongShard = fmt.Errorf("wrong shard: %w", ErrConflict)
)

// Error is a failure of one kind with a message for the client. A refusal
// of a command in the state machine is deterministic: every member refuses
// the same entry the same way.
type Error struct {
	Kind error // one of the Err values above
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap lets errors.Is(err, ErrNotFound) see the kind.
func (e *Error) Unwrap() error { return e.Kind }

// Errorf returns an Error of kind.
func Errorf(kind error, format string, a ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, a...)}
}

// Refused reports whether err is a refusal of the request itself (invalid,
// not found, conflict, too large), which retrying unchanged cannot fix,
// rather than a failure of the member or of an upstream.
func Refused(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrTooLarge)
}
