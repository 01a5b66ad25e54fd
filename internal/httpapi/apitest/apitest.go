// Package apitest holds what the HTTP API tests of craftstore and craftroute
// share: a request with an optional bearer token.
package apitest

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/craftdns/craftdns/internal/httpapi"
)

// Call sends method url with body (none when empty) and token as a bearer
// token (none when empty), and returns the status and the body of the reply;
// a request that cannot be sent fails the test. A body goes with the
// Content-Type the API asks for it (BodyType).
func Call(t testing.TB, method, url, token, body string) (int, []byte) {
	t.Helper()
	ctype := ""
	if body != "" {
		ctype = BodyType(method, url)
	}
	return CallType(t, method, url, token, ctype, body)
}

// BodyType is the Content-Type of a body the API takes at method url: a
// zone file for PUT of a zone, JSON otherwise (a policy and a region
// table are PUT as JSON).
func BodyType(method, url string) string {
	if method == http.MethodPut && !strings.Contains(url, "/policies/") && !strings.HasSuffix(url, "/regions") {
		return httpapi.Zone
	}
	return httpapi.JSON
}

// CallType is Call with Content-Type ctype (none when empty).
func CallType(t testing.TB, method, url, token, ctype, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
