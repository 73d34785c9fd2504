package kube_test

import (
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
)

func TestMain(m *testing.M) { servertest.VerifyTestMain(m) }
