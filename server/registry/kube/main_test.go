package kube_test

import (
	"os"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(referenceEnv) != "" {
		// Recording: client-go's HTTP/2 readers of the reference server
		// outlive the run; nothing of objwatch's runs to leak.
		os.Exit(m.Run())
	}
	servertest.VerifyTestMain(m)
}
