package shard_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
	"github.com/objwatch/objwatch/storage/shard"
	"github.com/objwatch/objwatch/storage/storagetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}

func TestRoutes(t *testing.T) {
	ctx := context.Background()
	main, events := etcdtest.Start(t), etcdtest.Start(t)
	r, err := shard.New(main, shard.Route{Name: "events", Prefix: "/registry/events/", Store: events})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, "/registry/events/ns/e1", []byte("e")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, "/registry/configmaps/ns/c1", []byte("c")); err != nil {
		t.Fatal(err)
	}
	// Each key is in its own store only.
	for _, c := range []struct {
		key       string
		in, notIn storage.Interface
	}{{"/registry/events/ns/e1", events, main}, {"/registry/configmaps/ns/c1", main, events}} {
		if _, err := c.in.Get(ctx, c.key); err != nil {
			t.Errorf("%s not in its store: %v", c.key, err)
		}
		if _, err := c.notIn.Get(ctx, c.key); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s in the other store: %v", c.key, err)
		}
	}
	if l, err := r.List(ctx, "/registry/events/ns/", storage.ListOptions{}); err != nil || len(l.KVs) != 1 {
		t.Errorf("List of events = %v, %v; want one", l.KVs, err)
	}
	if _, err := r.List(ctx, "/registry/", storage.ListOptions{}); !errors.Is(err, storage.ErrSpansParts) {
		t.Errorf("List of the root: %v, want ErrSpansParts", err)
	}
	if _, err := r.Watch(ctx, "/registry/", 0); !errors.Is(err, storage.ErrSpansParts) {
		t.Errorf("Watch of the root: %v, want ErrSpansParts", err)
	}
	parts := r.Parts("/registry/")
	if len(parts) != 2 || parts[0].Store != main || parts[1].Store != events || parts[1].Name != "events" ||
		parts[0].Holds("/registry/events/x") || !parts[0].Holds("/registry/pods/x") {
		t.Errorf("Parts = %+v", parts)
	}
	if st, name := r.Part("/registry/events/"); st != events || name != "events" {
		t.Errorf("Part(events) = %v, %q", st, name)
	}
	if st, name := r.Part("/registry/pods/"); st != main || name != "" {
		t.Errorf("Part(pods) = %v, %q", st, name)
	}
}

func TestNewRefusesOverlaps(t *testing.T) {
	main := etcdtest.Start(t)
	for _, rs := range [][]shard.Route{
		{{Name: "a", Prefix: "/registry/events/", Store: main}, {Name: "b", Prefix: "/registry/events/", Store: main}},
		{{Name: "a", Prefix: "/registry/", Store: main}, {Name: "b", Prefix: "/registry/events/", Store: main}},
		{{Name: "a", Prefix: "/registry/events", Store: main}},
		{{Name: "a", Prefix: "/registry/events/"}},
	} {
		if _, err := shard.New(main, rs...); err == nil {
			t.Errorf("New(%+v) = nil error", rs)
		}
	}
}

// The router passes the conformance suite: its keys on the routed store.
func TestConformance(t *testing.T) {
	main, other := etcdtest.Start(t), etcdtest.Start(t)
	r, err := shard.New(main, shard.Route{Name: "other", Prefix: "/elsewhere/", Store: other})
	if err != nil {
		t.Fatal(err)
	}
	storagetest.Run(t, func(*testing.T) storage.Interface { return r })
}
