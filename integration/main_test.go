// Package integration starts the real coredns binary (built once in
// TestMain, see package harness) from Corefiles and talks to it with real
// clients on loopback.
package integration

import (
	"testing"

	"github.com/craftdns/craftdns/integration/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
