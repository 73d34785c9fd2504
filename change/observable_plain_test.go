package change_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/change"
)

// user is the plain Go value Observable started from: no exported field,
// so its JSON is {} and a diff through JSON is always empty.
type user struct {
	name string
	age  int
}

func ExampleObservable_plainValue() {
	var o change.Observable[user]
	o.Set(user{name: "ann", age: 30})
	stop, _ := o.OnChange("age", func(ev change.Event[user]) {
		fmt.Printf("%s is now %d\n", ev.New.name, ev.New.age)
	})
	defer stop()
	o.Set(user{name: "ann", age: 31}) // a birthday
	o.Set(user{name: "anne", age: 31})
	_, rev := o.Get()
	for ev := range o.Watch(context.Background(), rev-1) {
		fmt.Println(ev.Diff.Paths())
		break
	}
	// Output:
	// ann is now 31
	// [name]
}

func TestObservableUnexportedFields(t *testing.T) {
	var o change.Observable[user]
	o.Set(user{name: "ann", age: 30})
	o.Set(user{name: "ann", age: 31})
	ev := mustFirst(t, &o, 1)
	if got := ev.Diff.Paths(); !slices.Equal(got, []string{"age"}) {
		t.Fatalf("birthday: Paths() = %q, want [age]", got)
	}
	c := ev.Diff.Changes()[0]
	if fmt.Sprint(c.Old) != "30" || fmt.Sprint(c.New) != "31" {
		t.Errorf("birthday change = %v -> %v, want 30 -> 31", c.Old, c.New)
	}
	if ev.Old.age != 30 || ev.New.age != 31 {
		t.Errorf("event values = %+v -> %+v", ev.Old, ev.New)
	}
	o.Set(user{name: "ann", age: 31})
	if d := mustFirst(t, &o, 2).Diff; !d.Empty() || d.Err() != nil {
		t.Errorf("same value: Changes() = %v, err %v; want none", d.Changes(), d.Err())
	}
}

// account mixes what JSON sees with what it does not, nested.
type account struct {
	Owner   *user             `json:"owner"`
	Tags    []string          `json:"tags,omitempty"`
	created time.Time         // JSON-encodable, reached through an unexported field
	limits  map[int]user      // non-string keys, plain values
	Note    string            `json:"-"`
	meta    metav1.ObjectMeta // a Kubernetes type: its JSON form
}

func TestObservableNestedPlainValues(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	a := account{Owner: &user{"ann", 30}, created: t0, limits: map[int]user{1: {"x", 1}},
		meta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"tier": "gold"}}}
	b := a
	b.Owner = &user{"ann", 31}
	b.created = t0.Add(time.Hour)
	b.limits = map[int]user{1: {"x", 2}, 2: {"y", 0}}
	b.Note = "JSON leaves me out, and so does the diff"
	b.meta.Labels = map[string]string{"tier": "silver"}
	var o change.Observable[account]
	o.Set(a)
	o.Set(b)
	got := mustFirst(t, &o, 1).Diff.Paths()
	want := []string{"created", "limits.1.age", "limits.2", "meta.labels.tier", "owner.age"}
	if !slices.Equal(got, want) {
		t.Fatalf("Paths() = %q, want %q", got, want)
	}
	for _, c := range mustFirst(t, &o, 1).Diff.Changes() {
		if c.Path.String() == "created" && c.New != "2026-12-04T11:00:00Z" {
			t.Errorf("created: new %v, want the time's JSON", c.New)
		}
	}
}

// TestObservableExportedStructsUnchanged: types JSON sees fully are
// diffed as before, in place.
func TestObservableExportedStructsUnchanged(t *testing.T) {
	var o change.Observable[*appsv1.Deployment]
	d1 := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: "1"}}
	d2 := d1.DeepCopy()
	d2.ResourceVersion = "2"
	d2.Status.Replicas = 3
	o.Set(d1)
	o.Set(d2)
	ev := mustFirst(t, &o, 1)
	if ev.Diff.New() != any(d2) {
		t.Errorf("Diff.New() = %T, want the Deployment itself", ev.Diff.New())
	}
	if got := ev.Diff.Paths(); !slices.Equal(got, []string{"status.replicas"}) {
		t.Errorf("Paths() = %q", got)
	}
}

func TestOnChange(t *testing.T) {
	o := change.Observable[user]{}
	var mu sync.Mutex
	var ages, any []int64
	stopAge, err := o.OnChange("age", func(ev change.Event[user]) {
		mu.Lock()
		defer mu.Unlock()
		ages = append(ages, ev.Revision)
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAny, err := o.OnChange("", func(ev change.Event[user]) {
		mu.Lock()
		defer mu.Unlock()
		any = append(any, ev.Revision)
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Set(user{"ann", 30})                            // 1: both (from the zero value)
	o.Set(user{"anne", 30})                           // 2: name only
	o.Set(user{"anne", 30})                           // 3: nothing
	o.Update(func(u user) user { u.age++; return u }) // 4: age
	stopAge()
	stopAge()
	o.Set(user{"anne", 40}) // 5: age, but stopped
	stopAny()
	o.Set(user{"bob", 1})
	if !slices.Equal(ages, []int64{1, 4}) || !slices.Equal(any, []int64{1, 2, 4, 5}) {
		t.Errorf("OnChange(age) got %v, want [1 4]; OnChange(\"\") got %v, want [1 2 4 5]", ages, any)
	}
	if _, err := o.OnChange("a[", func(change.Event[user]) {}); err == nil || !strings.Contains(err.Error(), "a[") {
		t.Errorf("bad path: err = %v", err)
	}
	if _, err := o.OnChange("age", nil); err == nil {
		t.Error("nil function: no error")
	}
}

// TestOnChangeReentrantAndOrdered: a subscriber may Set (no deadlock, its
// change delivered after it returns) and concurrent Sets deliver one at a
// time in revision order.
func TestOnChangeReentrantAndOrdered(t *testing.T) {
	var o change.Observable[int]
	var got []int64
	var busy bool
	o.OnChange("", func(ev change.Event[int]) {
		if busy {
			t.Error("subscriber called concurrently")
		}
		busy = true
		defer func() { busy = false }()
		got = append(got, ev.Revision)
		if ev.New == 1 {
			o.Set(1000) // from within: delivered after this call
			if v, _ := o.Get(); v != 1000 {
				t.Errorf("Get in subscriber = %d", v)
			}
		}
	})
	o.Set(1)
	if !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("reentrant Set: deliveries %v, want [1 2]", got)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				o.Set(10_000*(g+1) + i)
			}
		})
	}
	wg.Wait()
	if len(got) != 802 || !slices.IsSorted(got) {
		t.Fatalf("concurrent Sets: %d deliveries, sorted %v; want 802 in order", len(got), slices.IsSorted(got))
	}
}

// TestObservableDifferExclude: the Observable's Differ leaves fields out
// of plain values' diffs and of OnChange alike.
func TestObservableDifferExclude(t *testing.T) {
	o := change.Observable[user]{Differ: change.Differ{Exclude: []string{"age"}}}
	calls := 0
	o.OnChange("", func(change.Event[user]) { calls++ })
	o.Set(user{"ann", 30})
	o.Set(user{"ann", 31})
	if d := mustFirst(t, &o, 1).Diff; !d.Empty() || calls != 1 {
		t.Errorf("age excluded: Changes() = %v, %d calls; want none and 1 (the first Set's name)", d.Changes(), calls)
	}
}

// guarded has exported data and machinery JSON leaves out anyway: it is
// diffed through JSON as before, its mutex and callback ignored.
type guarded struct {
	Count  int `json:"count"`
	mu     *sync.Mutex
	notify func()
}

// counter keeps its data unexported beside a mutex: the plain view has
// the data, not the mutex.
type counter struct {
	mu sync.Mutex
	n  int
}

func TestObservablePlainViewSkipsMachinery(t *testing.T) {
	var g change.Observable[guarded]
	g.Set(guarded{Count: 1, mu: &sync.Mutex{}, notify: func() {}})
	g.Set(guarded{Count: 2, mu: &sync.Mutex{}})
	ev := mustFirst(t, &g, 1)
	if _, ok := ev.Diff.New().(guarded); !ok || !slices.Equal(ev.Diff.Paths(), []string{"count"}) {
		t.Errorf("guarded: Diff.New() %T, Paths() %q; want the value itself and [count]", ev.Diff.New(), ev.Diff.Paths())
	}
	var c change.Observable[*counter]
	c.Set(&counter{n: 1})
	locked := &counter{n: 2}
	locked.mu.Lock()
	c.Set(locked)
	if got := mustFirst(t, &c, 1).Diff.Paths(); !slices.Equal(got, []string{"n"}) {
		t.Errorf("counter: Paths() = %q, want [n] (the mutex left out)", got)
	}
}
