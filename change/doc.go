// Package change explains, filters and deduplicates changes to objects:
// structured diffs, field filters and categories, composable predicates,
// content fingerprints, and two ways to keep state in step with changing
// values — Observable for plain Go values and StateSyncer for state
// derived from objects.
//
// Everything here is a plain function of objects, so it fits any
// informer's handlers (objwatch's, client-go's) or none:
//
//	Update: func(old, new *appsv1.Deployment) {
//		if !dedup.Fresh(key(new), new) {
//			return // a resync, a relist replay, a write that changed nothing
//		}
//		d := change.Between(old, new)
//		if !images.Match(d) { // images := change.MustFilter("spec.template.spec.containers[*].image")
//			return
//		}
//		for _, c := range images.Changes(d) {
//			log.Printf("%s: %v -> %v", c.Path, c.Old, c.New)
//		}
//	}
//
// Objects are Kubernetes objects (typed, such as *appsv1.Deployment, or
// *unstructured.Unstructured), maps as decoded from JSON, JSON text
// (json.RawMessage), or any value encoding/json can encode. They are
// compared as the JSON they encode to.
//
// # Diffs
//
// Between(old, new) returns a *Diff at the cost of one small allocation;
// nothing is compared until a handler asks for Changes, Paths or Patch,
// and then once, whoever asks. Changes lists each changed field with its
// old and new values: what a user changed, leaving out the Noise fields
// that every write changes (metadata.resourceVersion, and
// metadata.managedFields, whose time stamps move with each write). So for
// one `kubectl patch` of a ConfigMap's data.mode, Between(old,
// new).Changes() is that one change, for typed objects and maps alike.
// A Differ says otherwise: Exclude leaves out more fields ("status",
// "metadata.labels"), KeepNoise keeps the noise. Patch is an RFC 6902
// JSON Patch that turns old into new except for the fields left out
// (with KeepNoise, exactly; property-tested with evanphx/json-patch, the
// library Kubernetes applies patches with).
//
// Typed objects are read in place through the reflection cache that
// apimachinery's unstructured converter uses (structured-merge-diff's
// value package: JSON names, omitempty, inline structs, the conversions of
// quantities and times), so they diff exactly as their unstructured form
// would, without being converted: fields equal by == are skipped without
// being read as JSON, and only what changed is ever converted.
//
// # Paths
//
// A path names a field from the object's root: spec.replicas,
// metadata.labels.app, spec.args[2]. Members whose names are not plain
// (letters, digits, _ - / $ @) are quoted: metadata.labels["app.kubernetes.io/name"].
//
// List items are named by merge key where the list has one: a list whose
// items, in both the old and the new object, are all objects with a
// string "name", unique within the list, is keyed by name
// (spec.containers[name=web].image); else by "type" likewise
// (status.conditions[type=Ready].status); else items are named by index.
// Differ.MergeKeys changes the keys tried. Keyed lists are compared item
// by item by key, and an item that changed position is a move. Other lists
// are compared by position after skipping their common head and tail, so
// one insertion or removal is one change.
//
// # Filters and categories
//
// Patterns are paths with wildcards: * for any member
// (metadata.labels.*), [*] for any item (spec.containers[*].image). A
// Filter matches a diff when a change is at or below one of its patterns,
// or above one and changes what it names (adding a container with an image
// matches spec.containers[*].image; moving one does not). Categories maps
// patterns to names (spec.replicas → "scaling") and tells which categories
// a diff touched, everything else counting for a default category.
//
// # Predicates
//
// Predicates are functions of (old, new) composed with And, Or and Not:
// GenerationChanged, ResourceVersionChanged, LabelsChanged,
// AnnotationsChanged, FieldsChanged(patterns...) (one of these changed),
// OnlyFieldsChanged(patterns...) (these and nothing else),
// FieldsChangedExcept(patterns...) (anything but these: ignore label-only
// updates with FieldsChangedExcept("metadata.labels")), LabelsMatch(sel)
// (which objects of a resource a controller treats as its primaries),
// NeedsReconcile (a fresh resourceVersion whose metadata.generation is
// not yet status.observedGeneration), and for the object lifecycle DeletionStarted
// (the moment a finalizer's clean-up is due), FinalizersChanged and
// OwnerReferencesChanged (adopted, orphaned, or re-owned).
//
// # Fingerprints and deduplication
//
// A Fingerprinter hashes an object's content, leaving out fields that
// change without the content changing (Volatile(): resourceVersion,
// managedFields, creationTimestamp; configurable). A Dedup remembers the
// fingerprint last delivered per key, with bounded memory (LRU and TTL),
// and tells whether an event brings new content, counting what it drops.
// DedupHandler puts one in front of an objwatch informer handler, and
// CategoryHandler counts the categories of the updates a handler gets
// (objwatch_change_events_total).
//
// # Observable and StateSyncer
//
// Observable[T] gives a plain Go value the server's watch semantics:
// revisions, replay from a bounded history, ErrCompacted when a watcher
// asks for (or falls behind to) a revision no longer kept, and a diff with
// every change. StateSyncer[K, T, S] keeps local state derived from
// objects by a function, reports drift with diffs (comparing with
// equality.Semantic), repairs it, and checks everything periodically.
//
// # Concurrency
//
// Diff, Filter, Categories, Pattern and Fingerprinter are immutable once
// made (a Diff computes its results once, under a sync.Once) and safe for
// concurrent use. Dedup, Observable and StateSyncer are safe for
// concurrent use. Nothing in this package starts a goroutine: Observable's
// Watch and StateSyncer's Run run on the caller's goroutine until their
// context ends. Objects passed in are read, never modified, and must not
// be modified while a Diff of them is in use; values in changes and
// patches may share memory with them.
//
// # Dependencies
//
// Typed objects are read with sigs.k8s.io/structured-merge-diff/v6/value
// (apimachinery's own reflection cache); semantic equality is
// k8s.io/apimachinery's equality.Semantic; hashing is xxhash64
// (github.com/cespare/xxhash/v2); metrics use Prometheus client_golang;
// clocks are k8s.io/utils/clock. The diff itself is written here: general
// JSON diff libraries decode both objects into maps first (typed objects
// must be encoded and decoded), know nothing of merge keys, and produce no
// field paths; see the benchmarks in diff_bench_test.go.
//
// This package never imports objwatch's server or storage, etcd, or
// client-go (a test enforces it).
package change
