package corefile

import (
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
)

func TestRooted(t *testing.T) {
	c := caddy.NewTestController("dns", "craftstore")
	if got := Rooted(c, "data"); got != "data" {
		t.Errorf("expected a relative path kept without root, got %q", got)
	}
	dnsserver.GetConfig(c).Root = "/srv/dns"
	for in, want := range map[string]string{"data": "/srv/dns/data", "zones/a.zone": "/srv/dns/zones/a.zone", "/var/lib/x": "/var/lib/x"} {
		if got := Rooted(c, in); got != want {
			t.Errorf("Rooted(%q): expected %q, got %q", in, want, got)
		}
	}
}

func TestArgs(t *testing.T) {
	args := func(line string) Args {
		c := caddy.NewTestController("dns", "p {\n"+line+"\n}")
		c.Next()
		c.NextBlock()
		return NextArgs(c)
	}
	if v, err := args("api 127.0.0.1:8080").One(); err != nil || v != "127.0.0.1:8080" {
		t.Errorf("One: got %q, %v", v, err)
	}
	if _, err := args("api a b").One(); err == nil {
		t.Error("One: expected an error for two arguments")
	}
	if d, err := args("probe 0s").Duration(true); err != nil || d != 0 {
		t.Errorf("Duration(zeroOK): got %v, %v", d, err)
	}
	for line, want := range map[string]string{
		"timeout 0s":         "timeout must be positive",
		"timeout -1s":        "timeout must be positive",
		"timeout soon":       "timeout: time: invalid duration",
		"negative_cache -1":  "negative_cache must not be negative",
		"max_update_records": "Wrong argument count",
		"partitions 3":       "partitions must be at least 8",
		"partitions x":       `partitions: "x" is not an integer`,
	} {
		a := args(line)
		var err error
		switch a.Prop {
		case "timeout":
			_, err = a.Duration(false)
		case "negative_cache":
			_, err = a.Int(0)
		case "max_update_records":
			_, err = a.Int(1)
		case "partitions":
			_, err = a.Int(8)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: expected an error with %q, got %v", line, want, err)
		}
	}
	for line, want := range map[string]string{
		"token change-me-before-applying":                "is a placeholder",
		"router_key CHANGEME-0123456789abcdef0123456789": "is a placeholder",
		"router_key 0123456789":                          "router_key must be at least 32 characters",
		"token":                                          "Wrong argument count",
	} {
		if _, err := args(line).Secret(32); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: expected an error with %q, got %v", line, want, err)
		}
	}
	if v, err := args("router_key 0123456789abcdef0123456789abcdef").Secret(32); err != nil || v != "0123456789abcdef0123456789abcdef" {
		t.Errorf("Secret: got %q, %v", v, err)
	}
	if n, err := args("journal 0").Int(0); err != nil || n != 0 {
		t.Errorf("Int(0): got %d, %v", n, err)
	}
}
