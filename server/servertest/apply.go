package servertest

import (
	"encoding/json"

	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const ApplyType = "application/apply-patch+yaml"

// ManagedEntries returns an object's managedFields.
func ManagedEntries(t *testing.T, r Response) []metav1.ManagedFieldsEntry {
	t.Helper()
	var obj struct {
		Metadata struct {
			ManagedFields []metav1.ManagedFieldsEntry `json:"managedFields"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(r.Body, &obj); err != nil {
		t.Fatalf("decode %s: %v", Truncate(r.Body), err)
	}
	return obj.Metadata.ManagedFields
}

// Entry describes a managedFields entry as manager/operation/subresource
// and its fields.
func Entry(e metav1.ManagedFieldsEntry) string {
	s := e.Manager + "/" + string(e.Operation)
	if e.Subresource != "" {
		s += "/" + e.Subresource
	}
	s += " " + e.APIVersion
	if e.FieldsV1 != nil {
		s += " " + string(e.FieldsV1.Raw)
	}
	return s
}

func Entries(t *testing.T, r Response) []string {
	t.Helper()
	var out []string
	for _, e := range ManagedEntries(t, r) {
		if e.Time == nil || e.FieldsType != "FieldsV1" {
			t.Errorf("entry %s: time %v, fieldsType %q", Entry(e), e.Time, e.FieldsType)
		}
		out = append(out, Entry(e))
	}
	return out
}

func WantEntries(t *testing.T, what string, r Response, want ...string) {
	t.Helper()
	if got := Entries(t, r); !slices.Equal(got, want) {
		t.Errorf("%s: managedFields\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
