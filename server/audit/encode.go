package audit

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/change"
)

// The audit log's hot path encodes JSON by hand: encoding/json's
// reflection over an Event and over the objects in a create's patch cost
// more CPU than the rest of recording a request. The output is what
// encoding/json writes (fields in struct order, map keys sorted);
// encode_test.go compares the two.

// appendEvent appends ev as encoding/json would encode it.
func appendEvent(b []byte, ev *auditv1.Event) []byte {
	b = append(b, '{')
	if ev.Kind != "" {
		b = append(b, `"kind":`...)
		b = appendString(b, ev.Kind)
		b = append(b, ',')
	}
	if ev.APIVersion != "" {
		b = append(b, `"apiVersion":`...)
		b = appendString(b, ev.APIVersion)
		b = append(b, ',')
	}
	b = append(b, `"level":`...)
	b = appendString(b, string(ev.Level))
	b = append(b, `,"auditID":`...)
	b = appendString(b, string(ev.AuditID))
	b = append(b, `,"stage":`...)
	b = appendString(b, string(ev.Stage))
	b = append(b, `,"requestURI":`...)
	b = appendString(b, ev.RequestURI)
	b = append(b, `,"verb":`...)
	b = appendString(b, ev.Verb)
	b = append(b, `,"user":`...)
	b = appendUser(b, &ev.User)
	if ev.ImpersonatedUser != nil {
		b = append(b, `,"impersonatedUser":`...)
		b = appendUser(b, ev.ImpersonatedUser)
	}
	if ev.AuthenticationMetadata != nil {
		b = append(b, `,"authenticationMetadata":`...)
		b = appendMarshal(b, ev.AuthenticationMetadata)
	}
	if len(ev.SourceIPs) > 0 {
		b = append(b, `,"sourceIPs":`...)
		b = appendStrings(b, ev.SourceIPs)
	}
	if ev.UserAgent != "" {
		b = append(b, `,"userAgent":`...)
		b = appendString(b, ev.UserAgent)
	}
	if r := ev.ObjectRef; r != nil {
		b = append(b, `,"objectRef":{`...)
		n := len(b)
		b = appendField(b, n, "resource", r.Resource)
		b = appendField(b, n, "namespace", r.Namespace)
		b = appendField(b, n, "name", r.Name)
		b = appendField(b, n, "uid", string(r.UID))
		b = appendField(b, n, "apiGroup", r.APIGroup)
		b = appendField(b, n, "apiVersion", r.APIVersion)
		b = appendField(b, n, "resourceVersion", r.ResourceVersion)
		b = appendField(b, n, "subresource", r.Subresource)
		b = append(b, '}')
	}
	if s := ev.ResponseStatus; s != nil {
		if s.Details != nil || s.ListMeta.ResourceVersion != "" || s.Kind != "" {
			b = append(b, `,"responseStatus":`...)
			b = appendMarshal(b, s)
		} else {
			b = append(b, `,"responseStatus":{"metadata":{}`...)
			n := 0 // always a member before: the commas are needed
			b = appendField(b, n, "status", s.Status)
			b = appendField(b, n, "message", s.Message)
			b = appendField(b, n, "reason", string(s.Reason))
			if s.Code != 0 {
				b = append(b, `,"code":`...)
				b = strconv.AppendInt(b, int64(s.Code), 10)
			}
			b = append(b, '}')
		}
	}
	if ev.RequestObject != nil {
		b = append(b, `,"requestObject":`...)
		b = append(b, ev.RequestObject.Raw...)
	}
	if ev.ResponseObject != nil {
		b = append(b, `,"responseObject":`...)
		b = append(b, ev.ResponseObject.Raw...)
	}
	b = append(b, `,"requestReceivedTimestamp":`...)
	b = appendMicroTime(b, ev.RequestReceivedTimestamp)
	b = append(b, `,"stageTimestamp":`...)
	b = appendMicroTime(b, ev.StageTimestamp)
	if len(ev.Annotations) > 0 {
		b = append(b, `,"annotations":`...)
		b = appendStringMap(b, ev.Annotations)
	}
	return append(b, '}')
}

func appendMicroTime(b []byte, t metav1.MicroTime) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, metav1.RFC3339Micro)
	return append(b, '"')
}

// appendField appends "name":value when value is set, with a comma
// unless it is the first member after start.
func appendField(b []byte, start int, name, value string) []byte {
	if value == "" {
		return b
	}
	if len(b) > start || start == 0 {
		b = append(b, ',')
	}
	b = appendString(b, name)
	b = append(b, ':')
	return appendString(b, value)
}

func appendUser(b []byte, u *authnv1.UserInfo) []byte {
	b = append(b, '{')
	n := len(b)
	b = appendField(b, n, "username", u.Username)
	b = appendField(b, n, "uid", u.UID)
	if len(u.Groups) > 0 {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, `"groups":`...)
		b = appendStrings(b, u.Groups)
	}
	if len(u.Extra) > 0 {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, `"extra":`...)
		b = appendMarshal(b, u.Extra)
	}
	return append(b, '}')
}

func appendMarshal(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

func appendStringMap(b []byte, m map[string]string) []byte {
	return appendObject(b, m, appendString)
}

// appendObject appends m as a JSON object, keys sorted as encoding/json
// sorts them, each value with value.
func appendObject[V any](b []byte, m map[string]V, value func([]byte, V) []byte) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = value(b, m[k])
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json (and
// so kube-apiserver's audit log) escapes it.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			default:
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendValue appends a JSON value as decoded into any (or as the change
// package returns them); other types go through encoding/json.
func appendValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case string:
		return appendString(b, v)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case float64:
		return appendFloat(b, v)
	case map[string]any:
		return appendObject(b, v, appendValue)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, e)
		}
		return append(b, ']')
	}
	return appendMarshal(b, v)
}

// appendFloat formats f as encoding/json does.
func appendFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendPatch appends ops as a JSON Patch.
func appendPatch(b []byte, ops []change.Operation) []byte {
	b = append(b, '[')
	for i, op := range ops {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"op":`...)
		b = appendString(b, string(op.Op))
		if op.From != "" {
			b = append(b, `,"from":`...)
			b = appendString(b, op.From)
		}
		b = append(b, `,"path":`...)
		b = appendString(b, op.Path)
		if op.Op == change.OpAdd || op.Op == change.OpReplace {
			b = append(b, `,"value":`...)
			b = appendValue(b, op.Value)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
