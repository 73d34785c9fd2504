package servertest

import (
	"fmt"

	"strings"
	"testing"
)

// Field returns the value at a dotted path of a decoded object.
func Field(obj map[string]any, path string) any {
	var v any = obj
	for _, p := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	return v
}

func CheckFields(t *testing.T, what string, obj map[string]any, want map[string]any) {
	t.Helper()
	for p, w := range want {
		if got := Field(obj, p); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: %s = %v, want %v", what, p, got, w)
		}
	}
	for _, absent := range []string{"note", "regarding", "message", "involvedObject"} {
		// Each API shows only its own names.
		if _, ok := obj[absent]; ok && ((obj["apiVersion"] == "v1") == (absent == "note" || absent == "regarding")) {
			t.Errorf("%s has %s: %v", what, absent, obj)
		}
	}
}
