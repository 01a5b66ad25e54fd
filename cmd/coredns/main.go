// Command coredns is CoreDNS v1.15.0 with the craftdns plugins (craftstore
// and craftroute) compiled in. The plugin set and its order come from
// plugin.cfg at the repository root.
package main

//go:generate go run directives_generate.go

import (
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
)

// Version is the craftdns release, set at build time with
// -ldflags "-X main.Version=...".
var Version = "0.1.0-dev"

func main() {
	dnsserver.Directives = directives
	caddy.AppVersion = coremain.CoreVersion + "+craftdns." + Version
	coremain.Run()
}
