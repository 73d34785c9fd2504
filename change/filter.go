package change

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Filter selects the changes to chosen fields. A nil *Filter selects every
// change. A Filter is immutable and safe for concurrent use.
type Filter struct {
	patterns []Pattern
}

// NewFilter returns a filter for the fields the patterns name (see Pattern
// for the syntax and what matches).
func NewFilter(patterns ...string) (*Filter, error) {
	if len(patterns) == 0 {
		return nil, errors.New("filter: no patterns")
	}
	f := &Filter{}
	for _, s := range patterns {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("filter: %w", err)
		}
		f.patterns = append(f.patterns, p)
	}
	return f, nil
}

// MustFilter is NewFilter for patterns known to be valid; it panics on an
// error.
func MustFilter(patterns ...string) *Filter {
	f, err := NewFilter(patterns...)
	if err != nil {
		panic(err)
	}
	return f
}

// Match reports whether any change of d is to a field the filter names.
// A diff that could not be computed matches: when in doubt, deliver.
func (f *Filter) Match(d *Diff) bool {
	if f == nil || d.Err() != nil {
		return !d.Empty()
	}
	for _, c := range d.Changes() {
		if f.matchChange(c) {
			return true
		}
	}
	return false
}

// Changes returns the changes of d to fields the filter names.
func (f *Filter) Changes(d *Diff) []Change {
	if f == nil {
		return d.Changes()
	}
	var out []Change
	for _, c := range d.Changes() {
		if f.matchChange(c) {
			out = append(out, c)
		}
	}
	return out
}

// Changed reports whether a field the filter names differs between old
// and new. It is a Predicate.
func (f *Filter) Changed(old, new any) bool { return f.Match(exact.Between(old, new)) }

func (f *Filter) matchChange(c Change) bool {
	for _, p := range f.patterns {
		if p.Match(c) {
			return true
		}
	}
	return false
}

// Categories names the kinds of change a diff contains, from a mapping of
// field patterns to category names: {"spec.replicas": "scaling",
// "spec.template.spec.containers[*].image": "rollout"}, everything else
// the default category. Categories is immutable and safe for concurrent
// use.
//
// Each change counts for the category of the most specific pattern at or
// above its path (longest, then fewest wildcards; equally specific
// patterns all count). A change above the patterned fields (a container
// added, a whole spec replaced) counts for the category of every pattern
// below it whose field it changes, and for the default category, since it
// may change other fields too.
type Categories struct {
	rules []rule
	def   string
}

type rule struct {
	p    Pattern
	name string
}

// NewCategories returns categories for the mapping of patterns to category
// names; changes to other fields are in category def.
func NewCategories(def string, fields map[string]string) (*Categories, error) {
	c := &Categories{def: def}
	for s, name := range fields {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("categories: %w", err)
		}
		c.rules = append(c.rules, rule{p: p, name: name})
	}
	// Most specific first, so the first match at or above a path wins.
	slices.SortFunc(c.rules, func(a, b rule) int {
		if d := b.p.specificity() - a.p.specificity(); d != 0 {
			return d
		}
		return strings.Compare(a.p.text, b.p.text)
	})
	return c, nil
}

// Of returns the categories the changes of d touch, sorted, without
// duplicates. A diff that could not be computed touches the default
// category.
func (c *Categories) Of(d *Diff) []string {
	if d.Err() != nil {
		return []string{c.def}
	}
	var out []string
	add := func(name string) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, ch := range d.Changes() {
		for _, name := range c.of(ch) {
			add(name)
		}
	}
	slices.Sort(out)
	return out
}

// OfChange returns the categories of one change.
func (c *Categories) OfChange(ch Change) []string { return c.of(ch) }

func (c *Categories) of(ch Change) []string {
	var out []string
	best := -1 // specificity of the pattern at or above ch that counts
	for _, r := range c.rules {
		if !r.p.Match(ch) {
			continue
		}
		if len(r.p.segs) <= len(ch.Path) {
			if best >= 0 && r.p.specificity() < best {
				continue
			}
			best = r.p.specificity()
		}
		if !slices.Contains(out, r.name) {
			out = append(out, r.name)
		}
	}
	if best < 0 && !slices.Contains(out, c.def) {
		out = append(out, c.def)
	}
	return out
}
