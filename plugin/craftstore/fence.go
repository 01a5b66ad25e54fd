package craftstore

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/craftdns/craftdns/internal/dnsname"
	"github.com/craftdns/craftdns/internal/ede"
	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/shardproto"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// Fencing routers by the shard map (internal/shardmap): a router's request
// to this member's API carries the epoch of the map it routed it by
// (shardmap.EpochHeader). A request routed by a placement older than this
// shard's is refused with 409 (shardmap.Stale); a write that passes
// carries the epoch into its Raft entry, which is refused when applied if
// the placement changed meanwhile (replica.WithEpoch, ErrStaleMap). Every
// answer says the member's epoch in the header, so that a router behind
// reads the map. Queries and UPDATEs are fenced in craftstore.go and
// update.go.

// fenced wraps the member API's handler.
func (a *apiServer) fenced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := a.rep.Placement()
		if p != nil {
			w.Header().Set(shardmap.EpochHeader, strconv.FormatUint(p.Map.Epoch, 10))
		}
		h := r.Header.Get(shardmap.EpochHeader)
		if h == "" || !fencedPath(r.Method, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		epoch, err := strconv.ParseUint(h, 10, 64)
		if err != nil || epoch == 0 {
			httpapi.WriteError(w, http.StatusBadRequest, shardmap.EpochHeader+" "+strconvQuote(h)+": not an epoch (1 or more)")
			return
		}
		v := p.FenceWrite(epoch)
		if name := r.URL.Query().Get("name"); p != nil && v != shardmap.Fenced && name != "" && r.Method == http.MethodGet && p.Map.Key == shardmap.KeyName {
			// A read of one name, sent to its owner: refused when the
			// name's partition is no longer here.
			v = p.Fence(epoch, true, dnsname.Lower(dns.Fqdn(name)))
		}
		switch v {
		case shardmap.Fenced:
			writeStale(w, p.FencedText(epoch), p.Map.Epoch)
			return
		case shardmap.Notice:
			fenceCount.WithLabelValues("http", "notice").Inc()
		}
		next.ServeHTTP(w, r.WithContext(replica.WithEpoch(r.Context(), epoch)))
	})
}

func strconvQuote(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strconv.Quote(s)
}

// fencedPath reports whether a router's request (method, path) is judged
// by its map: the zones and their records, and a transaction's prepare.
// Deciding and finishing a transaction never are (a decision stands
// whatever map its router had), nor is releasing a transfer's fence (it
// undoes what the router did), nor are the map, the cluster and the
// health.
func fencedPath(method, path string) bool {
	switch {
	case strings.HasPrefix(path, "/v1/txn/"):
		return strings.HasSuffix(path, "/prepare")
	case method == http.MethodDelete && strings.Contains(path, "/xfr/"):
		return false
	case strings.HasPrefix(path, "/v1/zones"):
		return true
	}
	return false
}

// staleVote marks v, the vote on a part err refused, when the part was
// refused for its router's old map.
func (a *apiServer) staleVote(v *txn.Vote, err error) {
	if !errors.Is(err, replica.ErrStaleMap) {
		return
	}
	fenceCount.WithLabelValues("http", "fenced").Inc()
	if p := a.rep.Placement(); p != nil {
		v.StaleMap = p.Map.Epoch
	}
}

// writeStale answers a router's API request routed by an older map than
// the placement of this member's, which holds epoch: 409 with
// shardmap.Stale, nothing written.
func writeStale(w http.ResponseWriter, why string, epoch uint64) {
	fenceCount.WithLabelValues("http", "fenced").Inc()
	httpapi.WriteJSON(w, http.StatusConflict, shardmap.Stale{Error: why, StaleMap: true, Epoch: epoch, Map: shardmap.MapPath})
}

// fencedReply is a member's DNS refusal of router query or UPDATE r,
// routed by an older map than p's placement: REFUSED, the Extended DNS
// Error Not Authoritative with why, and the member's epoch, fenced.
func fencedReply(r *dns.Msg, p *shardmap.Place, why string) *dns.Msg {
	fenceCount.WithLabelValues("dns", "fenced").Inc()
	m := ede.Reply(r, dns.RcodeRefused, dns.ExtendedErrorCodeNotAuthoritative, why)
	if p != nil {
		shardproto.AttachEpoch(m, p.Map.Epoch, true)
	}
	return m
}
