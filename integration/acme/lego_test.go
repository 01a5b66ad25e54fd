// Package acme solves ACME DNS-01 challenges against craftstore with lego's
// RFC 2136 provider. It is a module of its own so that lego and its
// dependencies stay out of the product's go.mod; make test runs it.
package acme

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/craftdns/craftdns/integration/harness"

	"github.com/go-acme/lego/v4/challenge/dns01"
	"github.com/go-acme/lego/v4/providers/dns/rfc2136"
	"github.com/miekg/dns"
)

func TestMain(m *testing.M) { harness.Main(m) }

// legoProvider returns lego's RFC 2136 provider for the server at addr,
// with the example's TSIG key, as lego (and Traefik, which embeds it)
// configures it.
func legoProvider(t *testing.T, addr string) *rfc2136.DNSProvider {
	t.Helper()
	// lego looks for CNAMEs at the challenge name and for the zone's SOA
	// with these resolvers: keep them on loopback, at the server.
	if err := dns01.AddRecursiveNameservers([]string{addr})(nil); err != nil {
		t.Fatal(err)
	}
	cfg := rfc2136.NewDefaultConfig()
	cfg.Nameserver = addr
	cfg.TSIGFile = filepath.Join(harness.Repo, "Corefile.examples/keys/update.key") // BIND's format
	cfg.DNSTimeout = 10 * time.Second
	cfg.PropagationTimeout = 10 * time.Second
	cfg.PollingInterval = 100 * time.Millisecond
	cfg.SequenceInterval = 0
	cfg.TTL = 60
	provider, err := rfc2136.NewDNSProviderConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return provider
}

// TestLegoRFC2136 solves DNS-01 challenges through a three-member cluster
// with lego's RFC 2136 provider, as lego (and Traefik, which embeds it)
// does: Present adds the _acme-challenge TXT record through one member (a
// follower), every member must answer it, and CleanUp removes it everywhere.
func TestLegoRFC2136(t *testing.T) {
	c := harness.StartUpdateCluster(t)
	follower := c.Leader(t)%3 + 1
	provider := legoProvider(t, c.Addr(follower))

	const domain = "example.org"
	fqdn := "_acme-challenge." + domain + "."
	for i, keyAuth := range []string{"token1.thumbprint", "token2.thumbprint"} {
		info := dns01.GetChallengeInfo(domain, keyAuth)
		if info.EffectiveFQDN != fqdn {
			t.Fatalf("expected the challenge at %s, got %s", fqdn, info.EffectiveFQDN)
		}
		// A second Present (a renewal) replaces the first value: lego deletes
		// the RRset and adds its record in one UPDATE.
		if err := provider.Present(domain, "token"+strconv.Itoa(i), keyAuth); err != nil {
			t.Fatalf("Present: %v", err)
		}
		c.Everywhere(t, fqdn, dns.TypeTXT, strconv.Quote(info.Value))
	}
	info := dns01.GetChallengeInfo(domain, "token2.thumbprint")
	if err := provider.CleanUp(domain, "token1", "token2.thumbprint"); err != nil {
		t.Fatalf("CleanUp: %v", err)
	}
	c.Everywhere(t, fqdn, dns.TypeTXT, "NXDOMAIN")

	// A name below the apex: lego finds the zone by asking for the SOA.
	info = dns01.GetChallengeInfo("host.example.org", "token3.thumbprint")
	if err := provider.Present("host.example.org", "token3", "token3.thumbprint"); err != nil {
		t.Fatalf("Present for a name below the apex: %v", err)
	}
	c.Everywhere(t, info.EffectiveFQDN, dns.TypeTXT, strconv.Quote(info.Value))
	if err := provider.CleanUp("host.example.org", "token3", "token3.thumbprint"); err != nil {
		t.Fatalf("CleanUp: %v", err)
	}
	c.Everywhere(t, info.EffectiveFQDN, dns.TypeTXT, "NXDOMAIN")
}

// TestLegoThroughRouter solves DNS-01 challenges through the sharded
// example's router (two shards of three members) in both key modes: lego
// finds the zone by its SOA through the router, Present writes the
// challenge TXT record by UPDATE through it, the router answers it, and
// CleanUp removes it.
func TestLegoThroughRouter(t *testing.T) {
	for _, key := range []string{"name", "zone"} {
		t.Run(key, func(t *testing.T) {
			harness.StartShardedExample(t, key)
			router := harness.ShardedExampleRouter
			provider := legoProvider(t, router)
			for _, domain := range []string{"example.org", "www.example.org", "deep.host.example.org"} {
				for i, keyAuth := range []string{"token1.thumbprint", "token2.thumbprint"} {
					info := dns01.GetChallengeInfo(domain, keyAuth)
					if err := provider.Present(domain, "token"+strconv.Itoa(i), keyAuth); err != nil {
						t.Fatalf("Present for %s: %v", domain, err)
					}
					if got := harness.Rdata(t, router, info.EffectiveFQDN, dns.TypeTXT); got != strconv.Quote(info.Value) {
						t.Fatalf("%s: expected the challenge %q through the router, got %s", info.EffectiveFQDN, info.Value, got)
					}
				}
				info := dns01.GetChallengeInfo(domain, "token2.thumbprint")
				if err := provider.CleanUp(domain, "token1", "token2.thumbprint"); err != nil {
					t.Fatalf("CleanUp for %s: %v", domain, err)
				}
				if got := harness.Rdata(t, router, info.EffectiveFQDN, dns.TypeTXT); got != "NXDOMAIN" {
					t.Errorf("%s: expected NXDOMAIN after CleanUp, got %s", info.EffectiveFQDN, got)
				}
			}
		})
	}
}
