package dnssec

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/craftdns/craftdns/internal/corefile"
	"github.com/craftdns/craftdns/internal/dnsname"

	"github.com/coredns/caddy"
	"github.com/miekg/dns"
)

// Config is a block's online signing, as craftstore and craftroute read
// it: the dnssec, dnssec_kek, dnssec_algorithm, dnssec_keys,
// dnssec_zsk_rollover and dnssec_ksk_rollover lines.
type Config struct {
	On      bool
	Zones   []string // canonical; nil: every zone of the block
	KEKFile string
	Policy
	zskSet bool // dnssec_zsk_rollover given
}

// Rollover defaults: a ZSK signs for 30 days; each wait is a day (above
// the DNSKEY TTL, an hour, and most zones' largest TTL).
const (
	DefaultZSKLifetime  = 30 * 24 * time.Hour
	DefaultRolloverWait = 24 * time.Hour
)

// Signs reports whether zone (canonical) is signed.
func (d *Config) Signs(zone string) bool {
	return d.On && (d.Zones == nil || slices.Contains(d.Zones, zone))
}

// Equal reports whether d and o say the same.
func (d *Config) Equal(o *Config) bool {
	return d.On == o.On && slices.Equal(d.Zones, o.Zones) && d.KEKFile == o.KEKFile &&
		d.Algorithm == o.Algorithm && d.CSK == o.CSK && d.ZSKLifetime == o.ZSKLifetime &&
		d.RolloverWait == o.RolloverWait && d.KSKLifetime == o.KSKLifetime && slices.Equal(d.Parents, o.Parents)
}

// Parse reads the property line at c's cursor when it is one of Config's;
// it returns false, nil for any other.
func (d *Config) Parse(c *caddy.Controller) (bool, error) {
	prop := c.Val()
	if !strings.HasPrefix(prop, "dnssec") {
		return false, nil
	}
	a := corefile.NextArgs(c)
	args := a.Vals
	switch prop {
	case "dnssec":
		if d.On {
			return true, c.Err("dnssec given twice")
		}
		d.On = true
		for _, z := range args {
			d.Zones = append(d.Zones, dnsname.Lower(dns.Fqdn(z)))
		}
	case "dnssec_kek":
		v, err := a.One()
		if err != nil {
			return true, err
		}
		d.KEKFile = corefile.Rooted(c, v)
	case "dnssec_algorithm":
		v, err := a.One()
		if err != nil {
			return true, err
		}
		if d.Algorithm, err = AlgorithmByName(v); err != nil {
			return true, c.Errf("dnssec_algorithm: %v", err)
		}
	case "dnssec_zsk_rollover":
		// LIFETIME WAIT, or off.
		d.zskSet = true
		switch {
		case len(args) == 1 && args[0] == "off":
			d.ZSKLifetime = 0
		case len(args) == 2:
			l, err1 := time.ParseDuration(args[0])
			w, err2 := time.ParseDuration(args[1])
			if err1 != nil || err2 != nil || l <= 0 || w <= 0 {
				return true, c.Errf("dnssec_zsk_rollover %s: LIFETIME WAIT, two positive durations (720h 24h), or off", strings.Join(args, " "))
			}
			d.ZSKLifetime, d.RolloverWait = l, w
		default:
			return true, c.Errf("dnssec_zsk_rollover: LIFETIME WAIT, two positive durations (720h 24h), or off")
		}
	case "dnssec_ksk_rollover":
		// LIFETIME PARENT..., or off.
		switch {
		case len(args) == 1 && args[0] == "off":
			d.KSKLifetime = 0
		case len(args) >= 2:
			l, err := time.ParseDuration(args[0])
			if err != nil || l <= 0 {
				return true, c.Errf("dnssec_ksk_rollover %s: LIFETIME (a positive duration) and the parent zone's servers", args[0])
			}
			d.KSKLifetime = l
			for _, a := range args[1:] {
				if _, _, err := net.SplitHostPort(a); err != nil {
					a = net.JoinHostPort(a, "53")
				}
				if host, _, _ := net.SplitHostPort(a); net.ParseIP(host) == nil {
					return true, c.Errf("dnssec_ksk_rollover: parent server %q: not an IP address or IP:port", a)
				}
				d.Parents = append(d.Parents, a)
			}
		default:
			return true, c.Errf("dnssec_ksk_rollover: LIFETIME PARENT... (the parent zone's servers, asked for the DS), or off")
		}
	case "dnssec_keys":
		v, err := a.One()
		if err != nil {
			return true, err
		}
		switch v {
		case "ksk+zsk":
		case "csk":
			d.CSK = true
		default:
			return true, c.Errf("dnssec_keys %q: ksk+zsk (a key-signing and a zone-signing key, the default) or csk (one combined key)", v)
		}
	default:
		return false, nil
	}
	return true, nil
}

// Check finishes the configuration once the block is read: a signed zone
// needs the key-encryption key, which must load (a missing or bad file
// fails the start, naming it).
func (d *Config) Check() error {
	if !d.On {
		if d.KEKFile != "" || d.Algorithm != 0 || d.CSK || d.zskSet || d.KSKLifetime != 0 {
			return errors.New("dnssec_kek, dnssec_algorithm, dnssec_keys, dnssec_zsk_rollover and dnssec_ksk_rollover need a dnssec line")
		}
		return nil
	}
	if d.KEKFile == "" {
		return errors.New("dnssec needs dnssec_kek FILE: the key-encryption key the zones' private keys are sealed with (head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE; the same file on every member and router)")
	}
	if d.Algorithm == 0 {
		d.Algorithm = ECDSAP256SHA256
	}
	if !d.zskSet {
		d.ZSKLifetime, d.RolloverWait = DefaultZSKLifetime, DefaultRolloverWait
	}
	if d.KSKLifetime > 0 && len(d.Parents) == 0 {
		return errors.New("dnssec_ksk_rollover needs the parent zone's servers, to see its DS change")
	}
	if d.ZSKLifetime > 0 && 2*d.RolloverWait >= d.ZSKLifetime {
		return fmt.Errorf("dnssec_zsk_rollover: the lifetime %v must be more than twice the wait %v", d.ZSKLifetime, d.RolloverWait)
	}
	var err error
	d.KEK, err = LoadKEK(d.KEKFile)
	return err
}
