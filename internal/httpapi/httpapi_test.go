package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAuth(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, map[string]int{"n": 1}) })
	for _, tc := range []struct {
		token, header string
		want          int
	}{
		{"", "", 200},
		{"s3cret", "Bearer s3cret", 200},
		{"s3cret", "", 401},
		{"s3cret", "Bearer wrong", 401},
		{"s3cret", "s3cret", 401},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/zones", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		Auth("test", tc.token, ok).ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("token %q, header %q: expected %d, got %d", tc.token, tc.header, tc.want, rec.Code)
		}
		if rec.Code == 401 && (rec.Header().Get("WWW-Authenticate") == "" || rec.Header().Get("Content-Type") != "application/json") {
			t.Errorf("401 without a challenge or JSON: %v", rec.Header())
		}
	}
}

func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.9.9.9": true, "0.0.0.0": false, "192.0.2.1": false, "example.org": false} {
		if got := Loopback(host); got != want {
			t.Errorf("%s: expected %v, got %v", host, want, got)
		}
	}
}
