package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Scenarios are the scenario names Run accepts, in the order it runs
// them. "informer" is not among them: it compares client libraries, not
// servers, and has its own report (Informer).
var Scenarios = []string{"writes", "memory", "list", "configmaps", "fanout", "idle", "deltas"}

// Plan says which scenarios Run runs.
type Plan struct {
	Scenarios []string
	// IdleWatchers is the idle scenario's watch count (it replaces
	// Options.Watchers there).
	IdleWatchers int
}

// Validate reports an unknown scenario name.
func (p Plan) Validate() error {
	for _, s := range p.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("unknown scenario %q (want %v)", s, Scenarios)
		}
	}
	return nil
}

// Run runs the plan's server scenarios against t, in the order of
// Scenarios: it creates the benchmark CRD, samples memory before the
// objects exist (for the memory scenario), runs each scenario and
// deletes the CRD. On an error it returns the results so far with it.
func Run(ctx context.Context, t *Target, o *Options, p Plan) ([]Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.Scenarios) == 0 {
		return nil, nil
	}
	if err := Setup(ctx, t, o); err != nil {
		return nil, err
	}
	defer Cleanup(context.WithoutCancel(ctx), t)
	mem0, err := SampleMemory(ctx, t)
	if err != nil {
		return nil, err
	}
	steps := map[string]func() ([]Result, error){
		"writes": func() ([]Result, error) { return Writes(ctx, t, o) },
		"memory": func() ([]Result, error) { return Memory(ctx, t, o, mem0) },
		"list":   func() ([]Result, error) { return Lists(ctx, t, o) },
		"configmaps": func() ([]Result, error) {
			return ConfigMapLists(ctx, t, o)
		},
		"fanout": func() ([]Result, error) { return Fanout(ctx, t, o) },
		"deltas": func() ([]Result, error) { return Deltas(ctx, t, o) },
		"idle": func() ([]Result, error) {
			idle := *o
			idle.Watchers = p.IdleWatchers
			return IdleWatches(ctx, t, &idle)
		},
	}
	var results []Result
	for _, s := range Scenarios {
		if !slices.Contains(p.Scenarios, s) {
			continue
		}
		r, err := steps[s]()
		results = append(results, r...)
		if err != nil {
			return results, fmt.Errorf("%s %s: %w", t.Name, s, err)
		}
	}
	return results, nil
}

// errNoScenario is returned by AB when it would measure nothing.
var errNoScenario = errors.New("no scenario to run")
