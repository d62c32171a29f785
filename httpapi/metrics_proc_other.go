//go:build !linux

package httpapi

// collectProcess adds no process metrics: they are read from /proc,
// which only Linux has.
func collectProcess(*exposition) error { return nil }
