package objects

// A test fault breaks the service on purpose, so that a test can show a
// checker finds the break (the robustness harness, test/robustness). The
// faults exist only in binaries built with -tags objwatch_debugfault
// (debugfault_on.go), as the harness builds objwatch; any other build
// refuses a Config.DebugFault (debugfault_off.go), which is empty unless
// `objwatch serve --debug-fault` (hidden from help) names one.
const (
	// FaultDropEventAfterRestart drops one event, once per server process:
	// the first MODIFIED ConfigMap event of a watch that started from a
	// resourceVersion. A client that resumes its watches after this server
	// (re)started thus misses one update, which a watch's reliability
	// check must report.
	FaultDropEventAfterRestart = "drop-event-after-restart"
	// FaultDropRestOfRevision drops, in every ConfigMap watch started from
	// a resourceVersion, each event after the first of its revision: a
	// revision of several keys (one etcd transaction) reaches the client
	// as its first event only, and a client resuming from that revision
	// never gets the rest. The robustness harness's multi-key
	// transactions must make its atomic and reliable checks report it.
	FaultDropRestOfRevision = "drop-rest-of-revision"
)

// DebugFaultTag is the build tag that compiles the test faults in.
const DebugFaultTag = "objwatch_debugfault"
