package recording_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/objwatch/objwatch/client/recording"
)

// bigRecording writes n events over 1,000 ConfigMaps of about 1 KiB
// (creates, then updates, every tenth a delete and re-create), one per
// virtual millisecond.
func bigRecording(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.Header{Resources: []string{cms}}, recording.Options{Now: fakeClock(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	const objects = 1000
	data := map[string]string{}
	for k := range 8 {
		data[fmt.Sprint("key", k)] = strings.Repeat(strconv.Itoa(k), 100)
	}
	exists := make([]bool, objects)
	for i := range n {
		o := cm(fmt.Sprint("cm", i%objects), strconv.Itoa(i+1), data)
		kind := recording.Modified
		switch {
		case !exists[i%objects]:
			kind, exists[i%objects] = recording.Added, true
		case i%10 == 7:
			kind, exists[i%objects] = recording.Deleted, false
		}
		must(t, w.Object(kind, cms, o))
	}
	must(t, w.Close())
	return buf.Bytes()
}

// TestPlayer100kEvents reads and plays 100,000 events through a handler
// and checks that it takes under 10 s (the clock is virtual: the recording
// spans 100 s). Under the race detector, 10 times slower, it plays a
// tenth of that and only logs the time.
func TestPlayer100kEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	n := 100_000
	if raceEnabled {
		n /= 10
	}
	file := bigRecording(t, n)
	start := time.Now()
	rec, err := recording.ReadAll(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	p, err := recording.NewPlayer[*corev1.ConfigMap](rec, cms)
	if err != nil {
		t.Fatal(err)
	}
	var adds, updates, deletes int
	p.AddHandler(handlerFuncs{
		add:    func() { adds++ },
		update: func() { updates++ },
		del:    func() { deletes++ },
	})
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	total := time.Since(start)
	t.Logf("%d events (%d bytes compressed, %v recorded): read in %v, read and played in %v (%d adds, %d updates, %d deletes)",
		n, len(file), rec.Items[len(rec.Items)-1].At, read, total, adds, updates, deletes)
	if adds+updates+deletes != n {
		t.Errorf("%d calls for %d events", adds+updates+deletes, n)
	}
	if total > 10*time.Second && !raceEnabled {
		t.Errorf("100k events took %v, want under 10 s", total)
	}
}

func BenchmarkPlayer(b *testing.B) {
	file := bigRecording(b, 10_000)
	b.SetBytes(int64(len(file)))
	for b.Loop() {
		rec, err := recording.ReadAll(bytes.NewReader(file))
		if err != nil {
			b.Fatal(err)
		}
		p, err := recording.NewPlayer[*corev1.ConfigMap](rec, cms)
		if err != nil {
			b.Fatal(err)
		}
		p.AddHandler(handlerFuncs{})
		if err := p.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

type handlerFuncs struct{ add, update, del func() }

func (h handlerFuncs) OnAdd(*corev1.ConfigMap, bool) {
	if h.add != nil {
		h.add()
	}
}

func (h handlerFuncs) OnUpdate(_, _ *corev1.ConfigMap) {
	if h.update != nil {
		h.update()
	}
}

func (h handlerFuncs) OnDelete(*corev1.ConfigMap, bool) {
	if h.del != nil {
		h.del()
	}
}
