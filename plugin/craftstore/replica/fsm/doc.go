// Package fsm is the replicated state machine of one craftstore shard: the
// zones, the group's members, the IXFR journal, staged imports, transaction
// parts and decisions, transfer fences, kept in bbolt (layout.go).
//
// It is deterministic and knows no Raft, network or clock: Apply applies
// one committed Command to the state inside the bbolt write transaction
// the replica opened for it, and every member, given the same entries in
// the same order, writes the same bytes and refuses the same entries. Time
// comes only from the command (Command.Time, the proposer's clock); a
// reader that needs "now" passes it in (HasFence).
//
// Apply returns
//   - a Result for the proposer that waits for the entry;
//   - an Effect: what the replica's in-memory views (its zone.Zone per
//     zone, its locks) must do once the bbolt transaction has committed;
//   - or an error: a *Error (Errorf, of a kind in errors.go) is a refusal
//     of the command, written nowhere: the replica hands it to the
//     proposer and commits the transaction with the entry's applied index.
//     Any other error is a storage failure: the replica stops applying.
//
// The files: command.go (the commands and their encoding in the log),
// apply.go (the dispatch, Apply, and record changes), update.go (RFC 2136
// UPDATE), import.go (whole-zone imports), txn.go (transaction parts and
// decisions), fence.go (transfer fences), keys.go (zones' DNSSEC keys),
// journal.go and cuts.go (the IXFR
// journal and a transfer's cut records), serialbase.go (the serial a zone's
// shard counts from), conf.go (membership), transfer.go (the reads behind
// AXFR and IXFR), errors.go (the kinds of refusal). The rules a zone is
// held to are internal/zonerules'.
//
// # Adding a command
//
//  1. An Op at the end of command.go's list, with the next number: numbers
//     are in every log entry and snapshot, so an op is never renumbered and
//     a number never reused.
//
//  2. Its fields in Command, encoded by Marshal and Unmarshal behind a test
//     of the op (as OpUpdate's Update and OpMemberInfo's Member are), so
//     that the entries already in a log decode as before. An op that
//     carries the transaction fields is listed in IsTx.
//
//  3. Its case in applyOp (apply.go), calling an applyX(g, c) (Result,
//     *Effect, error) of its own. It checks everything before it writes
//     anything: a refusal must leave g as it was, since the transaction is
//     committed anyway. It iterates maps only where the order cannot reach
//     the state, and reads time only from c.Time.
//
//  4. Its state in buckets below the generation bucket g, named in
//     layout.go's list (or its file's, as txn.go does). A snapshot carries
//     the whole generation bucket (replica/snapshot.go copies every bucket
//     and key below it), so a new bucket there needs nothing more; state
//     anywhere else is not replicated. A view the replica builds from the
//     new state must be rebuilt after a snapshot is installed
//     (Replica.afterSnapshot) and when the replica opens.
//
//  5. When it changes what members serve, an Effect field, and its
//     handling in the replica (replica/node.go, applyView).
//
//  6. Its proposer: a method of the replica (replica/propose.go) that
//     builds the Command and proposes it.
//
//  7. When members of one version would apply it otherwise than those of
//     the version before (a new op, a new field, a new rule), raise
//     Version (internal/shardmap.FSMVersion) and say what it adds; a
//     proposer of the new form waits until every member says the new
//     version (routers do so for a migration: craftroute's
//     checkVersions). A check that only refuses a client's request is the
//     proposer's, before it proposes (CheckUnrouted), not Apply's.
//
// Tests here run commands against a bare generation (journal_test.go,
// openGeneration) and fuzz the decoder (FuzzCommand) and UPDATE
// (FuzzUpdate); the replica's tests run them through Raft.
package fsm
