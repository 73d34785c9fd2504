package etcd_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// BenchmarkWatchFanout: b.N puts over 60 prefixes, each watched, plus a
// watch of the whole keyspace (a server's watch caches and its history
// recorder), until every watch has received every put under it.
// "dedicated": one etcd watch each, the 60 with previous values (as the
// watch caches watch today); "feed": all served by one Feed, without
// previous values; "dedicated-noprev": dedicated watches, all without
// previous values (what the feed saves beyond them). cpu-ns/put is the process's user+sys CPU (etcd is
// embedded: its encoding and sending count) per put.
func BenchmarkWatchFanout(b *testing.B) {
	for _, mode := range []string{"dedicated", "dedicated-noprev", "feed"} {
		b.Run(mode, func(b *testing.B) { benchFanout(b, mode == "feed", mode == "dedicated") })
	}
}

func benchFanout(b *testing.B, feed, prev bool) {
	const prefixes, writers = 60, 16
	s := etcdtest.Start(b)
	var f *etcd.Feed
	if feed {
		f = runFeed(b, s, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := must(s.Revision(ctx))
	value := strings.Repeat("v", 1024)
	var wg sync.WaitGroup
	var received atomic.Int64
	want := int64(2 * b.N) // every put once under its prefix, once under "/"
	done := make(chan struct{})
	watch := func(prefix string, prev bool) {
		wctx := ctx
		if !prev {
			wctx = storage.WithoutPrev(ctx)
		}
		w := must(s.Watch(wctx, prefix, start+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for e := range w.Events() {
				switch e.Type {
				case storage.Error:
					b.Error(e.Err)
					return
				case storage.Put:
					if received.Add(1) == want {
						close(done)
					}
				}
			}
		}()
	}
	for p := range prefixes {
		watch(fmt.Sprintf("/r%02d/", p), prev)
	}
	watch("/", false)
	if feed {
		if st := f.Stats(); st.Subscribers != prefixes+1 {
			b.Fatalf("feed serves %d watches, want %d", st.Subscribers, prefixes+1)
		}
	}
	var next atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	var writes sync.WaitGroup
	for range writers {
		writes.Add(1)
		go func() {
			defer writes.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if _, err := s.Client().Put(ctx, fmt.Sprintf("/r%02d/obj-%d", i%prefixes, i), value); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	writes.Wait()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("received %d of %d events", received.Load(), want)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/put")
	cancel()
	wg.Wait()
}

// cpuTime is the process's user+sys CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
