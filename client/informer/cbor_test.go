package informer_test

import (
	"strings"
	"testing"
)

// TestCBORInformer runs representative informer tests with the reader
// preferring CBOR (see preferCBOR): list and watch with a streaming and a
// paged list, deletes, watch renewals and bookmarks; and a 410 relist
// that delivers only the differences, deletes missed during the gap as
// unknown-state deletes. Each checks the reader's lists and watches were
// answered in CBOR only.
func TestCBORInformer(t *testing.T) {
	check := func(t *testing.T, e *env) {
		t.Helper()
		types := e.answerTypes()
		// A streaming list is a watch; a paged one is CBOR lists.
		lists := !strings.Contains(t.Name(), "streaming=true")
		if (types["application/cbor"] == 0) == lists || types["application/cbor-seq"] == 0 || types["application/json"] != 0 {
			t.Errorf("reader's answers by Content-Type = %v, want CBOR watches (and lists: %v) only", types, lists)
		}
	}
	t.Run("SeesEveryChange", func(t *testing.T) {
		bothModes(t, func(t *testing.T, compact bool) {
			testInformerSeesEveryChange(t, compact, check)
		})
	})
	t.Run("RelistAppliesOnlyDifferences", func(t *testing.T) {
		testRelistAppliesOnlyDifferences(t, false, check)
	})
}

// TestProtobufInformer runs the same tests as TestCBORInformer with the
// reader preferring protobuf, and checks its lists and watches were
// answered in protobuf only.
func TestProtobufInformer(t *testing.T) {
	check := func(t *testing.T, e *env) {
		t.Helper()
		// Lists and watches share the media type (a watch's has
		// ;stream=watch, which answerTypes drops).
		types := e.answerTypes()
		if types["application/vnd.kubernetes.protobuf"] < 2 || len(types) != 1 {
			t.Errorf("reader's answers by Content-Type = %v, want protobuf only", types)
		}
	}
	t.Run("SeesEveryChange", func(t *testing.T) {
		bothModes(t, func(t *testing.T, compact bool) {
			testInformerSeesEveryChange(t, compact, check)
		})
	})
	t.Run("RelistAppliesOnlyDifferences", func(t *testing.T) {
		testRelistAppliesOnlyDifferences(t, false, check)
	})
}
