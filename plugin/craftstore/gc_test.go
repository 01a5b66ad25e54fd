package craftstore

import "testing"

func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		live     uint64
		headroom int
		want     int
	}{
		{0, 25, 100},
		{10 << 20, 25, 100}, // 32 MiB over 10 MiB live: Go's default caps it
		{64 << 20, 25, 50},  // the 32 MiB floor
		{128 << 20, 25, 25}, // exactly the floor
		{100 << 20, 25, 35}, // 32% rounded up to a step
		{4 << 30, 25, 25},   // a large heap: the headroom
		{4 << 30, 50, 50},
		{4 << 30, 100, 100}, // Go's default
		{1 << 40, 25, 25},
		{150 << 20, 10, 25}, // 21.3% from the floor, rounded up
		{1 << 30, 10, 10},
		{1 << 30, 7, 10}, // steps of 5
	} {
		if got := gcPercent(c.live, c.headroom); got != c.want {
			t.Errorf("gcPercent(%d MiB, %d) = %d, want %d", c.live>>20, c.headroom, got, c.want)
		}
	}
}
