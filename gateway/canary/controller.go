package canary

import (
	"time"

	"github.com/dwara/dwara/api/apiv1"
)

// Controller applies Evaluate to a fixed set of groups over time, keeping
// each group's State: a new controller starts every group at its
// Configured weight, never acted and not paused. The zero Controller has no
// groups and does nothing. A Controller is not safe for concurrent use.
type Controller struct {
	groups []Group
	states []State
	index  map[string]int
}

// NewController returns a controller of groups (copied), each at its
// Configured weight. If two groups name the same service, State and
// SetState address the first.
func NewController(groups []Group) *Controller {
	c := &Controller{
		groups: append([]Group(nil), groups...),
		states: make([]State, len(groups)),
		index:  make(map[string]int, len(groups)),
	}
	for i, g := range c.groups {
		c.states[i] = State{CanaryWeight: g.Configured}
		if _, dup := c.index[g.Service]; !dup {
			c.index[g.Service] = i
		}
	}
	return c
}

// State returns the state of the group of service, and false when the
// controller has no such group.
func (c *Controller) State(service string) (State, bool) {
	i, ok := c.index[service]
	if !ok {
		return State{}, false
	}
	return c.states[i], true
}

// SetState replaces the state of the group of service (to pause or resume
// it, or to restore a weight). It does nothing when the controller has no
// such group.
func (c *Controller) SetState(service string, s State) {
	if i, ok := c.index[service]; ok {
		c.states[i] = s
	}
}

// Evaluate evaluates, in group order, every group that has a window in
// windows (keyed by service; a missing or nil window skips the group), and
// applies each action to that group's state (State.After). It returns the actions taken, nil
// when none.
func (c *Controller) Evaluate(now time.Time, windows map[string]*Window) []Action {
	var actions []Action
	for i, g := range c.groups {
		w := windows[g.Service]
		if w == nil {
			continue
		}
		a, ok := Evaluate(now, g, c.states[i], w)
		if !ok {
			continue
		}
		c.states[i] = c.states[i].After(a, now)
		actions = append(actions, a)
	}
	return actions
}

// After returns s as action a, taken at now, leaves it: a weight change
// sets the weight and LastAction and ends any hold or gate; a hold starts
// the hold at now; a hold_reset ends it; a gate sets Gate and ends the
// hold (it has passed); a breach starts the wait of rollback.for_seconds
// at now, a breach_reset ends it.
func (s State) After(a Action, now time.Time) State {
	switch {
	case a.Changes():
		s.CanaryWeight, s.LastAction = a.To, now
		s.HoldSince, s.Gate, s.BreachSince = time.Time{}, false, time.Time{}
	case a.Kind == apiv1.CanaryHold:
		s.HoldSince = now
	case a.Kind == apiv1.CanaryHoldReset:
		s.HoldSince = time.Time{}
	case a.Kind == apiv1.CanaryGate:
		s.Gate, s.HoldSince = true, time.Time{}
	case a.Kind == apiv1.CanaryBreach:
		s.BreachSince = now
	case a.Kind == apiv1.CanaryBreachReset:
		s.BreachSince = time.Time{}
	}
	return s
}
