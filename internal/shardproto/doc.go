// Package shardproto is the private protocol between craftroute and
// craftstore members, spoken in EDNS0 options of ordinary DNS messages on
// the members' DNS port (option codes from the range for local or
// experimental use, RFC 6891 §9). A query without its options is an
// ordinary query. One file a part:
//
//   - facts.go, partition mode: what a member holds about a name (final, or
//     absent with its closest encloser and wildcard), so that a router
//     merges the shards of a zone whose names are spread by a hash of the
//     owner name into the answer one server would give.
//   - index.go, applied indexes: how a router reads a member's confirmed
//     state without a round trip to the leader, and how it asks for a
//     member's fresh or stale state.
//   - lease.go, change leases and notices: how every router learns of a
//     write before it is acknowledged.
//   - serial.go, one zone serial over shards.
//   - held.go, the mark of an answer read past undecided transactions,
//     which a router does not cache.
//   - epoch.go, the shard map epoch a router routed a query by, and a
//     member's refusal of an old one (fencing).
//   - auth.go, the MACs under the key routers and members share.
//
// Trust: the options that shape only the answer to the query carrying them
// (partition mode, the fresh mode, the stale flag, an index to wait for,
// the map epoch)
// are taken from anyone. Whatever outlives the query, a change lease and
// its grant, a change notice and its answer, an applied index or a serial
// a router keeps, is taken only with a MAC under the key routers and
// members share (auth.go).
package shardproto
