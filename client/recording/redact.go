package recording

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Redacted replaces redacted values.
const Redacted = "REDACTED"

// path is a parsed field path: its segments, "*" matching anything.
type path []string

// parsePaths parses JSON Pointers ("/a/b~1c") and dotted paths ("a.b").
func parsePaths(specs []string) ([]path, error) {
	var out []path
	for _, s := range specs {
		p, err := parsePath(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePath(s string) (path, error) {
	switch {
	case s == "" || s == "/":
		return nil, fmt.Errorf("redact path %q names the whole object", s)
	case strings.HasPrefix(s, "/"):
		segs := strings.Split(s[1:], "/")
		for i, seg := range segs {
			if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(seg, "~0", ""), "~1", ""), "~") {
				return nil, fmt.Errorf("redact path %q: bad escape in %q (JSON Pointer: ~0 is ~, ~1 is /)", s, seg)
			}
			segs[i] = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		}
		return segs, nil
	default:
		segs := strings.Split(s, ".")
		for _, seg := range segs {
			if seg == "" {
				return nil, fmt.Errorf("redact path %q has an empty segment", s)
			}
		}
		return segs, nil
	}
}

// redact returns data with the values at paths redacted.
func redact(data []byte, paths []path) (json.RawMessage, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // large integers stay exact
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("recording: redacting: %w", err)
	}
	for _, p := range paths {
		v = redactAt(v, p)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("recording: redacting: %w", err)
	}
	return out, nil
}

// redactAt redacts what p names in v and returns v.
func redactAt(v any, p path) any {
	if len(p) == 0 {
		return redactAll(v)
	}
	seg, rest := p[0], p[1:]
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if seg == "*" || seg == k {
				x[k] = redactAt(child, rest)
			}
		}
	case []any:
		for i, child := range x {
			if seg == "*" || seg == strconv.Itoa(i) {
				x[i] = redactAt(child, rest)
			}
		}
	}
	return v
}

// redactAll replaces every string in v, keeping its shape.
func redactAll(v any) any {
	switch x := v.(type) {
	case string:
		return Redacted
	case map[string]any:
		for k, child := range x {
			x[k] = redactAll(child)
		}
	case []any:
		for i, child := range x {
			x[i] = redactAll(child)
		}
	}
	return v
}
