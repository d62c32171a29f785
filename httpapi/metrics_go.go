package httpapi

import (
	"runtime"
	"runtime/debug"
	"time"
)

// memStat is one go_memstats_ metric read from runtime.MemStats, named,
// typed and described as client_golang's Go collector has them.
type memStat struct {
	name, help, typ string
	value           func(*runtime.MemStats) uint64
}

// memStats are the go_memstats_ metrics but last_gc_time_seconds.
var memStats = []memStat{
	{"alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.Alloc }},
	{"alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", typeCounter, func(m *runtime.MemStats) uint64 { return m.TotalAlloc }},
	{"sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", typeGauge, func(m *runtime.MemStats) uint64 { return m.Sys }},
	{"mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", typeCounter, func(m *runtime.MemStats) uint64 { return m.Mallocs }},
	{"frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", typeCounter, func(m *runtime.MemStats) uint64 { return m.Frees }},
	{"heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.HeapAlloc }},
	{"heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.HeapSys }},
	{"heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.HeapIdle }},
	{"heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", typeGauge, func(m *runtime.MemStats) uint64 { return m.HeapInuse }},
	{"heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.HeapReleased }},
	{"heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", typeGauge, func(m *runtime.MemStats) uint64 { return m.HeapObjects }},
	{"stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.StackInuse }},
	{"stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.StackSys }},
	{"mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.MSpanInuse }},
	{"mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.MSpanSys }},
	{"mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.MCacheInuse }},
	{"mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.MCacheSys }},
	{"buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.BuckHashSys }},
	{"gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.GCSys }},
	{"other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.OtherSys }},
	{"next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", typeGauge, func(m *runtime.MemStats) uint64 { return m.NextGC }},
}

// gcPauseQuantiles are the quantiles of go_gc_duration_seconds.
var gcPauseQuantiles = []float64{0, 0.25, 0.5, 0.75, 1}

// collectGo adds the Go runtime's metrics under client_golang's names,
// types and HELP texts, from runtime.ReadMemStats and debug.ReadGCStats
// (not runtime/metrics, whose package init the launcher would pay).
// go_gc_gogc_percent is left out: the runtime offers no way to read it
// but runtime/metrics.
func collectGo(e *exposition) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	threads, _ := runtime.ThreadCreateProfile(nil)
	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, len(gcPauseQuantiles))}
	debug.ReadGCStats(&gc)
	pauses := make([]point, len(gcPauseQuantiles))
	for i, q := range gcPauseQuantiles {
		pauses[i] = point{at: q, v: gc.PauseQuantiles[i].Seconds()}
	}

	e.gauge("go_goroutines", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine()))
	e.gauge("go_threads", "Number of OS threads created.", float64(threads))
	e.add("go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", typeSummary,
		series{points: pauses, count: uint64(gc.NumGC), sum: gc.PauseTotal.Seconds()})
	e.add("go_info", "Information about the Go environment.", typeGauge, series{labels: []label{{"version", runtime.Version()}}, value: 1})
	for _, m := range memStats {
		e.add("go_memstats_"+m.name, m.help, m.typ, series{value: float64(m.value(&ms))})
	}
	e.gauge("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", float64(ms.LastGC)/1e9)
	e.gauge("go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.",
		float64(runtime.GOMAXPROCS(0)))
	e.gauge("go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.",
		float64(debug.SetMemoryLimit(-1))) // a negative limit reads it without changing it
}
