package shardproto

import (
	"errors"

	"github.com/miekg/dns"
)

// Signed answers through routers. A router that signs a zone's answers
// itself (the zone's keys are on every shard of it, and the router merges
// the shards' answers, presents the zone's serial and decides existence
// over them, so no member can sign what it sends) asks a member, by
// carrying this option in its query with DO set, for what a signed answer
// holds besides the signatures, which only the member can tell: the DS
// RRset of a referral's cut, RFC 9824's NSEC of a negative answer with the
// types at the name (an NXDOMAIN keeps its rcode: the router merges on
// it), the NSEC that proves a referral insecure, and which owner names of
// the answer are at or below a zone cut (delegation glue: the child's
// data, which the zone does not sign). The member answers with the option
// too, its payload those names (uncompressed wire form, one after the
// other). Like HeldCode it needs no MAC: a forged one can only make a
// router leave a record unsigned, which a validator then refuses.

// SignCode is the EDNS0 option of a query whose answer the router signs,
// and of its answer, naming the glue.
const SignCode uint16 = Code + 6

// RequestSigned adds the option to query m (it must have an OPT record
// with DO set for the member to act on it).
func RequestSigned(m *dns.Msg) {
	if opt := m.IsEdns0(); opt != nil && !hasOption(opt, SignCode) {
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: SignCode})
	}
}

// SignedRequested reports whether query r asks for RequestSigned's
// completion: the option, and DO.
func SignedRequested(r *dns.Msg) bool {
	opt := r.IsEdns0()
	return opt != nil && opt.Do() && hasOption(opt, SignCode)
}

// AttachGlue adds to response m the option naming glue, the owner names
// of its records at or below a zone cut (none: an empty option, which
// says the member completed the answer).
func AttachGlue(m *dns.Msg, glue []string) {
	opt := m.IsEdns0()
	if opt == nil {
		return
	}
	var data []byte
	buf := make([]byte, 256)
	for _, g := range glue {
		if n, err := dns.PackDomainName(dns.Fqdn(g), buf, 0, nil, false); err == nil {
			data = append(data, buf[:n]...)
		}
	}
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: SignCode, Data: data})
}

// ErrNotCompleted says a response carries no SignCode option: its member
// did not complete it for signing (it runs an older version).
var ErrNotCompleted = errors.New("shardproto: the member did not complete the answer for signing")

// GlueOf returns the glue names response m's option lists, canonical.
func GlueOf(m *dns.Msg) ([]string, error) {
	opt := m.IsEdns0()
	if opt == nil {
		return nil, ErrNotCompleted
	}
	for _, o := range opt.Option {
		l, ok := o.(*dns.EDNS0_LOCAL)
		if !ok || l.Code != SignCode {
			continue
		}
		var out []string
		for off := 0; off < len(l.Data); {
			name, next, err := dns.UnpackDomainName(l.Data, off)
			if err != nil {
				return nil, errors.New("shardproto: malformed glue names")
			}
			out = append(out, dns.CanonicalName(name))
			off = next
		}
		return out, nil
	}
	return nil, ErrNotCompleted
}

func hasOption(opt *dns.OPT, code uint16) bool {
	for _, o := range opt.Option {
		if o.Option() == code {
			return true
		}
	}
	return false
}
