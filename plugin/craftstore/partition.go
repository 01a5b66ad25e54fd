package craftstore

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/craftdns/craftdns/internal/shardmap"
	"github.com/craftdns/craftdns/internal/zoneapi"
)

// maxPartitionCount bounds the "of" of a partition filter.
const maxPartitionCount = 1 << 20

// partitionFilter reads the partition filter of GET /v1/zones/{zone}:
// "partitions" lists partitions and ranges ("3,7-9"), "of" the partition
// count of the map (shardmap.PartitionOf); the export then holds the SOA
// and the names of those partitions only, the part of the zone a shard
// hands to another. Without "partitions" every name is kept (nil).
func partitionFilter(r *http.Request) (func(string) bool, error) {
	q := r.URL.Query()
	spec, ofText := q.Get("partitions"), q.Get("of")
	if spec == "" && ofText == "" {
		return nil, nil
	}
	of, err := strconv.Atoi(ofText)
	if err != nil || of < 1 || of > maxPartitionCount {
		return nil, zoneapi.BadRequest("of=%q: the map's partition count, 1 to %d, goes with partitions", ofText, maxPartitionCount)
	}
	if spec == "" {
		return nil, zoneapi.BadRequest("of without partitions: list them (partitions=3,7-9)")
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
			return nil, zoneapi.BadRequest("partitions: %q is not a partition or a range of partitions below %d", part, of)
		}
		for p := a; p <= b; p++ {
			set[p] = true
		}
	}
	return func(name string) bool { return set[shardmap.PartitionOf(name, of)] }, nil
}
