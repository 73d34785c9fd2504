package explain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/change"
)

// AuthoredChange: the write of user changed the values at and under path
// (user is empty when the write's author is unknown).
type AuthoredChange struct {
	Path change.Path
	User string
}

// HistoryAuthors lists, oldest first, the paths each stored revision
// of the current object changed with the user who wrote it (none for a
// nil history). A complete
// history's first revision changed everything; an incomplete one's first
// is not a change.
func HistoryAuthors(h *ObjectHistory) []AuthoredChange {
	if h == nil {
		return nil
	}
	// The current object is the one created after the last deletion of
	// the name (a history store keeps the earlier ones too).
	items, complete := h.Items, h.Complete
	for i, it := range h.Items {
		if it.Deleted {
			items, complete = h.Items[i+1:], true
		}
	}
	var out []AuthoredChange
	var prev map[string]any
	for i, it := range items {
		user := ""
		if it.Author != nil {
			user = it.Author.Name()
		}
		switch {
		case i == 0 && complete:
			out = append(out, AuthoredChange{Path: change.Path{}, User: user})
		case i > 0:
			for _, c := range change.Between(change.WithoutNoise(prev), change.WithoutNoise(it.Object)).Changes() {
				if c.Op != change.OpRemove {
					out = append(out, AuthoredChange{Path: c.Path, User: user})
				}
			}
		}
		prev = it.Object
	}
	return out
}

// Line is one line of the YAML with its annotation.
type Line struct {
	// Note is the annotation the command line prints: "alice via
	// kubectl-edit (Update 2m ago)"; empty when no manager owns the line.
	Note string `json:"note"`
	// Text is the line of YAML.
	Text string `json:"text"`
	// User, Manager, Operation (with its subresource) and Time are the
	// note's parts.
	User      string     `json:"user,omitempty"`
	Manager   string     `json:"manager,omitempty"`
	Operation string     `json:"operation,omitempty"`
	Time      *time.Time `json:"time,omitempty"`
}

// manager is one entry of metadata.managedFields with its decoded fields.
type manager struct {
	name, operation, subresource string
	time                         time.Time
	fields                       *fieldpath.Set
}

// blamer renders an object as YAML lines, keeping for each line the
// managers' field sets at its level.
type blamer struct {
	managers []manager
	authors  []AuthoredChange
	now      time.Time
	lines    []Line
}

// Blame renders obj (as JSON decodes it, numbers as int64 or float64)
// without its managedFields, each line annotated from the managedFields
// and from authors, the history's changes oldest first.
func Blame(obj map[string]any, authors []AuthoredChange, now time.Time) ([]Line, error) {
	b := &blamer{authors: authors, now: now}
	md, _ := obj["metadata"].(map[string]any)
	if mf, ok := md["managedFields"].([]any); ok {
		for i, e := range mf {
			m, err := decodeManager(e)
			if err != nil {
				return nil, fmt.Errorf("metadata.managedFields[%d]: %w", i, err)
			}
			b.managers = append(b.managers, m)
		}
	}
	own := make([]owned, len(b.managers))
	for i, m := range b.managers {
		own[i].set = m.fields
	}
	b.object(obj, own, change.Path{}, "", false)
	return b.lines, nil
}

func decodeManager(e any) (manager, error) {
	m, _ := e.(map[string]any)
	str := func(k string) string { s, _ := m[k].(string); return s }
	out := manager{name: str("manager"), operation: str("operation"), subresource: str("subresource"), fields: &fieldpath.Set{}}
	if t := str("time"); t != "" {
		ts, err := time.Parse(time.RFC3339, t)
		if err != nil {
			return out, fmt.Errorf("time: %w", err)
		}
		out.time = ts
	}
	if f, ok := m["fieldsV1"]; ok {
		raw, err := json.Marshal(f)
		if err != nil {
			return out, err
		}
		if err := out.fields.FromJSON(bytes.NewReader(raw)); err != nil {
			return out, fmt.Errorf("fieldsV1: %w", err)
		}
	}
	return out, nil
}

// object renders the members of m at indent; the first one after "- "
// when dash. own are the managers' claims on m, jp m's path as change
// names it.
func (b *blamer) object(m map[string]any, own []owned, jp change.Path, indent string, dash bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !(len(jp) == 1 && jp[0].Field == "metadata" && k == "managedFields") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for i, k := range keys {
		prefix := indent
		if dash && i == 0 {
			prefix = indent[:len(indent)-2] + "- "
		}
		key := k
		pe := fieldpath.PathElement{FieldName: &key}
		b.value(m[k], descend(own, func(*fieldpath.Set) (fieldpath.PathElement, bool) { return pe, true }),
			append(slices.Clip(jp), change.Segment{Field: k}), prefix+ScalarYAML(k)+":", indent+"  ", true)
	}
}

// descend returns each manager's claim on the child of a value that elem
// picks in the manager's set of the value's children, given its claim on
// the value: a manager owning a value it has no set of children of owns
// the value as a whole (an atomic map or list), children included.
func descend(parent []owned, elem func(*fieldpath.Set) (fieldpath.PathElement, bool)) []owned {
	out := make([]owned, len(parent))
	for i, p := range parent {
		s := p.set
		if s == nil {
			out[i].own = p.own
			continue
		}
		pe, ok := elem(s)
		if !ok {
			continue
		}
		out[i].own = s.Members.Has(pe)
		out[i].set, _ = s.Children.Get(pe)
	}
	return out
}

// owned is one manager's claim on a value: whether it owns the value
// itself, and its set of the value's children.
type owned struct {
	own bool
	set *fieldpath.Set
}

// value renders v, announced by head ("key:", or "- " with its indent);
// indent is the indent of v's own members. inMap: v is a member's value
// (its list items go at the member's indent, as kubectl prints them).
func (b *blamer) value(v any, own []owned, jp change.Path, head, indent string, inMap bool) {
	dash := strings.HasSuffix(head, "- ")
	switch x := v.(type) {
	case map[string]any:
		if len(x) > 0 {
			if !dash {
				b.add(head, own, jp)
			}
			b.object(x, own, jp, indent, dash)
			return
		}
	case []any:
		if len(x) > 0 {
			items := indent
			if inMap {
				items = indent[:len(indent)-2]
			}
			b.add(strings.TrimSuffix(head, " "), own, jp)
			b.list(x, own, jp, items)
			return
		}
	}
	s := strings.Split(ScalarYAML(v), "\n")
	if !dash {
		head += " "
	}
	b.add(head+s[0], own, jp)
	for _, l := range s[1:] {
		b.add(indent[:len(indent)-2]+l, own, jp)
	}
}

// list renders the items of l at indent.
func (b *blamer) list(l []any, own []owned, jp change.Path, indent string) {
	key := mergeKey(l)
	for i, item := range l {
		seg := change.Segment{Item: true, Index: i}
		if key != "" {
			seg.MergeKey, seg.MergeValue = key, item.(map[string]any)[key].(string)
		}
		claims := descend(own, func(s *fieldpath.Set) (fieldpath.PathElement, bool) { return itemElement(s, item, i) })
		b.value(item, claims, append(slices.Clip(jp), seg), indent+"- ", indent+"  ", false)
	}
}

// itemElement finds the element naming item (the i-th of its list) among
// those of s: by its key fields (k:), its value (v:) or its index (i:).
func itemElement(s *fieldpath.Set, item any, i int) (fieldpath.PathElement, bool) {
	var found fieldpath.PathElement
	ok := false
	match := func(pe fieldpath.PathElement) {
		if ok {
			return
		}
		switch {
		case pe.Key != nil:
			m, isMap := item.(map[string]any)
			if !isMap {
				return
			}
			for _, f := range *pe.Key {
				v, has := m[f.Name]
				if !has || !value.Equals(value.NewValueInterface(v), f.Value) {
					return
				}
			}
		case pe.Value != nil:
			if !value.Equals(value.NewValueInterface(item), *pe.Value) {
				return
			}
		case pe.Index != nil:
			if *pe.Index != i {
				return
			}
		default:
			return
		}
		found, ok = pe, true
	}
	s.Members.Iterate(match)
	s.Children.Iterate(match)
	return found, ok
}

// mergeKey is the key change names l's items by (change.DefaultMergeKeys:
// the first every item has as a unique string), or "".
func mergeKey(l []any) string {
next:
	for _, key := range change.DefaultMergeKeys {
		seen := map[string]bool{}
		for _, item := range l {
			m, _ := item.(map[string]any)
			v, ok := m[key].(string)
			if !ok || seen[v] {
				continue next
			}
			seen[v] = true
		}
		return key
	}
	return ""
}

// add appends a line, annotated with the newest manager owning it and
// the user who last changed jp (lines no manager owns are not annotated).
func (b *blamer) add(text string, own []owned, jp change.Path) {
	var m *manager
	for i, o := range own {
		if o.own && (m == nil || b.managers[i].time.After(m.time)) {
			m = &b.managers[i]
		}
	}
	user := ""
	for _, a := range b.authors {
		if covers(a.Path, jp) {
			user = a.User
		}
	}
	var note string
	l := Line{Text: text}
	if m != nil {
		op := m.operation
		if m.subresource != "" {
			op += " " + m.subresource
		}
		when := ""
		if !m.time.IsZero() {
			when = " " + duration.HumanDuration(b.now.Sub(m.time)) + " ago"
		}
		note = fmt.Sprintf("%s (%s%s)", m.name, op, when)
		if user != "" {
			note = user + " via " + note
		}
		l.Note, l.User, l.Manager, l.Operation = note, user, m.name, op
		if !m.time.IsZero() {
			t := m.time
			l.Time = &t
		}
	}
	b.lines = append(b.lines, l)
}

// covers: a change at c changed the value at p (p is c or under it).
func covers(c, p change.Path) bool {
	if len(c) > len(p) {
		return false
	}
	for i, s := range c {
		q := p[i]
		switch {
		case s.Item != q.Item:
			return false
		case !s.Item:
			if s.Field != q.Field {
				return false
			}
		case s.MergeKey != "" && q.MergeKey != "":
			if s.MergeKey != q.MergeKey || s.MergeValue != q.MergeValue {
				return false
			}
		case s.Index != q.Index:
			return false
		}
	}
	return true
}

// ScalarYAML is v as YAML, without the final newline.
func ScalarYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(string(b), "\n")
}
