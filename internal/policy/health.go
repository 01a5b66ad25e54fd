package policy

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/miekg/dns"
)

// Health checks. A policy's check (Policy.Check) applies to every value
// whose status is "obey" (or none): the group's leader probes them and
// commits what it finds as a record at the owner, which every member
// reads when it answers:
//
//	TypeHealth (65382): the covered type (2 octets) and the JSON list of
//	                    the values found down; none: every value is up.
//
// Written through Raft like any record, the state is the same on every
// member, and a new leader starts from it.

// TypeHealth holds the values of a name's policy found down.
const TypeHealth uint16 = 65382

// Limits and defaults of a check.
const (
	DefaultInterval = 10 * time.Second
	DefaultTimeout  = 2 * time.Second
	MinInterval     = 500 * time.Millisecond
	MaxInterval     = time.Hour
	DefaultRise     = 2
	DefaultFall     = 3
	maxThreshold    = 100
)

// Check is how the leader probes a policy's values: a TCP connection to
// Port, or an HTTP GET of Path (with Host, default the value) answered
// with a status below 400, every Interval, each within Timeout. A value
// is down after Fall failures in a row, up again after Rise successes.
type Check struct {
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
	Path     string `json:"path,omitempty"`
	Host     string `json:"host,omitempty"`
	Interval string `json:"interval,omitempty"`
	Timeout  string `json:"timeout,omitempty"`
	Rise     int    `json:"rise,omitempty"`
	Fall     int    `json:"fall,omitempty"`
}

// check validates c and writes its defaults out.
func (c *Check) check() error {
	switch c.Protocol {
	case "tcp":
		if c.Path != "" || c.Host != "" {
			return errorf("check: path and host are for protocol http")
		}
	case "http":
		if c.Path == "" {
			c.Path = "/"
		}
		if c.Path[0] != '/' || len(c.Path) > 1024 {
			return errorf("check: path %q is not an absolute path of at most 1024 octets", c.Path)
		}
		if len(c.Host) > 253 {
			return errorf("check: host is over 253 octets")
		}
	default:
		return errorf("check: protocol %q is not tcp or http", c.Protocol)
	}
	if c.Port < 1 || c.Port > 65535 {
		return errorf("check: port %d is not between 1 and 65535", c.Port)
	}
	iv, err := duration(c.Interval, DefaultInterval)
	if err != nil || iv < MinInterval || iv > MaxInterval {
		return errorf("check: interval %q is not a duration between %v and %v", c.Interval, MinInterval, MaxInterval)
	}
	to, err := duration(c.Timeout, DefaultTimeout)
	if err != nil || to <= 0 || to > iv {
		return errorf("check: timeout %q is not a duration above 0 and at most the interval", c.Timeout)
	}
	c.Interval, c.Timeout = iv.String(), to.String()
	if c.Rise == 0 {
		c.Rise = DefaultRise
	}
	if c.Fall == 0 {
		c.Fall = DefaultFall
	}
	if c.Rise < 1 || c.Rise > maxThreshold || c.Fall < 1 || c.Fall > maxThreshold {
		return errorf("check: rise and fall are between 1 and %d", maxThreshold)
	}
	return nil
}

func duration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	return time.ParseDuration(s)
}

// Probe is one value to probe with one check: what the leader keeps state
// for, the same for every policy that names it.
type Probe struct {
	Protocol string
	Addr     netip.AddrPort
	Path     string
	Host     string
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
}

// String names the probe in logs and metrics: tcp://192.0.2.1:443 or
// http://192.0.2.1:80/health.
func (p Probe) String() string {
	if p.Protocol == "http" {
		return "http://" + p.Addr.String() + p.Path
	}
	return "tcp://" + p.Addr.String()
}

// Probes returns the probes policy record rr asks for, by value, and the
// type it covers: none when it has no check.
func Probes(rr dns.RR) (map[string]Probe, uint16) {
	p, t, err := Read(rr)
	if err != nil || p.Check == nil {
		return nil, t
	}
	c := *p.Check
	if c.check() != nil {
		return nil, t
	}
	iv, _ := time.ParseDuration(c.Interval)
	to, _ := time.ParseDuration(c.Timeout)
	out := map[string]Probe{}
	for _, name := range sortedKeys(p.Pools) {
		for _, v := range p.Pools[name].Values {
			if v.Status != "" {
				continue // forced up or down
			}
			a, err := netip.ParseAddr(v.Value)
			if err != nil {
				continue
			}
			out[v.Value] = Probe{Protocol: c.Protocol, Addr: netip.AddrPortFrom(a, uint16(c.Port)), Path: c.Path, Host: c.Host,
				Interval: iv, Timeout: to, Rise: c.Rise, Fall: c.Fall}
		}
	}
	return out, t
}

// HealthRecord returns the record that says the values down (sorted, at
// least one) of owner's policy for t are down.
func HealthRecord(owner string, t uint16, down []string) dns.RR {
	down = slices.Clone(down)
	slices.Sort(down)
	b, _ := json.Marshal(down)
	return generic(owner, TypeHealth, append(binary.BigEndian.AppendUint16(nil, t), b...))
}

// Down returns the values health record rr says are down, and the type it
// covers.
func Down(rr dns.RR) ([]string, uint16, error) {
	b, ok := rdataOf(rr)
	if !ok || rr.Header().Rrtype != TypeHealth || len(b) < 2 {
		return nil, 0, fmt.Errorf("not a health record")
	}
	var down []string
	if err := json.Unmarshal(b[2:], &down); err != nil {
		return nil, 0, fmt.Errorf("health record of %s: %v", rr.Header().Name, err)
	}
	return down, binary.BigEndian.Uint16(b), nil
}

// FindHealth returns the health record of rrs (the records at a name) for
// type t, or nil.
func FindHealth(rrs []dns.RR, t uint16) dns.RR { return findCovering(rrs, TypeHealth, t) }

// coveredOf reads the covered type of a generic record's RDATA.
func coveredOf(rr dns.RR) uint16 {
	g, ok := rr.(*dns.RFC3597)
	if !ok || len(g.Rdata) < 4 {
		return 0
	}
	v, err := strconv.ParseUint(g.Rdata[:4], 16, 16)
	if err != nil {
		return 0
	}
	return uint16(v)
}

// SetHealth returns the updates that make down the values of owner's
// policy for t that are down: the old record (nil: none) deleted, a new
// one added unless down is empty.
func SetHealth(owner string, t uint16, old dns.RR, down []string) []dns.RR {
	var out []dns.RR
	if old != nil {
		out = append(out, Deletion(old))
	}
	if len(down) > 0 {
		out = append(out, HealthRecord(owner, t, down))
	}
	return out
}
