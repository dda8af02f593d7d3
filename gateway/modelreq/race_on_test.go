//go:build race

package modelreq

// raceEnabled: the race detector is on; allocation counts are not the
// product's then.
const raceEnabled = true
