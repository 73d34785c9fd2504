package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
)

// protobufSeeds are a watch's frames and a list as Kubernetes encodes them
// (apimachinery's protobuf serializer: objects and lists in envelopes,
// watch events as bare messages in length-delimited frames).
func protobufSeeds(t testing.TB) (watch, list []byte) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	s := protobuf.NewSerializer(scheme, scheme)
	enc := func(obj runtime.Object) []byte {
		var b bytes.Buffer
		if err := s.Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	cm := func(name, rv string) corev1.ConfigMap {
		return corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("u-" + name), ResourceVersion: rv,
				Labels: map[string]string{"a": "b"}},
			Data: map[string]string{"k": "v"}, BinaryData: map[string][]byte{"b": {0, 0xff}},
		}
	}
	var w bytes.Buffer
	frame := func(typ string, obj []byte) {
		ev := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: obj}}
		b, err := ev.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
		w.Write(b)
	}
	for i, typ := range []string{"ADDED", "MODIFIED", "BOOKMARK", "DELETED"} {
		o := cm("cm", string(rune('1'+i)))
		frame(typ, enc(&o))
	}
	frame("ERROR", enc(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}))
	l := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "c"},
		Items: []corev1.ConfigMap{cm("a", "1"), cm("b", "2")}}
	return w.Bytes(), enc(l)
}

// checkProtobufRaw checks a protobuf item or event: it is protobuf, and
// its identity agrees with its decoded object's (checkRawIdentity).
func checkProtobufRaw(t *testing.T, raw Raw[*corev1.ConfigMap]) {
	t.Helper()
	if !raw.IsProtobuf() {
		t.Fatal("not protobuf")
	}
	checkRawIdentity(t, raw)
}

// checkRawIdentity checks what every item or event must satisfy, in any
// encoding: its identity as Meta and PeekMeta read it agrees with its
// decoded object's whenever they decode, and Meta and PeekMeta fail
// together.
func checkRawIdentity(t *testing.T, raw Raw[*corev1.ConfigMap]) {
	t.Helper()
	obj, derr := raw.Decode()
	m, merr := raw.Meta()
	pm, perr := raw.PeekMeta()
	if (merr == nil) != (perr == nil) {
		t.Fatalf("Meta error %v, PeekMeta error %v", merr, perr)
	}
	if merr == nil && (string(pm.Name) != m.Name || string(pm.Namespace) != m.Namespace || string(pm.UID) != m.UID || string(pm.ResourceVersion) != m.ResourceVersion) {
		t.Fatalf("PeekMeta %+v disagrees with Meta %+v", pm, m)
	}
	if derr == nil && merr == nil && (m.Name != obj.Name || m.Namespace != obj.Namespace || m.UID != string(obj.UID) || m.ResourceVersion != obj.ResourceVersion) {
		t.Fatalf("Meta %+v disagrees with the decoded object's %+v", m, obj.ObjectMeta)
	}
}

// FuzzProtobufList reads arbitrary bytes as a protobuf list: no panic, no
// bare io.EOF, each item passed on is protobuf whose identity agrees with
// its decoded object, and the seed list reads whole.
func FuzzProtobufList(f *testing.F) {
	w, l := protobufSeeds(f)
	f.Add(l)
	f.Add(l[:len(l)-3])
	f.Add(w)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewClient[*corev1.ConfigMap](&REST{}, fuzzCMs)
		var names []string
		meta, err := c.listProtobuf(bytes.NewReader(data), int64(len(data)), func(raw Raw[*corev1.ConfigMap]) error {
			checkProtobufRaw(t, raw)
			m, _ := raw.Meta()
			names = append(names, m.Name)
			return nil
		})
		if bytes.Equal(data, l) && (err != nil || len(names) != 2 || names[0] != "a" || names[1] != "b" || meta.ResourceVersion != "9" || meta.Continue != "c") {
			t.Fatalf("the seed list read as %v, %+v, %v", names, meta, err)
		}
		if errors.Is(err, io.EOF) && len(data) > 0 {
			t.Fatalf("listProtobuf returned a bare io.EOF: %v", err)
		}
	})
}

// FuzzProtobufWatch reads arbitrary bytes as a protobuf watch: no panic
// or endless loop, every event's identity agrees with its decoded object,
// an ERROR event is a *StatusError or an error, and the seed watch reads
// as its five events.
func FuzzProtobufWatch(f *testing.F) {
	w, l := protobufSeeds(f)
	f.Add(w)
	f.Add(w[:len(w)/2])
	f.Add(l)
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newCodec[*corev1.ConfigMap](fuzzCMs)
		body := io.NopCloser(bytes.NewReader(data))
		wt := &Watcher[*corev1.ConfigMap]{resp: &http.Response{Body: body}, codec: &c, cancel: func() {}}
		wt.enc, wt.frames = wireProtobuf, newFrameReader(protobuf.LengthDelimitedFramer.NewFrameReader(body))
		var types []EventType
		var last error
		for range len(data) + 1 {
			typ, raw, err := wt.NextRaw()
			if err != nil {
				last = err
				break
			}
			types = append(types, typ)
			checkProtobufRaw(t, raw)
		}
		if bytes.Equal(data, w) {
			var se *StatusError
			if len(types) != 4 || types[2] != Bookmark || !errors.As(last, &se) || se.ErrStatus.Code != 410 || !errors.Is(last, ErrGone) {
				t.Fatalf("the seed watch read as %v then %v", types, last)
			}
		}
	})
}

// TestProtobufPeekMetaAllocatesNothing: PeekMeta of a protobuf list item
// reads its identity in place, as the package doc says.
func TestProtobufPeekMetaAllocatesNothing(t *testing.T) {
	_, l := protobufSeeds(t)
	c := NewClient[*corev1.ConfigMap](&REST{}, fuzzCMs)
	var item Raw[*corev1.ConfigMap]
	if _, err := c.listProtobuf(bytes.NewReader(l), int64(len(l)), func(r Raw[*corev1.ConfigMap]) error {
		item = Raw[*corev1.ConfigMap]{data: bytes.Clone(r.data), codec: r.codec, enc: r.enc}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m, err := item.PeekMeta()
	if err != nil || string(m.Name) != "b" || string(m.UID) != "u-b" || string(m.ResourceVersion) != "2" || string(m.Namespace) != "default" {
		t.Fatalf("PeekMeta = %+v, %v; want default/b u-b rv 2", m, err)
	}
	if n := testing.AllocsPerRun(100, func() { item.PeekMeta() }); n != 0 {
		t.Errorf("PeekMeta of a protobuf item allocates %v times, want 0", n)
	}
}
