package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestSharedBinaryWatchFrames: protobuf and CBOR watches of a built-in
// kind get every event, and the watch cache encodes each event once per
// encoding for all of them (two protobuf watches receive the same bytes);
// served from etcd, each watch renders its own, the same events.
func TestSharedBinaryWatchFrames(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("noCache=%v", noCache), func(t *testing.T) {
			env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = noCache }))
			a := servertest.NewAPI(t, env)
			servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("b0", "")), http.StatusCreated)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			open := func(accept string) io.ReadCloser { return openInitialWatch(t, ctx, a, accept) }
			const pb = "application/vnd.kubernetes.protobuf"
			// Counted from before the watches open: their initial ADDED is
			// encoded when each watch's goroutine first sends.
			before := server.EncodedFramesMade(env.Server)
			p1, p2, c1 := open(pb), open(pb), open("application/cbor")
			defer p1.Close()
			defer p2.Close()
			defer c1.Close()
			want := []string{"ADDED b0", "BOOKMARK "}
			for i := 1; i <= 10; i++ {
				name := fmt.Sprint("b", i)
				servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM(name, "")), http.StatusCreated)
				servertest.MustCode(t, "patch", a.Do("PATCH", servertest.CMs+"/"+name, "application/merge-patch+json", []byte(`{"data":{"k":"w"}}`)), http.StatusOK)
				want = append(want, "ADDED "+name, "MODIFIED "+name)
			}
			servertest.MustCode(t, "delete", a.JSON("DELETE", servertest.CMs+"/b1", ""), http.StatusOK)
			want = append(want, "DELETED b1")

			f1, f2 := protobufFrames(t, p1, len(want)), protobufFrames(t, p2, len(want))
			raw := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
			objs := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
			got := eventNames(t, len(want), func(ev *metav1.WatchEvent, i int) error {
				if !slices.Equal(f1[i], f2[i]) {
					t.Errorf("event %d: the two protobuf watches got different bytes", i)
				}
				_, _, err := raw.Decode(f1[i], nil, ev)
				return err
			}, objs)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("protobuf events %v, want %v", got, want)
			}
			cdec := streaming.NewDecoder(cbor.NewFramer().NewFrameReader(c1), cbor.NewSerializer(scheme.Scheme, scheme.Scheme, cbor.Transcode(false)))
			got = eventNames(t, len(want), func(ev *metav1.WatchEvent, _ int) error {
				_, _, err := cdec.Decode(nil, ev)
				return err
			}, cbor.NewSerializer(scheme.Scheme, scheme.Scheme))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("CBOR events %v, want %v", got, want)
			}
			made := server.EncodedFramesMade(env.Server) - before
			events := int64(len(want) - 1) // all but the bookmark
			switch {
			case noCache && made != 0:
				t.Errorf("%d shared frames made with no watch cache", made)
			case !noCache && (made < events || made > 2*events):
				t.Errorf("the cache encoded %d frames for %d events in two encodings to three watches, want one per event and encoding", made, events)
			}
		})
	}
}

// protobufFrames reads n length-prefixed frames of a protobuf watch.
func protobufFrames(t *testing.T, r io.Reader, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for range n {
		var size [4]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			t.Fatalf("after %d frames: %v", len(out), err)
		}
		b := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatalf("frame %d: %v", len(out), err)
		}
		out = append(out, b)
	}
	return out
}

// eventNames decodes n events with next and returns "TYPE name" of each
// (a bookmark's name is empty).
func eventNames(t *testing.T, n int, next func(ev *metav1.WatchEvent, i int) error, objs runtime.Decoder) []string {
	t.Helper()
	var out []string
	for i := range n {
		ev := &metav1.WatchEvent{}
		if err := next(ev, i); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		obj, _, err := objs.Decode(ev.Object.Raw, nil, nil)
		if err != nil {
			t.Fatalf("event %d (%s): %v", i, ev.Type, err)
		}
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("event %d (%s): %T", i, ev.Type, obj)
		}
		out = append(out, ev.Type+" "+cm.Name)
	}
	return out
}
