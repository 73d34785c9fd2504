package main

import (
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/internal/instance"
	"github.com/objwatch/objwatch/testenv"
)

// at makes a server keep its credentials in dir and listen on addr, so
// that a server started again at the same place is the same server to its
// clients (as `objwatch serve` restarted with the same --data-dir).
func at(dir, addr string) testenv.Option {
	return func(o *instance.Options) { o.DataDir, o.Listen = dir, addr }
}

// TestServerRestart: the operator keeps running while its server stops.
// Meanwhile another server on the same etcd takes changes the operator
// cannot see (scale up, edit the template, a new set). Its server comes
// back at the same address with the same credentials; the operator's
// informers reconnect, resume from the resourceVersions they had (one etcd,
// one history) and it converges.
func TestServerRestart(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	dir := t.TempDir()
	first := testenv.Start(t, testenv.WithEtcd(etcd), at(dir, "127.0.0.1:0"))
	u, err := url.Parse(first.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	op := newAPI(t, first.Kubeconfig, nil)
	operator(t, op.rest, options{})

	ns := "default"
	if _, err := op.sets.Create(testContext(t), newSet(ns, "before", 3, map[string]string{"v": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	op.waitConverged(t, ns, "before")

	first.Stop()
	other := newAPI(t, testenv.Start(t, testenv.WithEtcd(etcd)).Kubeconfig, nil)
	other.patchSpec(t, ns, "before", `{"replicas":5,"template":{"data":{"v":"2"}}}`)
	if _, err := other.sets.Create(testContext(t), newSet(ns, "during", 2, map[string]string{"v": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the operator's informers and reconciles meet a closed port
	if set, err := other.sets.Get(testContext(t), ns, "during", metav1.GetOptions{}); err != nil || len(set.Finalizers) != 0 {
		t.Fatalf("a set created while the operator's server was down: %v, %v; want it untouched", set, err)
	}

	testenv.Start(t, testenv.WithEtcd(etcd), at(dir, u.Host))
	other.waitConverged(t, ns, "before")
	other.waitConverged(t, ns, "during")
}
