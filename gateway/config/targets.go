package config

// Targets returns the service's weighted targets: the split's targets, or for
// a service routed to one upstream a single target of weight 1. The result
// shares memory with s.Split and must not be modified.
func (s *Service) Targets() []Target {
	if s.Split != nil {
		return s.Split.Targets
	}
	return []Target{{Upstream: s.Upstream, Weight: 1}}
}
