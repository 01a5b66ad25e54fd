package craftstore

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// TestErrorKinds maps each kind of replica error to the HTTP status of the
// API and the rcode of the UPDATE path, also when wrapped.
func TestErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		kind   error
		status int
		rcode  int
	}{
		{replica.ErrInvalid, http.StatusBadRequest, dns.RcodeFormatError},
		{replica.ErrNotFound, http.StatusNotFound, dns.RcodeNotAuth},
		{replica.ErrConflict, http.StatusConflict, dns.RcodeRefused},
		{replica.ErrTooLarge, http.StatusRequestEntityTooLarge, dns.RcodeFormatError},
		{replica.ErrUnavailable, http.StatusServiceUnavailable, dns.RcodeServerFailure},
		{replica.ErrUpstream, http.StatusBadGateway, dns.RcodeServerFailure},
		{replica.ErrInternal, http.StatusInternalServerError, dns.RcodeServerFailure},
		{errors.New("other"), http.StatusInternalServerError, dns.RcodeServerFailure},
	} {
		err := fmt.Errorf("wrapped: %w", replica.Errorf(tc.kind, "why"))
		if got := httpStatus(err); got != tc.status {
			t.Errorf("expected HTTP %d for %v, got %d", tc.status, tc.kind, got)
		}
		if got, _ := updateFailure(err); got != tc.rcode {
			t.Errorf("expected rcode %s for %v, got %s", dns.RcodeToString[tc.rcode], tc.kind, dns.RcodeToString[got])
		}
	}
	if !errors.Is(replica.ErrNoQuorum, replica.ErrUnavailable) || replica.Refused(replica.ErrNoQuorum) {
		t.Errorf("expected ErrNoQuorum to be unavailable, not a refusal")
	}
}
