package workqueue_test

import (
	"sync"
	"testing"

	k8swq "k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/objwatch/objwatch/client/workqueue"
)

// queue is what the benchmarks drive: this package's Queue, client-go's
// workqueue and controller-runtime's priority queue.
type queue interface {
	Add(int)
	Get() (int, bool)
	Done(int)
	ShutDown()
}

type ours struct{ *workqueue.Queue[int] }

func (q ours) Add(k int) { q.Queue.Add(k) }

type clientGo struct{ *k8swq.Typed[int] }

type controllerRuntime struct {
	priorityqueue.PriorityQueue[int]
}

var queues = []struct {
	name string
	make func(b *testing.B) queue
}{
	{"objwatch", func(b *testing.B) queue {
		q, err := workqueue.New[int](workqueue.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return ours{q}
	}},
	{"client-go", func(*testing.B) queue { return clientGo{k8swq.NewTyped[int]()} }},
	{"controller-runtime", func(*testing.B) queue { return controllerRuntime{priorityqueue.New[int]("bench")} }},
}

// BenchmarkAddGetDone: one goroutine adds 1000 distinct keys, then gets
// and Dones them. Per op: one key's Add, Get and Done.
func BenchmarkAddGetDone(b *testing.B) {
	for _, qq := range queues {
		b.Run(qq.name, func(b *testing.B) {
			q := qq.make(b)
			defer q.ShutDown()
			b.ReportAllocs()
			for i := 0; i < b.N; i += 1000 {
				n := min(1000, b.N-i)
				for k := range n {
					q.Add(k)
				}
				for range n {
					k, _ := q.Get()
					q.Done(k)
				}
			}
		})
	}
}

// BenchmarkParallel: 4 workers get and Done while the benchmark's
// goroutines add keys from a space of 10,000 (duplicates are merged).
// Per op: one Add; the workers drain what it queued.
func BenchmarkParallel(b *testing.B) {
	for _, qq := range queues {
		b.Run(qq.name, func(b *testing.B) {
			q := qq.make(b)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						k, shutdown := q.Get()
						if shutdown {
							return
						}
						q.Done(k)
					}
				})
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				k := 0
				for pb.Next() {
					q.Add(k % 10000)
					k += 7
				}
			})
			q.ShutDown()
			wg.Wait()
		})
	}
}
