package informer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/internal/testobj"
)

const storeBenchObjects = 10000

// storeBenchConfigMap is BenchmarkInformer's ConfigMap i as a server
// returns it (kind, UID, resourceVersion, creation time set).
func storeBenchConfigMap(i int, rnd *rand.Rand) *corev1.ConfigMap {
	cm := testobj.ConfigMap("bench", i, rnd)
	cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	cm.UID = types.UID(fmt.Sprintf("8f2b6c1e-0d4a-4b7e-9c3f-%012d", i))
	cm.ResourceVersion = fmt.Sprint(100000 + i)
	cm.CreationTimestamp = metav1.Unix(1700000000, 0)
	return cm
}

func benchStore(compact bool) *Store[*corev1.ConfigMap] {
	s := newStore[*corev1.ConfigMap](nil, compact)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range storeBenchObjects {
		s.Put(storeBenchConfigMap(i, rnd))
	}
	return s
}

func storeMode(compact bool) string {
	if compact {
		return "compact"
	}
	return "decoded"
}

// BenchmarkLister reads a store of storeBenchObjects ConfigMaps in both
// modes.
//
//	go test ./client/informer -run '^$' -bench Lister
func BenchmarkLister(b *testing.B) {
	for _, compact := range []bool{false, true} {
		l := Lister[*corev1.ConfigMap]{store: benchStore(compact)}
		names := make([]string, storeBenchObjects)
		for i := range names {
			names[i] = fmt.Sprintf("cm-%05d", i)
		}
		b.Run(storeMode(compact)+"/Get", func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, ok := l.Get("bench", names[i%len(names)]); !ok {
					b.Fatal("not found")
				}
				i++
			}
		})
		b.Run(storeMode(compact)+"/GetParallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					l.Get("bench", names[i%len(names)])
				}
			})
		})
		sel := labels.SelectorFromSet(labels.Set{"shard": "3"}) // 1/16 of the objects
		b.Run(storeMode(compact)+"/List-selector", func(b *testing.B) {
			for b.Loop() {
				if n := len(l.List("", sel)); n != storeBenchObjects/16 {
					b.Fatalf("List = %d objects", n)
				}
			}
		})
	}
}

// BenchmarkStorePut replaces objects, the way an informer applies updates
// with handlers registered (it wants the replaced object).
func BenchmarkStorePut(b *testing.B) {
	for _, compact := range []bool{false, true} {
		s := benchStore(compact)
		rnd := rand.New(rand.NewPCG(3, 4))
		objs := make([]*corev1.ConfigMap, 1000)
		for i := range objs {
			objs[i] = storeBenchConfigMap(i*7, rnd)
		}
		b.Run(storeMode(compact), func(b *testing.B) {
			i := 0
			for b.Loop() {
				s.put(objs[i%len(objs)], true)
				i++
			}
		})
	}
}

// BenchmarkStoreHeap reports the live heap per object of a full store.
func BenchmarkStoreHeap(b *testing.B) {
	for _, compact := range []bool{false, true} {
		b.Run(storeMode(compact), func(b *testing.B) {
			var perObject float64
			for b.Loop() {
				base := liveHeap()
				s := benchStore(compact)
				perObject = float64(liveHeap()-base) / storeBenchObjects
				runtime.KeepAlive(s)
			}
			b.ReportMetric(perObject, "B/object")
		})
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
