package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/objwatch/objwatch/client"
)

// ParseMoment reads a moment: an RFC 3339 time, or a duration ago (2h,
// 90m, 3d; Go's units plus d for days).
func ParseMoment(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		var n float64
		if n, err = strconv.ParseFloat(days, 64); err == nil {
			d = time.Duration(n * float64(24*time.Hour))
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-12-04T09:30:00Z) or a duration ago (2h, 90m, 3d)", s)
	}
	return now.Add(-d), nil
}

// RequireHistory fails plainly when the server keeps no history store
// (not objwatch, or objwatch serve --history=false): it would answer the
// present instead of the past asked for, or nothing.
func RequireHistory(ctx context.Context, rc *client.REST, what string) error {
	b, err := rc.Raw(ctx, "/version")
	if err != nil {
		return fmt.Errorf("%s: reading the server's version: %w", what, err)
	}
	var v map[string]string
	if err := json.Unmarshal(b, &v); err != nil || v["history"] == "" {
		return fmt.Errorf("%s: this server keeps no history store (it is not objwatch, or runs with --history=false), so it cannot show the past; objwatch history shows what etcd itself still has", what)
	}
	return nil
}

// ChangeList is a page of an objwatch server's answer to GET
// /apis/objwatch.io/v1/changes (server/endpoints.ChangeList).
type ChangeList struct {
	FromResourceVersion string       `json:"fromResourceVersion"`
	ToResourceVersion   string       `json:"toResourceVersion"`
	Continue            string       `json:"continue"`
	HistoryStartsLater  bool         `json:"historyStartsLater"`
	Items               []ChangeItem `json:"items"`
}

// ChangeItem is one change of a ChangeList: created (ADDED), changed
// (MODIFIED, with its RFC 6902 patch) or deleted (DELETED).
type ChangeItem struct {
	Type            string          `json:"type"`
	Group           string          `json:"group"`
	Resource        string          `json:"resource"`
	Namespace       string          `json:"namespace"`
	Name            string          `json:"name"`
	ResourceVersion string          `json:"resourceVersion"`
	Time            time.Time       `json:"time"`
	Author          *Author         `json:"author"`
	InGap           bool            `json:"inGap"`
	Patch           json.RawMessage `json:"patch"`
}

// PatchLines renders a change's JSON patch as one line per operation.
func PatchLines(patch json.RawMessage) []string {
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if json.Unmarshal(patch, &ops) != nil {
		return nil
	}
	var out []string
	for _, op := range ops {
		path := strings.ReplaceAll(strings.TrimPrefix(op.Path, "/"), "/", ".")
		if strings.HasPrefix(path, "metadata.managedFields") || path == "metadata.resourceVersion" {
			continue
		}
		switch op.Op {
		case "remove":
			out = append(out, "    - "+path)
		default:
			v, _ := json.Marshal(op.Value)
			sign := "~"
			if op.Op == "add" {
				sign = "+"
			}
			out = append(out, fmt.Sprintf("    %s %s: %s", sign, path, v))
		}
	}
	return out
}
