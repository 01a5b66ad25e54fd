package corefile

import (
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
