package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dwara/dwara/api/apiv1"
)

// routes is the route table of the admin listener. openapi/openapi.yaml
// documents exactly these routes (a test walks both).
//
// Every route but /healthz and /readyz checks the Host first (421). Reads
// then authenticate (the read token will do) and get the database
// deadline; mutations are audited whatever happens below (see mutation).
func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(withRequestID, s.logRequests, s.recoverPanics, limitBodies)
	r.NotFound(s.checkHost(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeProblem(w, r, problemf(http.StatusNotFound, "no such endpoint: %s", r.URL.Path))
	})).ServeHTTP)
	r.MethodNotAllowed(s.checkHost(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeProblem(w, r, problemf(http.StatusMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
	})).ServeHTTP)

	// Probes: answered whatever the Host, never authenticated.
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)

	// Operations: never authenticated.
	r.Group(func(r chi.Router) {
		r.Use(s.checkHost)
		r.Get("/metrics", s.metrics)
		r.Get("/openapi.yaml", s.openAPI)
		r.Get("/docs", s.docs)
		r.Get("/docs/", s.docs)
		r.Get("/docs/{asset}", s.docs)
	})

	r.Route("/api/v1", func(r chi.Router) {
		// Reads.
		r.Group(func(r chi.Router) {
			r.Use(s.checkHost, s.authenticate(false))
			r.Get("/events", s.events) // a stream: no deadline
			r.Group(func(r chi.Router) {
				r.Use(s.withDeadline)
				r.Get("/generations", s.listGenerations)
				r.Get("/generations/current", s.currentGeneration)
				r.Get("/generations/{id}", s.getGeneration)
				r.Get("/generations/{id}/diff", s.diffGeneration)
				r.Get("/audit", s.listAudit)
				r.Get("/gateways", s.listGateways)
				r.Get("/canary", s.listCanary)
				r.Get("/canary/events", s.listCanaryEvents)
				r.Get("/exposures", s.listExposures)
				r.Get("/exposures/summary", s.exposureSummary)
				r.Get("/services/{name}/cache", s.cacheStats)
			})
		})

		// Reports of the data-plane replicas: guarded like mutations (the
		// admin token, the cross-site and media-type checks) but not
		// audited, for they arrive every few seconds from every replica.
		r.Group(func(r chi.Router) {
			r.Use(s.checkHost, s.authenticate(true), s.checkMutation, s.withDeadline)
			r.Put("/gateways/{id}", s.reportGateway)
			r.Post("/canary/windows", s.flushCanaryWindows)
		})

		// Mutations: audited whatever the outcome.
		r.Post("/generations", s.mutation(apiv1.ActionCreate, s.createGeneration))
		r.Post("/generations/{id}/rollback", s.mutation(apiv1.ActionRollback, s.rollback))
		r.Post("/services/{name}/flip", s.mutation(apiv1.ActionFlip, s.flip))
		r.Put("/services/{name}/weights", s.mutation(apiv1.ActionWeights, s.setWeights))
		r.Post("/services/{name}/kill", s.mutation(apiv1.ActionKill, s.kill))
		r.Post("/services/{name}/cache/purge", s.mutation(actionCachePurge, s.purgeCache))
		r.Post("/services/{name}/canary/adopt", s.mutation(apiv1.ActionAdopt, s.adoptCanary))
		r.Post("/services/{name}/canary/pause", s.mutation(actionCanaryPause, s.pauseCanary))
		r.Post("/services/{name}/canary/resume", s.mutation(actionCanaryResume, s.resumeCanary))
		r.Post("/services/{name}/canary/promote", s.mutation(actionCanaryGate, s.promoteCanary))
	})
	return r
}

// mutation wraps a mutating handler: the audit record first (so that every
// refusal below is recorded), then the Host check (421), authentication
// (401, or 403 for the read token), from where on the client's request id
// is recorded, the caller's actor (400), the cross-site and media-type
// checks (403, 415), and the database deadline.
func (s *Server) mutation(action string, h http.HandlerFunc) http.HandlerFunc {
	return s.audited(action,
		s.checkHost(
			s.authenticate(true)(
				noteClientRequestID(
					s.withActor(
						s.checkMutation(
							s.withDeadline(h)))))))
}
