//go:build race

package replica

// raceDetector is whether the tests run under the race detector, which
// slows everything several times over: tests that bound how long something
// takes (not what it does) relax those bounds.
const raceDetector = true
