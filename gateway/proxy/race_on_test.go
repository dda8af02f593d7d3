//go:build race

package proxy

// raceEnabled: the tests run under the race detector, which makes each
// request many times dearer; the heaviest tests scale down.
const raceEnabled = true
