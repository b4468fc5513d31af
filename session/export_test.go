package session

import "time"

// SyncSubscriptions runs the subscriptions' sync now, on the caller's
// goroutine, for tests that must know it ran.
func (e *Endpoint) SyncSubscriptions() { e.syncSubscriptions() }

// KeepAliveInterval is the keep-alive interval the endpoint resolved from
// Options.KeepAlive (<= 0: none).
func (e *Endpoint) KeepAliveInterval() time.Duration { return e.keepAlive }

// BridgedCalls returns how many forwarded calls r holds for bridging.
func BridgedCalls(r *ProgressRelay) int {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	return len(r.byToken)
}

// ResolvedTools returns how many tools the endpoint's name resolution has
// looked at so far.
func (e *Endpoint) ResolvedTools() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tools.names.resolved
}

// NamedItems returns, for tools ("tool") or prompts, each item's exposed
// name ("" while it is left out) by "server:name", and where each exposed
// name routes, as "server:upstream name".
func (e *Endpoint) NamedItems(kind string) (exposed, routes map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := &e.prompts
	if kind == "tool" {
		k = &e.tools
	}
	exposed, routes = make(map[string]string), make(map[string]string)
	for s, items := range k.items {
		for n, it := range items {
			exposed[s+":"+n] = it.exposed
		}
	}
	for x, r := range k.routes {
		routes[x] = r.server + ":" + r.name
	}
	return exposed, routes
}

// SetCutShortGrace sets how long Drain waits for the calls it cut short,
// until the test ends. Tests that call it must not be parallel.
func SetCutShortGrace(t interface{ Cleanup(func()) }, d time.Duration) {
	old := cutShortGrace
	cutShortGrace = d
	t.Cleanup(func() { cutShortGrace = old })
}

// CallsInFlight returns how many forwarded calls r counts as in flight on
// their upstream connections, those given up on included.
func CallsInFlight(r *ProgressRelay) int {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	n := 0
	for _, calls := range r.conns {
		n += len(calls)
	}
	return n
}

// SetGivenUpFor sets how long a call given up on, not answered, still
// counts as in flight, until the test ends. Tests that call it must not be
// parallel.
func SetGivenUpFor(t interface{ Cleanup(func()) }, d time.Duration) {
	old := givenUpFor
	givenUpFor = d
	t.Cleanup(func() { givenUpFor = old })
}

// MaxInputRequests is maxInputRequests, for the tests of the bound.
const MaxInputRequests = maxInputRequests

// MaxSubscriptions is maxSubscriptions, for the tests of the bound.
const MaxSubscriptions = maxSubscriptions

// TemplatesParsed returns how many resource templates the endpoint has
// parsed to match URIs against.
func (e *Endpoint) TemplatesParsed() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.templatesParsed
}

// TemplateSorts returns how many times the endpoint has sorted its
// resource templates to look for a URI's route.
func (e *Endpoint) TemplateSorts() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.templateSorts
}
