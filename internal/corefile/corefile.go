// Package corefile holds Corefile parsing helpers that both plugins share.
package corefile

import (
	"path/filepath"

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
