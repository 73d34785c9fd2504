package audit

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

func benchLog(b *testing.B, level string) (*Log, func()) {
	p, err := ParsePolicy([]byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: " + level + "\n"))
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(Config{Path: filepath.Join(b.TempDir(), "audit.log"), Policy: p, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	return l, func() { cancel(); <-done }
}

func benchObject(rv string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "obj-000123", "namespace": "default", "uid": "5f0c7f8e-8d7a-4a53-9d55-3d3b2a1c0e9f",
			"resourceVersion": rv, "creationTimestamp": "2026-01-02T03:04:05Z", "labels": map[string]any{"app": "bench"}},
		"data": map[string]any{"payload": strings.Repeat("x", 1000), "replicas": "3"}}}
}

// BenchmarkRecordWrite is the CPU the audit log adds to one write: the
// policy, the RequestReceived and ResponseComplete records (encoded and
// queued) and the write's diff; the fsync is not waited for.
func BenchmarkRecordWrite(b *testing.B) {
	res := &registry.Resource{Version: "v1", Plural: "configmaps", Kind: "ConfigMap", Namespaced: true}
	for _, level := range []string{"Metadata", "RequestResponse"} {
		for _, verb := range []string{"create", "update"} {
			b.Run(level+"/"+verb, func(b *testing.B) {
				l, stop := benchLog(b, level)
				defer stop()
				u := auth.User{Name: "alice", Groups: []string{"system:authenticated"}}
				r := httptest.NewRequest("POST", "/api/v1/namespaces/default/configmaps", nil)
				old, new := benchObject("10"), benchObject("11")
				new.Object["data"].(map[string]any)["replicas"] = "4"
				body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"obj-000123","namespace":"default","resourceVersion":"11"},"data":{"payload":"` + strings.Repeat("x", 1000) + `"}}`)
				req := &objects.Request{User: &u, Verb: verb, Resource: res, Namespace: "default", Name: "obj-000123"}
				b.ReportAllocs()
				for b.Loop() {
					rec := l.Begin(Request{HTTP: r, Received: time.Now(), User: &u, Attributes: Attributes{User: &u, Verb: verb,
						ResourceRequest: true, APIVersion: "v1", Resource: "configmaps", Namespace: "default"}})
					rec.Stage(auditv1.StageRequestReceived)
					w := objects.Write{Request: req, Old: old, New: new, Revision: 11}
					if verb == "create" {
						w.Old = nil
					}
					l.Written(WithRecord(context.Background(), rec), w)
					rec.Complete(Response{Code: 201, Mutating: true, RequestBody: body, ResponseBody: body}, false)
				}
			})
		}
	}
}

// BenchmarkDurable is concurrent writers each waiting for its record to
// be on disk: the group commit's batching.
func BenchmarkDurable(b *testing.B) {
	l, stop := benchLog(b, "Metadata")
	ev := &auditv1.Event{Level: auditv1.LevelMetadata, Verb: "create", RequestURI: "/api/v1/namespaces/default/configmaps"}
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e := *ev
			if err := l.append(&e, nil, true).Wait(); err != nil {
				b.Error(err)
			}
		}
	})
	stop()
	s := l.Stats()
	b.ReportMetric(float64(s.Records)/float64(s.Fsyncs), "records/fsync")
}
