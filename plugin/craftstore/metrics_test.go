package craftstore

import (
	"context"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// recordsSeries returns the value of the records series of member and
// zone, and whether it exists.
func recordsSeries(member, zone string) (float64, bool) {
	ch := make(chan prometheus.Metric, 64)
	go func() { recordsGauge.Collect(ch); close(ch) }()
	found, v := false, 0.0
	for m := range ch {
		var pb dto.Metric
		m.Write(&pb)
		labels := map[string]string{}
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["member"] == member && labels["zone"] == zone {
			found, v = true, pb.GetGauge().GetValue()
		}
	}
	return v, found
}

// TestRecordsSeriesGoesWithZone: coredns_craftstore_records has a series
// for each zone, and a deleted zone's series is deleted too.
func TestRecordsSeriesGoesWithZone(t *testing.T) {
	rep, rrs := newZoneMember(t)
	id := strconv.FormatUint(rep.ID(), 10)
	updateGauges(rep)
	if v, ok := recordsSeries(id, "example.org."); !ok || v != float64(len(rrs)) {
		t.Fatalf("expected a records series of %d for example.org., got %v %v", len(rrs), v, ok)
	}
	var pb dto.Metric
	if err := perRecordGauge.WithLabelValues(id).Write(&pb); err != nil {
		t.Fatal(err)
	}
	if v := pb.GetGauge().GetValue(); v <= 0 {
		t.Errorf("heap bytes per record: %v, expected the heap in use over %d records", v, len(rrs))
	}
	if err := rep.DeleteZone(context.Background(), "example.org."); err != nil {
		t.Fatal(err)
	}
	updateGauges(rep)
	if v, ok := recordsSeries(id, "example.org."); ok {
		t.Errorf("expected no records series once the zone is deleted, got %v", v)
	}
}
