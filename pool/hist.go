package pool

var (
	turnBounds = []float64{0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800}
	permBounds = []float64{1, 5, 15, 30, 60, 120, 300}
)

// histogram counts observations in cumulative buckets.
type histogram struct {
	bounds []float64
	counts []uint64
	count  uint64
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
		}
	}
	h.count++
	h.sum += v
}

func (h *histogram) snapshot() Histogram {
	return Histogram{Bounds: h.bounds, Counts: append([]uint64(nil), h.counts...), Count: h.count, Sum: h.sum}
}
