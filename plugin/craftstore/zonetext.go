package craftstore

import (
	"io"

	"github.com/miekg/dns"
)

// writeZone writes rrs as zone file text.
func writeZone(w io.Writer, rr dns.RR) error {
	_, err := io.WriteString(w, rr.String()+"\n")
	return err
}
