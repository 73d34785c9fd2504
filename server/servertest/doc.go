// Package servertest holds the helpers shared by the tests that drive a
// whole in-process server over HTTP (through testenv): a raw wire client,
// fixtures (CRDs, webhooks, policies, audit files) and waits. Only tests
// import it; it sits above the facade (server) in the layout's ranks.
package servertest
