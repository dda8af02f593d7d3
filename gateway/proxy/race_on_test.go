//go:build race

package proxy

// raceEnabled: the race detector is on, which makes each request many
// times dearer (the heaviest tests scale down), and sync.Pool drops a
// share of what it is given, so a pooled buffer's reuse cannot be counted
// on.
const raceEnabled = true
