package db

import "time"

// ProbeElsewhere makes l probe after idle quiet time and send its probe
// to channel: where nothing listens, the probe never comes back.
func ProbeElsewhere(l *Listener, idle time.Duration, channel string) {
	l.idle, l.probeChannel = idle, channel
}
