// Package transport carries Raft messages between the members of one
// craftstore shard over plain TCP.
//
// It is deliberately small: no HTTP, no gRPC, no etcd server packages. Every
// member listens on one address; every member dials one long-lived outgoing
// connection per peer. Incoming connections are read only (apart from
// one-byte replies), so each direction of a member pair has its own
// connection and its own ordering.
//
// # Handshake
//
// Every connection starts with a handshake written by the dialer:
//
//	magic    4 bytes  "CRFT"
//	version  1 byte   2
//	kind     1 byte   1 = message stream, 2 = snapshot
//	from     8 bytes  sender's Raft ID, big endian
//	to       8 bytes  recipient's Raft ID, big endian
//	length   2 bytes  length of the cluster name, big endian (at most 256)
//	cluster  length bytes
//
// The listener answers with one status byte: 0 accepted, 1 wrong cluster,
// 2 wrong recipient ID, 3 malformed handshake (another version too), 4 the
// dialer was removed from the group. On anything but 0 it closes
// the connection; the dialer treats a refusal as a connection failure.
//
// # Message stream
//
// After the handshake a stream connection carries frames, each a 4-byte big
// endian length followed by a protobuf-encoded raftpb.Message. A frame is at
// most 64 MiB (MsgApp batches are bounded far below that by raft's
// MaxSizePerMsg). One goroutine per peer takes messages from a bounded queue,
// appends their frames to a batch buffer and writes the batch when the queue
// is momentarily empty, so a burst of messages costs one system call. A full
// queue drops the message and reports the peer unreachable; so does a
// connection failure. While a peer is unreachable the writer redials with a
// backoff doubling from 50ms to 500ms and drops (and reports) what Raft queues
// meanwhile: Raft retransmits on its own, and stale messages would only
// delay fresh ones. The backoff stays short (at most 500ms) so that a
// member is back in touch within a second of a network heal.
//
// A frame of length zero is a keepalive: the sender writes one when it has
// written nothing for a keepalive interval (StreamTimeout/4, 500ms by
// default). The receiver writes one byte (zero) back every keepalive
// interval, the only thing it ever writes on a stream after the handshake.
// Each side reads with a deadline of StreamTimeout (2s): a stream on which
// nothing arrives for that long is dead, whatever TCP thinks (a partition
// that drops packets, a paused or hung peer leave TCP retransmitting for
// minutes), and is closed; the sender redials.
//
// The receiver never waits for Raft while reading (etcd's rafthttp keeps to
// the same rule). It queues each message for Raft.Process and goes on
// reading: heartbeats, votes, appends and their answers in one bounded
// queue, proposals forwarded by the peer (MsgProp) in another, each stepped
// into the node by its own goroutine. The split matters: raft's Node.Step
// holds a proposal until the node knows a leader, and the messages behind it
// are what lets the node learn one. A message waits at most 5s for the node
// to take it (a proposal 5s from its arrival) and is dropped after that, as
// is one that finds its queue full: to Raft that is a lossy network, which
// it tolerates, and a dropped proposal is never acknowledged to a client.
// Messages are stepped in the order they arrived within each queue.
// Messages whose To is not the local ID, or whose From is not the ID named in
// the handshake, are dropped.
//
// # Snapshots
//
// A MsgSnap never travels on the message stream: it would hold heartbeats
// behind hundreds of megabytes. Each is sent on its own short-lived
// connection (handshake kind 2), one at a time per peer with room for one
// more to wait (Raft itself sends one and waits for its report):
//
//	header   one message frame holding the MsgSnap (metadata only)
//	chunk    4-byte big endian length n, 1 <= n <= 1 MiB, then n bytes
//	...      as many chunks as Snapshotter.WriteSnapshot produces
//	end      4 zero bytes, then the total stream length (8 bytes) and the
//	         CRC-32C (Castagnoli) of the stream (4 bytes), big endian
//	reply    one byte from the receiver: 0 applied, 1 failed
//
// The receiver hands the chunk payloads to Snapshotter.ReceiveSnapshot as one
// io.Reader, which reports io.EOF only after the length and checksum have been
// verified. Once ReceiveSnapshot returns, the transport reads whatever it left
// unread (which must be nothing but the trailer) and verifies the checksum
// itself, so a Snapshotter that stops reading at the end of its own format is
// covered too. Only then is the MsgSnap passed to Raft.Process (with the
// same 5s bound as a stream's messages) and the reply byte 0 sent. The sender reports SnapshotFinish when it reads that byte and
// SnapshotFailure on any other outcome. Neither side holds more than one
// chunk of the snapshot in memory.
//
// # Timeouts
//
// A dial and its handshake take at most Config.DialTimeout; a listener waits
// 5s for a handshake. A stream that stays silent for Config.StreamTimeout
// (keepalives included) is closed by either side, and a batch of messages
// that cannot be written within 10s fails it too. Every
// snapshot chunk must move within 30s, and the receiver has a minute after
// the last byte to stage the state and reply.
package transport
