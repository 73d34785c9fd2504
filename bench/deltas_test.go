package bench

import (
	"encoding/json"
	"testing"
)

// TestNodeLike: the deltas scenario's object is valid JSON of about 40 KiB.
func TestNodeLike(t *testing.T) {
	b := nodeLike("x")
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(b) < 36<<10 || len(b) > 48<<10 {
		t.Errorf("nodeLike is %d bytes, want about 40 KiB", len(b))
	}
}
