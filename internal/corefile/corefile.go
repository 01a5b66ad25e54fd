// Package corefile holds Corefile parsing helpers that both plugins share.
package corefile

import (
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

// Rooted resolves a relative path against the server block's *root*
// directive, as CoreDNS's file plugin does; an absolute path, or any path
// without a root, is returned as is.
func Rooted(c *caddy.Controller, path string) string {
	if root := dnsserver.GetConfig(c).Root; root != "" && !filepath.IsAbs(path) {
		return filepath.Join(root, path)
	}
	return path
}

// Args are the arguments of one property line of a plugin block. Its
// readers give errors in one form, with the Corefile's file and line, so
// that both plugins refuse a bad value the same way.
type Args struct {
	c    *caddy.Controller
	Prop string   // the property's name
	Vals []string // its arguments
}

// NextArgs reads the property at the controller's cursor and its arguments.
func NextArgs(c *caddy.Controller) Args {
	return Args{c: c, Prop: c.Val(), Vals: c.RemainingArgs()}
}

// One is the property's only argument.
func (a Args) One() (string, error) {
	if len(a.Vals) != 1 {
		return "", a.c.ArgErr()
	}
	return a.Vals[0], nil
}

// Secret is the only argument as a secret (a token or a key): at least min
// characters, and not a placeholder of the deployment files
// ("change-me-before-applying" and its like), which no member or router
// runs with.
func (a Args) Secret(min int) (string, error) {
	v, err := a.One()
	if err != nil {
		return "", err
	}
	if l := strings.ToLower(v); strings.Contains(l, "change-me") || strings.Contains(l, "changeme") {
		return "", a.c.Errf("%s %q is a placeholder: set a secret of your own (openssl rand -hex 16 makes one)", a.Prop, v)
	}
	if len(v) < min {
		return "", a.c.Errf("%s must be at least %d characters (openssl rand -hex 16 makes one), got %d", a.Prop, min, len(v))
	}
	return v, nil
}

// Duration is the only argument as a Go duration; it must be positive, or
// zero too when zeroOK.
func (a Args) Duration(zeroOK bool) (time.Duration, error) {
	v, err := a.One()
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, a.c.Errf("%s: %v", a.Prop, err)
	}
	if d < 0 || (d == 0 && !zeroOK) {
		return 0, a.c.Errf("%s must be positive", a.Prop)
	}
	return d, nil
}

// Int is the only argument as a decimal integer of at least least.
func (a Args) Int(least int) (int, error) {
	v, err := a.One()
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, a.c.Errf("%s: %q is not an integer", a.Prop, v)
	}
	if n < least {
		switch least {
		case 0:
			return 0, a.c.Errf("%s must not be negative", a.Prop)
		case 1:
			return 0, a.c.Errf("%s must be positive", a.Prop)
		}
		return 0, a.c.Errf("%s must be at least %d", a.Prop, least)
	}
	return n, nil
}
