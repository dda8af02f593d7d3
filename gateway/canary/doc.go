// Package canary is the auto-canary analysis of the gateway: it measures the
// baseline and the canary of a 2-target split and decides, from those
// figures alone, when to move weight from one to the other.
//
// The tour, from the response path to the decision:
//
//   - Histogram is a fixed-bucket, mergeable latency histogram, log-linear
//     in microseconds (Buckets buckets, BucketOf and BucketValue map a
//     duration to its bucket and back within 1/128 of the value). It encodes
//     sparsely for storage (AppendSparse, AddSparse).
//   - Recorder records one version's requests on the response path with no
//     lock and no allocation: striped atomic counters of requests, errors
//     and latency buckets. Delta hands over, into a Stats, what was observed
//     since the previous Delta; the caller keeps the sliding window of
//     window_seconds as a sum of such Stats.
//   - Stats is one version's requests, errors and latency histogram over
//     some span; Figures turns it into the apiv1.CanaryFigures the
//     controller judges and reports.
//   - Groups finds the canary groups of a spec: every service whose split
//     has canary_analysis and exactly two targets, baseline first.
//   - Evaluate is the controller's rule, a pure function of the time, the
//     group, its State and its Window: promote by step, roll back by step,
//     roll back to 0 on a severe regression, or do nothing. Controller
//     applies Evaluate to a set of groups over time, keeping each group's
//     State.
//   - PValue is the two-proportion z-test reported with each action.
//
// The total weight of a group never changes: the canary's weight moves
// between 0 and the total, and the baseline holds the rest (Group.Weights).
// Nothing in the package reads the wall clock; every decision takes the
// time as an argument.
package canary
