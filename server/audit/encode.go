package audit

import (
	"encoding/json"
	"slices"
	"strconv"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/server/jsonenc"
)

// The audit log's hot path encodes JSON by hand: encoding/json's
// reflection over an Event and over the objects in a create's patch cost
// more CPU than the rest of recording a request. The output is what
// encoding/json writes (fields in struct order, map keys sorted);
// encode_test.go compares the two.

// appendEvent appends ev as encoding/json would encode it, with the
// annotations of extra (key, value pairs, keys distinct) merged into its
// own: an extra key replaces the event's. The record's own annotations
// (its diff, its chain fields) come as extra, so no map is built for
// them. chain is where the values of the empty chain annotations
// (SeqAnnotation, PrevHashAnnotation) start, for the writer to fill.
func appendEvent(b []byte, ev *auditv1.Event, extra []string) (_ []byte, chain chainAt) {
	b = append(b, '{')
	if ev.Kind != "" {
		b = append(b, `"kind":`...)
		b = jsonenc.AppendString(b, ev.Kind)
		b = append(b, ',')
	}
	if ev.APIVersion != "" {
		b = append(b, `"apiVersion":`...)
		b = jsonenc.AppendString(b, ev.APIVersion)
		b = append(b, ',')
	}
	b = append(b, `"level":`...)
	b = jsonenc.AppendString(b, string(ev.Level))
	b = append(b, `,"auditID":`...)
	b = jsonenc.AppendString(b, string(ev.AuditID))
	b = append(b, `,"stage":`...)
	b = jsonenc.AppendString(b, string(ev.Stage))
	b = append(b, `,"requestURI":`...)
	b = jsonenc.AppendString(b, ev.RequestURI)
	b = append(b, `,"verb":`...)
	b = jsonenc.AppendString(b, ev.Verb)
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
		b = jsonenc.AppendString(b, ev.UserAgent)
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
	if len(ev.Annotations) > 0 || len(extra) > 0 {
		b = append(b, `,"annotations":`...)
		b = appendAnnotations(b, ev.Annotations, extra, &chain)
	}
	return append(b, '}'), chain
}

// chainAt is where the empty values of a line's chain annotations are
// (the offset of the closing quote of each); 0 where it has none.
type chainAt struct{ prev, seq int }

// appendAnnotations appends m merged with extra (key, value pairs whose
// keys replace m's) as one JSON object, keys sorted, and notes in chain
// where the chain annotations' empty values are.
func appendAnnotations(b []byte, m map[string]string, extra []string, chain *chainAt) []byte {
	var buf [16]string
	keys := buf[:0]
	for i := 0; i+1 < len(extra); i += 2 {
		keys = append(keys, extra[i])
	}
	for k := range m {
		if !slices.Contains(keys[:len(extra)/2], k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		b = appendKey(b, i == 0, k)
		v, ok := lookup(extra, k)
		if !ok {
			v = m[k]
		}
		b = jsonenc.AppendString(b, v)
		if v == "" {
			switch k {
			case PrevHashAnnotation:
				chain.prev = len(b) - 1
			case SeqAnnotation:
				chain.seq = len(b) - 1
			}
		}
	}
	return append(b, '}')
}

// appendKey appends an object member's key and colon, after a comma
// unless it is the first member.
func appendKey(b []byte, first bool, k string) []byte {
	if !first {
		b = append(b, ',')
	}
	b = jsonenc.AppendString(b, k)
	return append(b, ':')
}

// lookup returns the value of key in kv (key, value pairs).
func lookup(kv []string, key string) (string, bool) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return kv[i+1], true
		}
	}
	return "", false
}

// appendMicroTime appends t as metav1.MicroTime encodes itself, in UTC
// with microseconds (RFC3339Micro), written digit by digit: the layout
// interpreter of time.Format was a tenth of a record's encoding.
func appendMicroTime(b []byte, t metav1.MicroTime) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	u := t.UTC()
	year, month, day := u.Date()
	hour, minute, sec := u.Clock()
	if year < 0 || year > 9999 {
		b = append(b, '"')
		b = u.AppendFormat(b, metav1.RFC3339Micro)
		return append(b, '"')
	}
	b = append(b, '"')
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, u.Nanosecond()/1000, 6)
	return append(b, 'Z', '"')
}

// appendDigits appends n, non-negative, as width digits, zero-padded.
func appendDigits(b []byte, n, width int) []byte {
	var d [8]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[:width]...)
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
	b = jsonenc.AppendString(b, name)
	b = append(b, ':')
	return jsonenc.AppendString(b, value)
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
		b = jsonenc.AppendString(b, s)
	}
	return append(b, ']')
}

// appendValue appends a JSON value as decoded into any (or as the change
// package returns them); other types go through encoding/json.
func appendValue(b []byte, v any) []byte {
	if out, ok := jsonenc.Append(b, v); ok {
		return out
	}
	return appendMarshal(b, v)
}

// appendPatch appends ops as a JSON Patch.
func appendPatch(b []byte, ops []change.Operation) []byte {
	b = append(b, '[')
	for i, op := range ops {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"op":`...)
		b = jsonenc.AppendString(b, string(op.Op))
		if op.From != "" {
			b = append(b, `,"from":`...)
			b = jsonenc.AppendString(b, op.From)
		}
		b = append(b, `,"path":`...)
		b = jsonenc.AppendString(b, op.Path)
		if op.Op == change.OpAdd || op.Op == change.OpReplace {
			b = append(b, `,"value":`...)
			b = appendValue(b, op.Value)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
