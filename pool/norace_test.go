//go:build !race

package pool_test

// raceDetector says whether the race detector is on: tests that move
// hundreds of MiB do less under it, which makes them ten times slower.
const raceDetector = false
