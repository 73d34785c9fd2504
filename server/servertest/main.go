package servertest

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain runs m and fails if goroutines outlive the tests, ignoring
// the process-wide ones of klog, grpc and etcd.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog (pulled in by Kubernetes libraries) starts its flush daemon in init.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// grpc and etcd keep process-wide background goroutines.
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}
