//go:build !race

package replica

// raceDetector: see race_test.go.
const raceDetector = false
