package config

// Nearest returns the name among names within edit distance 2 of name (the
// nearest one, the first of equals), or "" when none is that close: the
// "did you mean" of spec validation, for tools that name a service or an
// upstream.
func Nearest(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(name, n, bestD); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// NearestService returns the name of s's service nearest to name (Nearest
// over the service names), or "".
func (s *Spec) NearestService(name string) string {
	names := make([]string, len(s.Services))
	for i, svc := range s.Services {
		names[i] = svc.Name
	}
	return Nearest(name, names)
}

// ServiceNotFoundError is an edit of a service the spec does not have; it
// is ErrServiceNotFound (errors.Is) and names the nearest service there is.
type ServiceNotFoundError struct {
	Name string
	// Near is the spec's service nearest to Name, or "" (NearestService).
	Near string
}

// Error is ErrServiceNotFound's text with the nearest name; the edits
// that return it name the service themselves ("flip service \"x\": ...").
func (e *ServiceNotFoundError) Error() string {
	msg := ErrServiceNotFound.Error()
	if e.Near != "" {
		msg += "; did you mean " + quote(e.Near) + "?"
	}
	return msg
}

// Is makes a ServiceNotFoundError match ErrServiceNotFound.
func (e *ServiceNotFoundError) Is(target error) bool { return target == ErrServiceNotFound }
