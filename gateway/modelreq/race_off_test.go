//go:build !race

package modelreq

// raceEnabled: see race_on_test.go.
const raceEnabled = false
