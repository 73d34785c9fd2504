package watchcache

import (
	"sort"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// labelIndex maps label key → value → the objects carrying it, so a list
// with an equality label selector touches only the candidates instead of
// every cached object (a selector matching nothing costs nothing). It is
// guarded by Cache.mu.
type labelIndex map[string]map[string]map[*Object]struct{}

func (ix labelIndex) add(o *Object) {
	for k, v := range o.Labels {
		vals := ix[k]
		if vals == nil {
			vals = map[string]map[*Object]struct{}{}
			ix[k] = vals
		}
		set := vals[v]
		if set == nil {
			set = map[*Object]struct{}{}
			vals[v] = set
		}
		set[o] = struct{}{}
	}
}

func (ix labelIndex) remove(o *Object) {
	for k, v := range o.Labels {
		set := ix[k][v]
		delete(set, o)
		if len(set) == 0 {
			delete(ix[k], v)
			if len(ix[k]) == 0 {
				delete(ix, k)
			}
		}
	}
}

// candidates returns, for a selector with at least one equality or set
// requirement, the objects that satisfy the most selective of them, sorted
// by key; ok is false when the index cannot narrow the selector.
func (ix labelIndex) candidates(sel labels.Selector) (objs []*Object, ok bool) {
	if sel == nil || sel.Empty() {
		return nil, false
	}
	reqs, selectable := sel.Requirements()
	if !selectable {
		return nil, false
	}
	best := -1
	var bestSets []map[*Object]struct{}
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
		default:
			continue
		}
		n := 0
		var sets []map[*Object]struct{}
		for _, v := range r.ValuesUnsorted() {
			if set := ix[r.Key()][v]; len(set) > 0 {
				sets = append(sets, set)
				n += len(set)
			}
		}
		if best < 0 || n < best {
			best, bestSets = n, sets
		}
	}
	if best < 0 {
		return nil, false
	}
	objs = make([]*Object, 0, best)
	for _, set := range bestSets {
		for o := range set {
			objs = append(objs, o)
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	return objs, true
}
