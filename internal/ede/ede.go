// Package ede writes the error replies both plugins send: an rcode and, for
// a client that speaks EDNS0, an Extended DNS Error (RFC 8914) saying why.
package ede

import "github.com/miekg/dns"

// Reply returns the reply to r with rcode. When r carries an OPT record, so
// does the reply (same DO bit), with an Extended DNS Error of code and why
// when why is set. An extended rcode (over 15) needs EDNS0 (RFC 6891 section
// 6.1.3): without it the reply says SERVFAIL.
func Reply(r *dns.Msg, rcode int, code uint16, why string) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	opt := r.IsEdns0()
	if opt == nil {
		if rcode > 0xF {
			m.Rcode = dns.RcodeServerFailure
		}
		return m
	}
	m.SetEdns0(dns.DefaultMsgSize, opt.Do())
	if why != "" {
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: why})
	}
	return m
}

// Write writes Reply to w. It returns success with no error, as CoreDNS's
// acl plugin does: the answer is written, and an error rcode would make the
// server answer again.
func Write(w dns.ResponseWriter, r *dns.Msg, rcode int, code uint16, why string) (int, error) {
	w.WriteMsg(Reply(r, rcode, code, why))
	return dns.RcodeSuccess, nil
}

// Of returns the first Extended DNS Error of m, or nil.
func Of(m *dns.Msg) *dns.EDNS0_EDE {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return e
			}
		}
	}
	return nil
}

// Add adds an Extended DNS Error of code and why to response m when m
// carries an OPT record (the query spoke EDNS0); else it does nothing.
func Add(m *dns.Msg, code uint16, why string) {
	if opt := m.IsEdns0(); opt != nil {
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: why})
	}
}
