package objects

import (
	"bytes"
	"strconv"

	"github.com/objwatch/objwatch/server/jsonenc"
)

// withResourceVersion returns the JSON object stored (as toStorage encodes
// it: sorted keys, no resourceVersion) with metadata.resourceVersion set to
// rev, byte for byte what encoding the object with its resourceVersion
// gives: the field goes in at its sorted place in metadata. It returns nil
// when stored is not such an object (the caller then encodes the object).
func withResourceVersion(stored []byte, rev int64) []byte {
	md, ok := topLevelValue(stored, "metadata")
	if !ok || md >= len(stored) || stored[md] != '{' {
		return nil
	}
	// Find the first metadata key after "resourceVersion".
	at := -1 // where the field goes
	i := skipSpace(stored, md+1)
	if i < len(stored) && stored[i] == '}' {
		at = i
	}
	for at < 0 {
		key, end, ok := jsonenc.ReadKey(stored, i)
		if !ok {
			return nil
		}
		switch c := bytes.Compare(key, []byte("resourceVersion")); {
		case c == 0:
			return nil // already there
		case c > 0:
			at = i
			continue
		}
		i = skipSpace(stored, end)
		if i >= len(stored) || stored[i] != ':' {
			return nil
		}
		if i, ok = jsonenc.SkipValue(stored, skipSpace(stored, i+1)); !ok {
			return nil
		}
		i = skipSpace(stored, i)
		switch {
		case i < len(stored) && stored[i] == ',':
			i = skipSpace(stored, i+1)
		case i < len(stored) && stored[i] == '}':
			at = i
		default:
			return nil
		}
	}
	field := `"resourceVersion":"` + strconv.FormatInt(rev, 10) + `"`
	out := make([]byte, 0, len(stored)+len(field)+1)
	out = append(out, stored[:at]...)
	out = append(out, field...)
	switch {
	case stored[at] == '}' && stored[skipBack(stored, at-1)] != '{':
		// After the last field: the comma goes before ours.
		out = append(out[:at], ',')
		out = append(out, field...)
	case stored[at] != '}':
		out = append(out, ',')
	}
	return append(out, stored[at:]...)
}

// topLevelValue returns where the value of key starts in the JSON object b.
func topLevelValue(b []byte, key string) (int, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != '}' {
		k, end, ok := jsonenc.ReadKey(b, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		if string(k) == key {
			return i, true
		}
		if i, ok = jsonenc.SkipValue(b, i); !ok {
			return 0, false
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipBack returns the index of the last non-space byte at or before i.
func skipBack(b []byte, i int) int {
	for i > 0 && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i--
	}
	return i
}
