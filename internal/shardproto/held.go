package shardproto

import "github.com/miekg/dns"

// Reads past transactions. A member that answers a routed query about a
// name that a prepared transaction part holds, while the transaction's
// coordinator has decided nothing, answers from the state before the part
// (package internal/txn, "Atomic visibility"). That answer is right when it
// is given but may be overtaken at any moment by the commit, which the
// router learns of only from the commit's notice: a router must not cache
// it. The member marks such answers with this option (no payload). It needs
// no MAC: whoever forges it only keeps a router from caching one answer.

// HeldCode is the EDNS0 option that marks an answer read past undecided
// transaction parts.
const HeldCode uint16 = Code + 4

// MarkHeld marks response m as read past undecided transaction parts, when
// m carries an OPT record.
func MarkHeld(m *dns.Msg) {
	if opt := m.IsEdns0(); opt != nil {
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: HeldCode})
	}
}

// Held reports whether response m is marked by MarkHeld.
func Held(m *dns.Msg) bool {
	opt := m.IsEdns0()
	if opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if o.Option() == HeldCode {
			return true
		}
	}
	return false
}
