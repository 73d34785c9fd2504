package change_test

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/objwatch/objwatch/change"
)

func ExampleBetween() {
	old, new := deployment(), deployment()
	new.Spec.Template.Spec.Containers[0].Image = "nginx:1.28"
	new.Labels["tier"] = "edge"

	d := change.Between(old, new)
	for _, c := range d.Changes() {
		fmt.Printf("%s: %v -> %v\n", c.Path, c.Old, c.New)
	}
	patch, _ := json.Marshal(d.Patch())
	fmt.Println(string(patch))
	// Output:
	// metadata.labels.tier: frontend -> edge
	// spec.template.spec.containers[name=web].image: nginx:1.27 -> nginx:1.28
	// [{"op":"replace","path":"/metadata/labels/tier","value":"edge"},{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"nginx:1.28"}]
}

func ExampleFilter() {
	images := change.MustFilter("spec.template.spec.containers[*].image")
	old, new := deployment(), deployment()
	*new.Spec.Replicas = 10
	fmt.Println(images.Match(change.Between(old, new)))
	new.Spec.Template.Spec.Containers[1].Image = "envoy:1.31"
	for _, c := range images.Changes(change.Between(old, new)) {
		fmt.Println(c.Path, c.New)
	}
	// Output:
	// false
	// spec.template.spec.containers[name=proxy].image envoy:1.31
}

func ExampleCategories() {
	cats, err := change.NewCategories("other", map[string]string{
		"spec.replicas":                          "scaling",
		"spec.template.spec.containers[*].image": "rollout",
		"metadata.labels.*":                      "labels",
	})
	if err != nil {
		panic(err)
	}
	old, new := deployment(), deployment()
	*new.Spec.Replicas = 10
	new.Spec.Template.Spec.Containers[0].Image = "nginx:1.28"
	new.Spec.Paused = true
	fmt.Println(cats.Of(change.Between(old, new)))
	// Output: [other rollout scaling]
}

// A handler that reacts only to new content in the fields it cares about,
// as an informer's update callback would call it.
func Example_handler() {
	dedup, err := change.NewDedup[string](change.DedupOptions{})
	if err != nil {
		panic(err)
	}
	images := change.MustFilter("spec.template.spec.containers[*].image")
	key := func(d *appsv1.Deployment) string { return d.Namespace + "/" + d.Name }
	onUpdate := func(old, new *appsv1.Deployment) {
		if !dedup.Fresh(key(new), new) {
			fmt.Println("rv", new.ResourceVersion, "dropped: nothing new")
			return
		}
		d := change.Between(old, new)
		if !images.Match(d) {
			fmt.Println("rv", new.ResourceVersion, "skipped:", d.Paths())
			return
		}
		fmt.Println("rv", new.ResourceVersion, "rollout:", images.Changes(d)[0].New)
	}

	v1 := deployment()
	dedup.Fresh(key(v1), v1) // delivered as an add
	v2 := deployment()
	v2.ResourceVersion, v2.Generation = "5000", 4
	*v2.Spec.Replicas = 4
	v3 := v2.DeepCopy()
	v3.ResourceVersion, v3.Generation = "5001", 5
	v3.Spec.Template.Spec.Containers[0].Image = "nginx:1.28"
	v4 := v3.DeepCopy()
	v4.ResourceVersion = "5002" // a write that changed nothing but the version

	onUpdate(v1, v2)
	onUpdate(v2, v3)
	onUpdate(v3, v4)
	onUpdate(v4, v4) // a resync
	// Output:
	// rv 5000 skipped: [metadata.generation spec.replicas]
	// rv 5001 rollout: nginx:1.28
	// rv 5002 dropped: nothing new
	// rv 5002 dropped: nothing new
}

func ExampleStateSyncer() {
	type replicas struct{ Want int32 }
	objects := map[string]*appsv1.Deployment{"default/web": deployment()}
	s, err := change.NewStateSyncer(change.SyncerOptions[string, *appsv1.Deployment, replicas]{
		Source: change.SourceFuncs[string, *appsv1.Deployment]{
			ListFunc: func() []*appsv1.Deployment { return []*appsv1.Deployment{objects["default/web"]} },
			GetFunc: func(k string) (*appsv1.Deployment, bool) {
				d, ok := objects[k]
				return d, ok
			},
		},
		Key:    func(d *appsv1.Deployment) string { return d.Namespace + "/" + d.Name },
		Derive: func(d *appsv1.Deployment) (replicas, bool) { return replicas{Want: *d.Spec.Replicas}, true },
	})
	if err != nil {
		panic(err)
	}
	s.Resync()
	s.Set("default/web", replicas{Want: 1}) // local state goes astray
	for _, d := range s.Check() {
		c := d.Diff.Changes()[0]
		fmt.Println(d.Key, d.Kind, c.Path, c.Old, "->", c.New)
		s.Repair(d.Key)
	}
	fmt.Println(len(s.Check()), "drift after repair")
	// Output:
	// default/web changed Want 1 -> 3
	// 0 drift after repair
}
