package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

// slowRate refills one token in 10 minutes: after its burst a test's
// requests find the bucket empty.
const slowRate = 1.0 / 600

// limitedREST returns a REST for env with Config.QPS and Burst set (0, 0:
// no limit).
func limitedREST(t *testing.T, env *testenv.Env, qps float32, burst int) *client.REST {
	t.Helper()
	cfg, err := client.FromKubeconfig(env.Kubeconfig, "")
	if err != nil {
		t.Fatalf("FromKubeconfig: %v", err)
	}
	if cfg.QPS != 0 || cfg.Burst != 0 {
		t.Errorf("FromKubeconfig() QPS, Burst = %v, %v; want 0, 0", cfg.QPS, cfg.Burst)
	}
	cfg.QPS, cfg.Burst = qps, burst
	return newExecREST(t, cfg)
}

// emptyBucket checks that rc has no token left: a request whose deadline
// comes before the next token fails with context.DeadlineExceeded.
func emptyBucket(t *testing.T, rc *client.REST) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rc.Raw(ctx, "/api"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Raw() with an empty bucket error = %v, want context.DeadlineExceeded", err)
	}
}

func TestRateLimitDefaults(t *testing.T) {
	tests := []struct {
		qps       float32
		burst     int
		wantQPS   float64
		wantBurst int
		wantLimit bool
	}{
		{qps: 0, burst: 0},
		{qps: 0, burst: 10},
		{qps: -1, burst: 10},
		{qps: 5, burst: 0, wantQPS: 5, wantBurst: 5, wantLimit: true},
		{qps: 5, burst: -3, wantQPS: 5, wantBurst: 5, wantLimit: true},
		{qps: 0.5, burst: 0, wantQPS: 0.5, wantBurst: 1, wantLimit: true},
		{qps: 5, burst: 2, wantQPS: 5, wantBurst: 2, wantLimit: true},
	}
	for _, tt := range tests {
		rc, err := client.New(&client.Config{Host: "https://127.0.0.1:1", QPS: tt.qps, Burst: tt.burst})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		qps, burst, ok := client.RateLimit(rc)
		if qps != tt.wantQPS || burst != tt.wantBurst || ok != tt.wantLimit {
			t.Errorf("New(QPS %v, Burst %v) limit = %v, %v, %v; want %v, %v, %v",
				tt.qps, tt.burst, qps, burst, ok, tt.wantQPS, tt.wantBurst, tt.wantLimit)
		}
	}
}

func TestRateLimit(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxFor(t)

	t.Run("spaces requests", func(t *testing.T) {
		rc := limitedREST(t, env, 20, 1)
		start := time.Now()
		for range 21 {
			if _, err := rc.Raw(ctx, "/api/v1/namespaces"); err != nil {
				t.Fatalf("Raw() error = %v", err)
			}
		}
		// The first request takes the burst, the next 20 one token each
		// 50 ms apart: about 1 s.
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Errorf("21 requests at 20 QPS, burst 1 took %v, want at least 900ms", d)
		}
	})

	t.Run("cancel while waiting", func(t *testing.T) {
		rc := limitedREST(t, env, slowRate, 1)
		if _, err := rc.Raw(ctx, "/api"); err != nil {
			t.Fatalf("Raw() error = %v", err)
		}
		// Without a deadline: Wait refuses at once to wait past one.
		cctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := rc.Raw(cctx, "/api")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Raw() cancelled while waiting for a token error = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Raw() returned %v after it was cancelled, want promptly", d)
		}
		emptyBucket(t, rc)
	})

	t.Run("watch takes one token", func(t *testing.T) {
		rc := limitedREST(t, env, slowRate, 2)
		w, err := client.NewClient[*corev1.ConfigMap](rc, configMaps).Watch(ctx, "default", metav1.ListOptions{})
		if err != nil {
			t.Fatalf("Watch() error = %v", err)
		}
		defer w.Stop()
		cms := client.NewClient[*corev1.ConfigMap](limitedREST(t, env, 0, 0), configMaps)
		want := map[string]bool{}
		for i := range 3 {
			name := fmt.Sprintf("ratelimit-%d", i)
			want[name] = true
			if _, err := cms.Create(ctx, newCM("default", name, nil), metav1.CreateOptions{}); err != nil {
				t.Fatalf("Create(%s) error = %v", name, err)
			}
		}
		for len(want) > 0 {
			ev, err := w.Next()
			if err != nil {
				t.Fatalf("Next() error = %v", err)
			}
			delete(want, ev.Object.Name)
		}
		if _, err := rc.Raw(ctx, "/api"); err != nil {
			t.Fatalf("Raw() with one token left error = %v", err)
		}
		emptyBucket(t, rc)
	})
}

// TestRateLimitRetries checks that a retry after a 429 takes a token.
func TestRateLimitRetries(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	rc := newExecREST(t, &client.Config{Host: srv.URL, QPS: slowRate, Burst: 2})
	if got, err := rc.Raw(ctxFor(t), "/"); err != nil || string(got) != "ok" {
		t.Fatalf("Raw() = %q, %v; want ok after a retry", got, err)
	}
	emptyBucket(t, rc)
	if got := requests.Load(); got != 2 {
		t.Errorf("server saw %d requests, want 2", got)
	}
}
