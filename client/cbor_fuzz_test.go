package client

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
)

var fuzzCMs = Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

// cborSeeds are a watch's events and a list as the server encodes them
// (apimachinery's CBOR, objects self-described).
func cborSeeds(t testing.TB) (watch, list []byte) {
	obj := func(name, rv string) []byte {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("u-" + name), ResourceVersion: rv,
			Labels: map[string]string{"a": "b"}}, Data: map[string]string{"k": "v"}, BinaryData: map[string][]byte{"b": {0, 0xff}}}
		b, err := direct.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{0xd9, 0xd9, 0xf7}, b...)
	}
	var w bytes.Buffer
	for i, typ := range []string{"ADDED", "MODIFIED", "BOOKMARK", "DELETED"} {
		b, err := direct.Marshal(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: obj("cm", string(rune('1'+i)))}})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	st, _ := direct.Marshal(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"})
	b, _ := direct.Marshal(&metav1.WatchEvent{Type: "ERROR", Object: runtime.RawExtension{Raw: st}})
	w.Write(b)
	l := cborList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"}, Metadata: metav1.ListMeta{ResourceVersion: "9", Continue: "c"},
		Items: []cborItem{obj("a", "1"), obj("b", "2")}}
	lb, err := direct.Marshal(&l)
	if err != nil {
		t.Fatal(err)
	}
	return w.Bytes(), append([]byte{0xd9, 0xd9, 0xf7}, lb...)
}

// FuzzCBORWatch reads arbitrary bytes as a CBOR watch (with a frame
// buffer starting empty, so that every frame grows it): it must not panic
// or loop, the frames must be the input's data items in order, and an
// event's Meta must agree with its decoded object.
func FuzzCBORWatch(f *testing.F) {
	w, l := cborSeeds(f)
	f.Add(w)
	f.Add(w[:len(w)/2])
	f.Add(l)
	f.Add([]byte{0x9f, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		// The frames are the input's data items in order (the decoder
		// drops their self-described tags), all of it when the sequence
		// ended cleanly.
		fr := newFrameReader(cbor.NewFramer().NewFrameReader(io.NopCloser(bytes.NewReader(data))))
		rest := data
		var err error
		for range len(data) + 1 {
			var frame []byte
			if frame, err = fr.next(); err != nil {
				break
			}
			rest = skipSelfDescribed(rest)
			if len(frame) == 0 || !bytes.HasPrefix(rest, frame) {
				t.Fatalf("frame %x is not the next data item of %x", frame, rest)
			}
			rest = rest[len(frame):]
		}
		if errors.Is(err, io.EOF) && len(rest) != 0 {
			t.Fatalf("sequence ended with %x unread", rest)
		}

		c := newCodec[*corev1.ConfigMap](fuzzCMs)
		body := io.NopCloser(bytes.NewReader(data))
		wt := &Watcher[*corev1.ConfigMap]{resp: &http.Response{Body: body}, codec: &c, cancel: func() {}}
		wt.enc, wt.frames = wireCBOR, newFrameReader(cbor.NewFramer().NewFrameReader(body))
		for range len(data) + 1 {
			typ, raw, err := wt.NextRaw()
			if err != nil {
				break
			}
			if typ == "" || !raw.IsCBOR() {
				t.Fatalf("event %q without type or not CBOR", typ)
			}
			checkRawIdentity(t, raw)
		}
	})
}

// FuzzCBORList reads arbitrary bytes as a CBOR list: no panic, and each
// item passed on is CBOR whose Meta agrees with its decoded object.
func FuzzCBORList(f *testing.F) {
	w, l := cborSeeds(f)
	f.Add(l)
	f.Add(l[:len(l)-3])
	f.Add(w)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewClient[*corev1.ConfigMap](&REST{}, fuzzCMs)
		n := 0
		meta, err := c.listCBOR(bytes.NewReader(data), int64(len(data)), func(raw Raw[*corev1.ConfigMap]) error {
			n++
			if !raw.IsCBOR() {
				t.Fatal("item not CBOR")
			}
			checkRawIdentity(t, raw)
			return nil
		})
		if err == nil && n == 0 && meta.ResourceVersion == "" && bytes.Equal(data, l) {
			t.Fatal("the seed list read as empty")
		}
		if errors.Is(err, io.EOF) && len(data) > 0 {
			t.Fatalf("listCBOR returned a bare io.EOF: %v", err)
		}
	})
}

// skipSelfDescribed drops leading self-described CBOR tag heads.
func skipSelfDescribed(b []byte) []byte {
	for bytes.HasPrefix(b, []byte{0xd9, 0xd9, 0xf7}) {
		b = b[3:]
	}
	return b
}
