package shardproto

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// Authentication: only routers speak the router protocol.
//
// A member's and a router's state may change only through messages of a
// peer that holds the key they share (router_key in both Corefiles):
//
//   - a lease request (the member then notifies the router of every write
//     and waits for it), and the member's grant (the router then trusts
//     its negative cache, and the applied index the grant carries);
//   - a change notice (the router drops cached answers, learns a zone
//     created or deleted, an applied index and a serial), and the
//     router's answer to it (the member then acknowledges the write);
//   - an applied index or a zone serial in a routed answer, when the router
//     keeps it (an index above the one it asked for, a serial): the member
//     signs those answers.
//
// Each carries a MAC: HMAC-SHA-256 (RFC 2104) truncated to 16 bytes (as
// RFC 4868's HMAC-SHA-256-128), keyed by the shared secret, over a label
// byte that names the kind of message and the fields it covers. A grant's
// MAC covers its request's, an answer to a notice the notice's, so that
// neither can be replayed for another. A member takes a lease request only
// near its own clock and only once per token and time, and a router takes a
// notice only for a lease it asked for lately (by its own clock), so old
// messages cannot be replayed either.
//
// What shapes only the answer to the query that carries it stays
// unauthenticated, so that routed reads cost no more: partition mode, the
// fresh mode, the stale flag and an index to wait for (at most a few Raft
// ticks). A member without the key grants no lease and signs nothing; a
// router without it cannot run (craftroute requires router_key).

// MACLen is the length of the protocol's MACs.
const MACLen = 16

// MAC labels: the kind of message a MAC covers.
const (
	labelRequest byte = iota + 1
	labelGrant
	labelNotice
	labelAck
	labelAnswer
)

// Key is the secret routers and members share. A nil *Key authenticates
// nothing: every check with it fails.
type Key struct {
	pool sync.Pool // of *macState
}

// macState is one HMAC-SHA-256 keyed with the secret and its scratch
// space, so that a MAC allocates nothing.
type macState struct {
	h    hash.Hash
	head [2]byte
	sum  [sha256.Size]byte
}

// NewKey returns the key for secret; nil when secret is empty.
func NewKey(secret string) *Key {
	if secret == "" {
		return nil
	}
	key := []byte("craftdns router protocol\x00" + secret)
	k := &Key{}
	k.pool.New = func() any { return &macState{h: hmac.New(sha256.New, key)} }
	return k
}

// MinSecret is the shortest secret a key is made from: 32 characters
// (128 bits in hex, as openssl rand -hex 16 prints them).
const MinSecret = 32

// mac returns the MAC of label, flags and parts.
func (k *Key) mac(label, flags byte, parts ...[]byte) (out [MACLen]byte) {
	st := k.pool.Get().(*macState)
	st.h.Reset()
	st.head = [2]byte{label, flags}
	st.h.Write(st.head[:])
	for _, p := range parts {
		st.h.Write(p)
	}
	copy(out[:], st.h.Sum(st.sum[:0]))
	k.pool.Put(st)
	return out
}

// check reports whether got is the MAC of label, flags and parts; false
// for a nil key.
func (k *Key) check(got []byte, label, flags byte, parts ...[]byte) bool {
	if k == nil || len(got) != MACLen {
		return false
	}
	want := k.mac(label, flags, parts...)
	return hmac.Equal(got, want[:])
}

// qnameBytes is the question name a MAC covers: lower-case and fully
// qualified, so that a server that changes its case changes nothing.
func qnameBytes(m *dns.Msg) []byte {
	if len(m.Question) == 0 {
		return nil
	}
	return []byte(strings.ToLower(dns.Fqdn(m.Question[0].Name)))
}

// AuthCode is the EDNS0 option that carries the MAC of a routed answer's
// applied index and zone serial (16 bytes).
const AuthCode uint16 = Code + 3

// answerParts returns the index and serial options' data of m and a byte
// saying which are present (so that one cannot pass for the other).
func answerParts(m *dns.Msg) (which byte, index, serial []byte) {
	opt := m.IsEdns0()
	if opt == nil {
		return which, nil, nil
	}
	for _, o := range opt.Option {
		l, ok := o.(*dns.EDNS0_LOCAL)
		if !ok {
			continue
		}
		switch l.Code {
		case IndexCode:
			if index == nil {
				which |= 1
				index = l.Data
			}
		case SerialCode:
			if serial == nil {
				which |= 2
				serial = l.Data
			}
		}
	}
	return which, index, serial
}

// SignAnswer adds the MAC of the applied index and zone serial response m
// carries (AttachIndex, AttachSerial) under k, so that a router may keep
// them. It does nothing for a nil key or a response without an OPT record.
func SignAnswer(m *dns.Msg, k *Key) {
	opt := m.IsEdns0()
	if k == nil || opt == nil {
		return
	}
	which, index, serial := answerParts(m)
	mac := k.mac(labelAnswer, which, index, serial)
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: AuthCode, Data: mac[:]})
}

// PartsSigned reports whether mac, the payload of an answer's MAC option,
// signs index and serial, the payloads of its index and serial options
// (nil when it has none), under k: AnswerSigned for an answer read in
// wire form.
func PartsSigned(k *Key, mac, index, serial []byte) bool {
	var which byte
	if index != nil {
		which |= 1
	}
	if serial != nil {
		which |= 2
	}
	return k.check(mac, labelAnswer, which, index, serial)
}

// AnswerSigned reports whether the applied index and zone serial response
// m carries are signed under k (SignAnswer).
func AnswerSigned(m *dns.Msg, k *Key) bool {
	opt := m.IsEdns0()
	if k == nil || opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == AuthCode {
			which, index, serial := answerParts(m)
			return k.check(l.Data, labelAnswer, which, index, serial)
		}
	}
	return false
}
