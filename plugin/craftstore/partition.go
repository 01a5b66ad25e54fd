package craftstore

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/zoneapi"

	"github.com/miekg/dns"
)

// maxPartitionCount bounds the "of" of a partition filter.
const maxPartitionCount = 1 << 20

// exportPartitions answers GET /v1/partitions, what moves between shards
// when partitions change owner (a migration, craftroute's migrate.go),
// from one consistent read of every zone of a member confirmed current
// with its leader: with "partitions" and "of" (as below), the records of
// the names of those partitions that only their owner holds; with
// "shared=1", the records every shard holds (the apex, zone cuts and what
// is below them, DNAMEs). The body is zone file text, each zone's records
// behind a "$ORIGIN <zone>" line.
func (a *apiServer) exportPartitions(w http.ResponseWriter, r *http.Request) {
	shared := r.URL.Query().Get("shared") == "1"
	parts, of, err := partitionList(r)
	switch {
	case err != nil:
		fail(w, err)
		return
	case shared == (parts != nil):
		fail(w, zoneapi.BadRequest("give partitions and of, or shared=1"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.rep.Fresh(ctx); err != nil {
		// The batch's names were just held: an export from a state that
		// may be older could miss the writes before the hold.
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/dns")
	bw := bufio.NewWriter(w)
	started, zone := false, ""
	emit := func(origin string, rr dns.RR) error {
		started = true
		if origin != zone {
			zone = origin
			if _, err := fmt.Fprintf(bw, "$ORIGIN %s\n", origin); err != nil {
				return err
			}
		}
		return writeZone(bw, rr)
	}
	if shared {
		err = a.rep.ExportShared(emit)
	} else {
		err = a.rep.ExportPartitions(parts, of, emit)
	}
	if err != nil && !started {
		fail(w, err)
		return
	}
	if err != nil {
		// The body is cut short: the router sees no end line and fails.
		log.Warningf("partition export: %v", err)
		return
	}
	fmt.Fprintf(bw, "%s\n", shardmap.ExportEnd)
	bw.Flush()
}

// partitionFilter reads the partition filter of GET /v1/zones/{zone}:
// "partitions" lists partitions and ranges ("3,7-9"), "of" the partition
// count of the map (shardmap.PartitionOf); the export then holds the SOA
// and the names of those partitions only, the part of the zone a shard
// hands to another. Without "partitions" every name is kept (nil).
func partitionFilter(r *http.Request) (func(string) bool, error) {
	list, of, err := partitionList(r)
	if list == nil || err != nil {
		return nil, err
	}
	set := make([]bool, of)
	for _, p := range list {
		set[p] = true
	}
	return func(name string) bool { return set[shardmap.PartitionOf(name, of)] }, nil
}

// partitionList reads the partitions of a filter (partitionFilter), in
// order, each once, and their count; nil without a filter.
func partitionList(r *http.Request) ([]uint32, int, error) {
	q := r.URL.Query()
	spec, ofText := q.Get("partitions"), q.Get("of")
	if spec == "" && ofText == "" {
		return nil, 0, nil
	}
	of, err := strconv.Atoi(ofText)
	if err != nil || of < 1 || of > maxPartitionCount {
		return nil, 0, zoneapi.BadRequest("of=%q: the map's partition count, 1 to %d, goes with partitions", ofText, maxPartitionCount)
	}
	if spec == "" {
		return nil, 0, zoneapi.BadRequest("of without partitions: list them (partitions=3,7-9)")
	}
	set := make([]bool, of)
	for _, part := range strings.Split(spec, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= of {
			return nil, 0, zoneapi.BadRequest("partitions: %q is not a partition or a range of partitions below %d", part, of)
		}
		for p := a; p <= b; p++ {
			set[p] = true
		}
	}
	var list []uint32
	for p, in := range set {
		if in {
			list = append(list, uint32(p))
		}
	}
	return list, of, nil
}
