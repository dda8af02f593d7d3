package proxy

import (
	"reflect"
	"slices"

	"github.com/dwara/dwara/gateway/config"
)

// The equalities below decide whether a compiled upstream or service is
// carried over to the next generation; reflect.DeepEqual gives the same
// answers at some 300 ns a call, a sixth of a 10,000-service re-apply's
// budget. A field they do not know makes them answer false (TestCarryEqual
// changes every field in turn), and the types they compare with == are
// comparable, or this does not compile.

// upstreamEqual reports whether two upstream configurations are the same.
func upstreamEqual(a, b *config.Upstream) bool {
	return a.Name == b.Name && a.Balancer == b.Balancer &&
		slices.Equal(a.Endpoints, b.Endpoints) &&
		ptrEqual(a.HealthCheck, b.HealthCheck) && ptrEqual(a.Passive, b.Passive) &&
		a.ConnectTimeoutMS == b.ConnectTimeoutMS &&
		a.ResponseHeaderTimeoutMS == b.ResponseHeaderTimeoutMS &&
		a.IdleTimeoutMS == b.IdleTimeoutMS &&
		a.AllowLinkLocal == b.AllowLinkLocal &&
		upstreamFields == 9
}

// serviceEqual reports whether two service configurations are the same;
// any mirror, model alias or cache makes it false (such a service is not
// carried over).
func serviceEqual(a, b *config.Service) bool {
	return a.Name == b.Name && a.BasePath == b.BasePath && a.Host == b.Host &&
		a.Upstream == b.Upstream && splitEqual(a.Split, b.Split) &&
		ptrEqual(a.Sticky, b.Sticky) && ptrEqual(a.Override, b.Override) &&
		a.Mirror == nil && b.Mirror == nil && a.Models == nil && b.Models == nil &&
		a.MaxBodyBytes == b.MaxBodyBytes && a.Cache == nil && b.Cache == nil &&
		serviceFields == 11
}

func splitEqual(a, b *config.Split) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.Targets, b.Targets) && a.Allocation == b.Allocation &&
		a.CanaryAnalysis == nil && b.CanaryAnalysis == nil &&
		(len(a.Match) == 0 && len(b.Match) == 0 || reflect.DeepEqual(a.Match, b.Match)) &&
		a.ManagedBy == b.ManagedBy &&
		slices.EqualFunc(a.Slots, b.Slots, slices.Equal) &&
		splitFields == 6
}

// The field counts the equalities were written for.
var (
	upstreamFields = reflect.TypeFor[config.Upstream]().NumField()
	serviceFields  = reflect.TypeFor[config.Service]().NumField()
	splitFields    = reflect.TypeFor[config.Split]().NumField()
)

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// cloneService returns a deep copy of s, which the caller's spec may
// change later without changing it.
func cloneService(s *config.Service) *config.Service {
	c := s.Clone()
	return &c
}
