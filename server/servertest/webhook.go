package servertest

import (
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

var ConfigMapRules = []admissionregistrationv1.RuleWithOperations{{
	Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"},
	Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
}}

// Seen records the admission requests a test webhook got.
type Seen struct {
	Mu   sync.Mutex
	Reqs []*admissionv1.AdmissionRequest
}

func (s *Seen) Add(r *admissionv1.AdmissionRequest) {
	s.Mu.Lock()
	s.Reqs = append(s.Reqs, r)
	s.Mu.Unlock()
}

func (s *Seen) All() []*admissionv1.AdmissionRequest {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return append([]*admissionv1.AdmissionRequest(nil), s.Reqs...)
}

func JSONPatch(ops ...string) *admissionv1.AdmissionResponse {
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt, Patch: []byte("[" + strings.Join(ops, ",") + "]")}
}

func WantStatus(t *testing.T, r Response, code int, msg string) {
	t.Helper()
	if st := r.Status(); r.Code != code || st.Message != msg {
		t.Errorf("got %d %q, want %d %q", r.Code, st.Message, code, msg)
	}
}
