package audit

import authnv1 "k8s.io/api/authentication/v1"

// The audit log's JSON encoder, for other hot paths that encode what it
// encodes (the admission webhooks' AdmissionReviews). Its output is
// encoding/json's; encode_test.go compares the two.

// AppendJSON appends v, a JSON value as decoded into any (an unstructured
// object's content), as encoding/json encodes it; values of other types
// go through encoding/json.
func AppendJSON(b []byte, v any) []byte { return appendValue(b, v) }

// AppendUserInfo appends u as encoding/json encodes it.
func AppendUserInfo(b []byte, u *authnv1.UserInfo) []byte { return appendUser(b, u) }
