package craftstore

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/craftdns/craftdns/internal/httpapi"
	"github.com/craftdns/craftdns/internal/txn"
	"github.com/craftdns/craftdns/internal/xfrstream"
	"github.com/craftdns/craftdns/internal/zoneapi"
	"github.com/craftdns/craftdns/plugin/craftstore/replica"

	"github.com/miekg/dns"
)

// The routers' zone transfers (package internal/xfrstream):
//
//	GET    /v1/zones/{zone}/xfr?serial=N[&net=1][&fresh=1]   the transfer from this member's state (fresh: confirmed current)
//	POST   /v1/zones/{zone}/xfr?fence=ID&serial=N[&net=1]  set fence ID, then the transfer from a state that holds it
//	DELETE /v1/zones/{zone}/xfr/{id}               remove fence ID ({"held"}: it still held); a body (xfrstream.Cut) records the cut
//	GET    /v1/zones/{zone}/xfr/cuts/{serial}      the cut recorded for a zone serial
//
// serial is the secondary's (0 or absent: a full transfer); with net, an
// incremental transfer is one difference. A router in key mode "name"
// fences every shard before it removes any fence, and so reads one
// consistent snapshot of a zone that spans them (replica/fsm/fence.go).

// parseSerial reads a serial of a query or path ("" is 0, none).
func parseSerial(s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	v, err := xfrstream.ParseUint32(s)
	if err != nil {
		return 0, zoneapi.BadRequest("serial %q: not a serial number", s)
	}
	return v, nil
}

// xfr streams a transfer of the zone, after setting a fence when the
// request is a POST.
func (a *apiServer) xfr(w http.ResponseWriter, r *http.Request) {
	// A fence is a write: this member's state holds the zone once it
	// applied it, if the group does (the fence is refused otherwise).
	origin, err := zoneapi.ZoneParam(r)
	if err == nil && r.Method == http.MethodGet {
		origin, err = a.existingZone(r)
	}
	if err != nil {
		fail(w, err)
		return
	}
	serial, err := parseSerial(r.URL.Query().Get("serial"))
	if err != nil {
		fail(w, err)
		return
	}
	var id txn.ID
	if r.Method == http.MethodPost {
		if id, err = txn.ParseID(r.URL.Query().Get("fence")); err != nil {
			fail(w, zoneapi.BadRequest("%v", err))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
		err = a.rep.Fence(ctx, origin, id)
		cancel()
		if err != nil {
			fail(w, err)
			return
		}
	}
	var out *xfrstream.Writer
	net := r.URL.Query().Get("net") == "1"
	wait, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if r.Method == http.MethodGet && r.URL.Query().Get("fresh") == "1" {
		// From a state that holds every write the group acknowledged
		// (a migration's catch-up after its hold, craftroute's
		// migratezone.go): the member confirms it with its leader.
		if err := a.rep.Fresh(wait); err != nil {
			fail(w, err)
			return
		}
	}
	err = a.rep.TransferFenced(wait, origin, serial, net, id, func(st replica.XfrStart) error {
		h := w.Header()
		h.Set("Content-Type", xfrstream.ContentType)
		h.Set(xfrstream.HeaderSerial, strconv.FormatUint(uint64(st.Serial), 10))
		h.Set(xfrstream.HeaderBase, strconv.FormatUint(uint64(st.Base), 10))
		w.WriteHeader(http.StatusOK)
		out = xfrstream.NewWriter(w)
		// The router waits for every shard's answer before it lets the
		// fences go: send the headers now.
		return http.NewResponseController(w).Flush()
	}, func(rrs []dns.RR) error {
		return out.Write(rrs)
	})
	switch {
	case err != nil && out == nil:
		fail(w, err)
	case err != nil:
		// No end frame: the router throws the stream away.
		log.Errorf("transfer of %s to a router: %v", origin, err)
		out.Flush()
	default:
		out.End()
	}
}

// unfence removes a fence the router set for a transfer.
func (a *apiServer) unfence(w http.ResponseWriter, r *http.Request) {
	origin, err := zoneapi.ZoneParam(r)
	if err != nil {
		fail(w, err)
		return
	}
	id, err := txID(r)
	if err != nil {
		fail(w, err)
		return
	}
	var cut *xfrstream.Cut
	var raw []byte
	if r.ContentLength != 0 {
		cut = new(xfrstream.Cut)
		if err := decodeBody(w, r, cut); err != nil {
			fail(w, err)
			return
		}
		raw, _ = json.Marshal(cut)
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	var serial uint32
	if cut != nil {
		serial = cut.Serial
	}
	held, err := a.rep.Unfence(ctx, origin, id, serial, raw)
	if err != nil {
		fail(w, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, xfrstream.Released{Held: held})
}

// xfrCut answers the cut recorded for a zone serial.
func (a *apiServer) xfrCut(w http.ResponseWriter, r *http.Request) {
	origin, err := a.existingZone(r)
	if err != nil {
		fail(w, err)
		return
	}
	serial, err := parseSerial(r.PathValue("serial"))
	if err != nil {
		fail(w, err)
		return
	}
	raw := a.rep.Cut(origin, serial)
	if raw == nil {
		fail(w, replica.Errorf(replica.ErrNotFound, "no cut of zone %q at serial %d is kept", origin, serial))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(raw)
}
