// Package apitest holds what the HTTP API tests of craftstore and craftroute
// share: a request with an optional bearer token.
package apitest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Call sends method url with body (none when empty) and token as a bearer
// token (none when empty), and returns the status and the body of the reply;
// a request that cannot be sent fails the test.
func Call(t testing.TB, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
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
