package craftroute

import (
	"net"

	"github.com/craftdns/craftdns/internal/policy"

	"github.com/miekg/dns"
)

// Request routing through the router (internal/policy): a member chooses
// a policy's answer for the query's client, whom only the router sees. A
// query that carries an EDNS Client Subnet option goes to the members with
// it, and its answer carries the members' scope back. One that does not
// goes with an option for the client's whole address (an OPT record added
// when it had none), and the router takes it off the reply.

// withClient returns the query to resolve for client query r from src:
// r itself when it carries an ECS option (checked: a malformed one is
// policy.ErrECS), else a copy with one for src (added is then true).
func withClient(r *dns.Msg, src net.Addr) (q *dns.Msg, added bool, err error) {
	if policy.ECS(r) != nil {
		if _, _, err := policy.ClientOf(r, src); err != nil {
			return nil, false, err
		}
		return r, false, nil
	}
	cl, _, _ := policy.ClientOf(r, src)
	e := policy.ForClient(cl.Addr)
	if e == nil {
		return r, false, nil
	}
	// A shallow copy with its own OPT record: r's records are shared,
	// never changed.
	q = new(dns.Msg)
	*q = *r
	q.Extra = make([]dns.RR, 0, len(r.Extra)+1)
	var opt *dns.OPT
	for _, rr := range r.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			c := *o
			c.Option = append(make([]dns.EDNS0, 0, len(o.Option)+1), o.Option...)
			opt, rr = &c, &c
		}
		q.Extra = append(q.Extra, rr)
	}
	if opt == nil {
		opt = &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		opt.SetUDPSize(dns.DefaultMsgSize)
		q.Extra = append(q.Extra, opt)
	}
	opt.Option = append(opt.Option, e)
	return q, true, nil
}

// withoutClient returns resp, the answer to the query withClient made for
// client query r, as r's answer: without the ECS option it added, and
// without an OPT record when r had none. resp itself is left as it is (a
// cached answer may share its records).
func withoutClient(resp, r *dns.Msg) *dns.Msg {
	out := *resp
	if r.IsEdns0() == nil {
		out.Extra = withoutOPT(resp.Extra)
		return &out
	}
	out.Extra = make([]dns.RR, 0, len(resp.Extra))
	for _, rr := range resp.Extra {
		if opt, ok := rr.(*dns.OPT); ok {
			c := *opt
			c.Option = nil
			for _, o := range opt.Option {
				if o.Option() != dns.EDNS0SUBNET {
					c.Option = append(c.Option, o)
				}
			}
			rr = &c
		}
		out.Extra = append(out.Extra, rr)
	}
	return &out
}

// answerScope returns the ECS scope of a member's answer, and whether it
// carries one: a policy chose it.
func answerScope(m *dns.Msg) (uint8, bool) {
	if e := policy.ECS(m); e != nil {
		return e.SourceScope, true
	}
	return 0, false
}
