package craftstore

import (
	"net/http"
	"testing"
)

// TestFencedPath: a router's zone reads and writes and a transaction's
// prepare are judged by its map epoch; a transaction's decision and
// finish, a transfer fence's release, the map, the cluster and the health
// never are.
func TestFencedPath(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodGet, "/v1/zones", true},
		{http.MethodPut, "/v1/zones/example.org.", true},
		{http.MethodPost, "/v1/zones/example.org./records", true},
		{http.MethodGet, "/v1/zones/example.org./xfr", true},
		{http.MethodDelete, "/v1/zones/example.org./xfr/0123", false},
		{http.MethodPost, "/v1/txn/0123/prepare", true},
		{http.MethodPost, "/v1/txn/0123/decide", false},
		{http.MethodPost, "/v1/txn/0123/commit", false},
		{http.MethodPost, "/v1/txn/0123/abort", false},
		{http.MethodGet, "/v1/txn/0123", false},
		{http.MethodGet, "/v1/map", false},
		{http.MethodGet, "/v1/cluster", false},
		{http.MethodGet, "/v1/health", false},
	} {
		if got := fencedPath(tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s: fenced %v, expected %v", tc.method, tc.path, got, tc.want)
		}
	}
}
