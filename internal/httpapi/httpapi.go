// Package httpapi holds what the HTTP APIs of craftstore and craftroute
// share: bearer-token authentication, JSON answers and the loopback rule.
package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"path"
	"strings"
)

// CleanPaths answers 400 with a JSON error for a request whose path is not
// clean ("." or ".." elements, doubled or trailing slashes, "%2e%2e" too:
// the path is decoded) instead of the redirect net/http's ServeMux sends
// for it: an API client should learn that its path is wrong, not be sent
// to another one.
func CleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == "" || p[0] != '/' || path.Clean(p) != p {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("path %q is not clean: no \".\" or \"..\" elements, doubled or trailing slashes", p))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Media types of request bodies.
const (
	JSON = "application/json"
	Zone = "text/dns" // RFC 4027: a zone file
)

// Body answers 415 with a JSON error for a request that has a body whose
// Content-Type is not ctype (parameters such as charset aside), and passes
// the others, those without a body too, to h: a client that sends a body
// says what it is, and nothing is read of one that is something else.
func Body(ctype string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			got := r.Header.Get("Content-Type")
			if mt, _, err := mime.ParseMediaType(got); err != nil || mt != ctype {
				if r.Method == http.MethodPatch {
					w.Header().Set("Accept-Patch", ctype)
				}
				if got == "" {
					got = "none"
				}
				WriteError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %s: this body must be %s", got, ctype))
				return
			}
		}
		h(w, r)
	}
}

// Auth requires "Authorization: Bearer token" on every request when token
// is not empty, and answers 401 with a JSON error otherwise.
func Auth(realm, token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			WriteError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// WriteError answers status with {"error": msg}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg})
}

// Loopback reports whether host (a name or an IP address, no port) is
// loopback: an API listening there needs no token.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
