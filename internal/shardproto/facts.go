package shardproto

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/miekg/dns"
)

// Partition mode: what a member holds about a name, for zones whose names
// are spread over several shards by a hash of the owner name (craftroute's
// key mode "name").
//
// Each shard of such a zone holds the zone's apex RRsets, every delegation
// (the NS RRset at a zone cut, the DS beside it and all names at or below
// the cut, glue included) and the names that hash to it. A shard then knows
// for certain that a name exists, as data or as an empty non-terminal above
// its own names, and it knows every referral; it cannot know that a name is
// absent, nor that the closest encloser it sees is the zone's, so neither a
// NXDOMAIN nor a wildcard answer from one shard is final.
//
// A query carrying the option asks a craftstore member for what it holds
// about the query name instead of a conclusion:
//
//   - Final: the name exists here (data, or an empty non-terminal), a zone cut
//     covers it, or the query is refused. The sections are those of an
//     ordinary answer except that a CNAME is not followed: the answer ends
//     with the CNAME RRset and the router follows the target.
//   - Absent: the name does not exist here. The response carries the number
//     of labels of the deepest ancestor of the name that exists here (its
//     closest encloser on this shard) and, when "*.<that ancestor>" exists
//     here, the answer that wildcard synthesizes (RFC 4592; again without
//     following a CNAME), else NXDOMAIN with the SOA.
//
// The router asks the owner shard first and every other shard only when the
// owner reports Absent; the deepest closest encloser over all shards is the
// zone's, and only its wildcard may synthesize (RFC 4592 §3.3.1).

// Code is the EDNS0 option code, from the range for local or experimental
// use (RFC 6891 §9).
const Code uint16 = 65473

// version of the payload layout.
const version = 1

// Kind says what a partition-mode response holds.
type Kind uint8

const (
	// Final: the response is the answer for the query name (CNAMEs not followed).
	Final Kind = 1
	// Absent: the name does not exist on this member; see Facts.
	Absent Kind = 2
)

// Facts is the payload of a partition-mode response.
type Facts struct {
	Kind Kind
	// Labels is, for Absent, the label count (dns.CountLabel) of the deepest
	// existing ancestor of the query name on this member.
	Labels uint8
	// Wildcard is set, for Absent, when "*.<that ancestor>" exists on this
	// member and the sections hold what it synthesizes.
	Wildcard bool
	// Origin is the zone the member answered from, in canonical form; empty
	// when the query was refused.
	Origin string
}

const flagWildcard = 1

// Query modes, the second byte of a query's payload.
const (
	modeFacts = 1 // partition mode
	modeFresh = 2 // an ordinary answer
)

// Request adds the partition option to m, creating an OPT record if m has
// none. It is idempotent.
func Request(m *dns.Msg) { request(m, modeFacts) }

// RequestFresh adds the option in its other mode to m: the member answers
// as usual, but only once it has caught up with its group, as in partition
// mode (a member that is not answers SERVFAIL with an Extended DNS Error "Not
// Ready", and the router tries another). craftroute sends its queries in key
// mode "zone" and its probes this way.
func RequestFresh(m *dns.Msg) { request(m, modeFresh) }

func request(m *dns.Msg, mode byte) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	for _, o := range opt.Option {
		if o.Option() == Code {
			return
		}
	}
	// Room for the flags and a minimum index (SetMinIndex) without growing,
	// and for the map epoch the router adds (epoch.go).
	data := queryData(make([]byte, 0, 3+8), mode, 0, false)
	opt.Option = append(slices.Grow(opt.Option, 2), &dns.EDNS0_LOCAL{Code: Code, Data: data})
}

// Requested reports whether query r asks for partition mode.
func Requested(r *dns.Msg) bool {
	d, ok := payload(r)
	return ok && (len(d) < 2 || d[1] == modeFacts)
}

// Routed reports whether query r carries the option in either mode: it comes
// from craftroute, which wants answers only from members that caught up
// (unless it allows a stale one, StaleAllowed).
func Routed(r *dns.Msg) bool {
	_, ok := payload(r)
	return ok
}

// flagStale, in a query's third payload byte, allows a stale answer.
const flagStale = 1

// AllowStale returns a copy of routed query r that allows the member to
// answer from its last state when it cannot confirm that state is current
// (it is not ready, or its leader did not answer in time): craftroute asks
// so after every member of a shard said it could not, as a name server
// serves stale data rather than none (RFC 8767). r is not modified.
func AllowStale(r *dns.Msg) *dns.Msg {
	m := r.Copy()
	opt := m.IsEdns0()
	if opt == nil {
		return m
	}
	for i, o := range opt.Option {
		if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == Code {
			d := []byte{version, modeFacts, 0}
			if len(l.Data) >= 2 {
				d = append(d[:0], l.Data...)
				if len(d) < 3 {
					d = append(d, 0)
				}
			}
			d[2] |= flagStale
			opt.Option[i] = &dns.EDNS0_LOCAL{Code: Code, Data: d}
		}
	}
	return m
}

// StaleAllowed reports whether routed query r allows a stale answer.
func StaleAllowed(r *dns.Msg) bool {
	d, ok := payload(r)
	return ok && len(d) >= 3 && d[2]&flagStale != 0
}

func payload(r *dns.Msg) ([]byte, bool) {
	opt := r.IsEdns0()
	if opt == nil {
		return nil, false
	}
	for _, o := range opt.Option {
		if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == Code {
			return l.Data, true
		}
	}
	return nil, false
}

// Attach adds f to response m, creating an OPT record if m has none.
func Attach(m *dns.Msg, f Facts) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
		opt = m.IsEdns0()
	}
	data := make([]byte, 4, 4+len(f.Origin)+1)
	data[0], data[1], data[2] = version, byte(f.Kind), f.Labels
	if f.Wildcard {
		data[3] = flagWildcard
	}
	if f.Origin != "" {
		buf := make([]byte, 256)
		n, err := dns.PackDomainName(dns.Fqdn(f.Origin), buf, 0, nil, false)
		if err == nil {
			data = append(data, buf[:n]...)
		}
	}
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: Code, Data: data})
}

// ErrMissing is returned by Parse when a response carries no facts: the
// server does not speak partition mode.
var ErrMissing = errors.New("shardproto: response carries no partition option")

// Parse returns the facts of partition-mode response m.
func Parse(m *dns.Msg) (Facts, error) {
	opt := m.IsEdns0()
	if opt == nil {
		return Facts{}, ErrMissing
	}
	for _, o := range opt.Option {
		l, ok := o.(*dns.EDNS0_LOCAL)
		if !ok || l.Code != Code {
			continue
		}
		return ParseData(l.Data)
	}
	return Facts{}, ErrMissing
}

// ParseData returns the facts in d, the payload of an answer's partition
// option.
func ParseData(d []byte) (Facts, error) {
	f, err := parseKind(d)
	if err != nil {
		return Facts{}, err
	}
	if len(d) > 4 {
		name, _, err := dns.UnpackDomainName(d, 4)
		if err != nil {
			return Facts{}, errors.New("shardproto: malformed origin")
		}
		f.Origin = name
	}
	return f, nil
}

// FinalData reports whether d, the payload of an answer's partition
// option, is well formed and says Final (its origin is not unpacked: a
// relayed answer needs no more).
func FinalData(d []byte) bool {
	f, err := parseKind(d)
	if err != nil || f.Kind != Final {
		return false
	}
	return len(d) == 4 || wireName(d[4:])
}

// parseKind reads the fixed part of a partition option's payload.
func parseKind(d []byte) (Facts, error) {
	if len(d) < 4 || d[0] != version {
		return Facts{}, errors.New("shardproto: malformed or unknown option version")
	}
	f := Facts{Kind: Kind(d[1]), Labels: d[2], Wildcard: d[3]&flagWildcard != 0}
	if f.Kind != Final && f.Kind != Absent {
		return Facts{}, errors.New("shardproto: unknown kind")
	}
	return f, nil
}

// queryData appends the payload of a query's partition option in mode,
// with a minimum index (SetMinIndex) when withIndex.
func queryData(dst []byte, mode byte, index uint64, withIndex bool) []byte {
	dst = append(dst, version, mode)
	if withIndex {
		dst = binary.BigEndian.AppendUint64(append(dst, 0), index)
	}
	return dst
}

// AppendRouted appends to dst, the RDATA of a query's OPT record being
// written, the options a router's query carries: the partition option
// (Request, or RequestFresh when fresh) with the index to wait for when
// withIndex (SetMinIndex), and the map epoch when it is not 0, sent to
// the name's owner (SetEpoch): the bytes the dns.Msg built with those
// calls packs to, for a router that writes its query's wire form itself.
func AppendRouted(dst []byte, fresh bool, index uint64, withIndex bool, epoch uint64) []byte {
	mode := byte(modeFacts)
	if fresh {
		mode = modeFresh
	}
	dst = binary.BigEndian.AppendUint16(dst, Code)
	at := len(dst)
	dst = queryData(append(dst, 0, 0), mode, index, withIndex)
	binary.BigEndian.PutUint16(dst[at:], uint16(len(dst)-at-2))
	if epoch != 0 {
		dst = binary.BigEndian.AppendUint16(dst, EpochCode)
		dst = append(dst, 0, 9)
		dst = binary.BigEndian.AppendUint64(dst, epoch)
		dst = append(dst, flagOwner)
	}
	return dst
}

// Strip removes the partition option, the applied index, the serial, the
// held mark, the map epoch and their MAC from m's OPT record.
func Strip(m *dns.Msg) {
	opt := m.IsEdns0()
	if opt == nil {
		return
	}
	kept := opt.Option[:0]
	for _, o := range opt.Option {
		if c := o.Option(); c != Code && c != IndexCode && c != SerialCode && c != AuthCode && c != HeldCode && c != EpochCode && c != SignCode {
			kept = append(kept, o)
		}
	}
	opt.Option = kept
}
