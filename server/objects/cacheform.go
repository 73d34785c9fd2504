package objects

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/objwatch/objwatch/storage/watchcache/cachefile"
)

// CachedForm is the version of the form objwatch's own code gives a
// stored value in the watch cache (watchcache.Object: key, namespace,
// name, labels, fields, revision, wire JSON): decodeForCache and what it
// calls — jsonenc's decoding, the resources' Strategy.Stored (the
// events.k8s.io view of core events, a custom resource's pruning and
// defaulting), conversion between versions, FieldLabels, asStored's
// splice and cacheObject's encoding. Bump it with any change to that code
// that could give another Object for the same stored value and resource:
// a saved state (the WatchCacheSnapshots directory) is used by a binary
// only if its fingerprint (savedState) holds the same CachedForm, so an
// unbumped change would serve the old form until the cache next lists.
// TestCachedFormGolden fails until it is bumped.
const CachedForm = 1

// cachedDecodeModules are the modules, besides this one, whose code
// shapes the cached form; their versions are part of the fingerprint
// (cachefile.Decoding, with the Go release for encoding/json):
//
//   - k8s.io/apimachinery: unstructured's accessors (namespace, name,
//     labels), util/json (the decoding of what jsonenc leaves to it),
//     fields and labels, the unstructured converter to Go types
//   - k8s.io/api: the Go types a built-in kind's field labels and
//     conversions go through
//   - k8s.io/kubernetes: the built-in kinds' GetAttrs (field labels),
//     defaults and conversions (HorizontalPodAutoscaler v1 from v2)
//   - k8s.io/apiextensions-apiserver: a custom resource's metadata
//     coercion, pruning, structural defaulting and selectable fields
//   - k8s.io/apiserver: the generic field sets the GetAttrs functions use
//   - k8s.io/client-go: util/jsonpath, the values of a CRD's selectable
//     fields
//   - sigs.k8s.io/json: what util/json decodes with
//   - sigs.k8s.io/structured-merge-diff/v6: not called by the decoding
//     (managedFields pass through as stored), named because the modules
//     above build on it and a version of it comes only with theirs
//   - gopkg.in/inf.v0: resource.Quantity's decimals, which a conversion
//     through Go types formats
var cachedDecodeModules = []string{
	"k8s.io/apimachinery",
	"k8s.io/api",
	"k8s.io/kubernetes",
	"k8s.io/apiextensions-apiserver",
	"k8s.io/apiserver",
	"k8s.io/client-go",
	"sigs.k8s.io/json",
	"sigs.k8s.io/structured-merge-diff/v6",
	"gopkg.in/inf.v0",
}

// decodeModules is cachefile.Decoding of cachedDecodeModules, computed
// once.
var decodeModules = sync.OnceValue(func() string { return cachefile.Decoding(cachedDecodeModules...) })

// cachedForm is CachedForm, but for tests of a binary whose decoding
// changed (SetCachedForm).
var cachedForm atomic.Int64

func init() { cachedForm.Store(CachedForm) }

// decodingID is the part of every saved state's fingerprint that names
// the decoding: CachedForm and decodeModules. Safe for concurrent use.
func decodingID() string {
	return fmt.Sprintf("form %d %s", cachedForm.Load(), decodeModules())
}
