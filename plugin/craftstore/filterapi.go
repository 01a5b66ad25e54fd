package craftstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/http"
	"strconv"

	"github.com/craftdns/craftdns/internal/namefilter"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"
)

// nameFilter answers GET /v1/zones/{zone}/filter: the existence filter of
// the zone's names on this member (internal/namefilter, replica.NameFilter),
// for the routers, which skip asking this shard about a name the filter
// rules out. The member confirms its state with its leader first (a
// ReadIndex round), so the filter holds every write acknowledged before
// the request came. A zone the member does not hold gets an empty filter
// (200: the shard holds none of its names; any other answer is a failure
// to the router, which then asks every shard as before). One filter is
// built at a time; each has a random seed.
func (a *apiServer) nameFilter(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.rep.Fresh(ctx); err != nil {
		fail(w, err)
		return
	}
	select {
	case filterBuilds <- struct{}{}:
		defer func() { <-filterBuilds }()
	case <-ctx.Done():
		fail(w, zoneapi.Errorf(http.StatusServiceUnavailable, "another filter is being built: try again"))
		return
	}
	var seed [8]byte
	rand.Read(seed[:])
	f, err := a.rep.NameFilter(origin, binary.LittleEndian.Uint64(seed[:]))
	if errors.Is(err, replica.ErrNotFound) {
		f, err = namefilter.New(0, 0), nil
		f.Index = a.rep.Applied()
		if m := a.rep.ShardMap(); m != nil {
			f.Epoch = m.Epoch
		}
	}
	if err != nil {
		fail(w, err)
		return
	}
	b, _ := f.AppendBinary(make([]byte, 0, f.EncodedLen()))
	w.Header().Set("Content-Type", namefilter.MediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// filterBuilds bounds the filters built at once, in this process.
var filterBuilds = make(chan struct{}, 1)
