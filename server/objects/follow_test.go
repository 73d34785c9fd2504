package objects_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/objects"
)

// TestFollowResumes: Follow lists once; a watch that times out is resumed
// from the last revision it delivered, with no new list (begin is not
// called again) and no event lost or repeated.
func TestFollowResumes(t *testing.T) {
	s, res := newService(t, objects.Hooks{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.Create(ctx, &objects.Request{Verb: "create", Resource: res, Namespace: "ns"}, configMap("before", nil), objects.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	begins, listed := 0, false
	var seen []string // names of the events after the initial ones, in order
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Follow(ctx, res, 300*time.Millisecond, func() {
			mu.Lock()
			begins++
			mu.Unlock()
		}, func(it objects.Item) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case it.Type == objects.Bookmark:
				listed = listed || it.InitialEnd
			case listed:
				u := it.Object
				if u == nil {
					var err error
					if u, err = objects.Decode(it.JSON); err != nil {
						return err
					}
				}
				seen = append(seen, u.GetName())
			}
			return nil
		})
	}()

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		l := listed
		mu.Unlock()
		if l {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the initial list did not end")
		}
	}
	const n = 12 // one every 100 ms: several watches time out meanwhile
	var want []string
	for i := range n {
		name := fmt.Sprint("cm-", i)
		want = append(want, name)
		if _, err := s.Create(ctx, &objects.Request{Verb: "create", Resource: res, Namespace: "ns"}, configMap(name, nil), objects.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got, b := append([]string(nil), seen...), begins
		mu.Unlock()
		if len(got) >= n {
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("events after the list: %v, want %v", got, want)
			}
			if b != 1 {
				t.Errorf("begin called %d times, want 1 (a timed-out watch resumes without a list)", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: events %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}
