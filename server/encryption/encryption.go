// Package encryption is objwatch's encryption at rest: kube-apiserver's
// --encryption-provider-config, an apiserver.config.k8s.io/v1
// EncryptionConfiguration file, read by Kubernetes' own code
// (k8s.io/apiserver/pkg/server/options/encryptionconfig) and applied by
// the storage layer (storage/etcd) to every value it writes and reads.
//
// # What is encrypted
//
// Each resources[] entry lists resources ("secrets", "widgets.example.com",
// "*.example.com", "*.*") and providers (aesgcm, aescbc, secretbox,
// identity): the first provider encrypts new writes, every provider is
// tried to read, as in Kubernetes. A stored key names its resource:
// /registry/<group>/<resource>/... (group "core" for the core group), so
// a custom resource is matched by its CRD's group and plural, and objects
// stored as another resource's (events.k8s.io Events are core Events) by
// the resource they are stored as. Resources no entry lists, and every
// resource when there is no configuration, are read with Kubernetes'
// identity check: plaintext passes, an encrypted value is an error
// ("identity transformer tried to read encrypted data") rather than bytes
// decoded as JSON. objwatch's own bookkeeping under /registry/ (the audit
// chain's checkpoints, the servers' shared service-account public keys,
// the cluster IP claims) is not an API resource and is never transformed,
// so `objwatch audit verify` reads its checkpoints without the keys.
//
// # Keys and rotation
//
// Values carry Kubernetes' prefixes (k8s:enc:aesgcm:v1:<key name>:...) and
// are authenticated with their etcd key. Rotation is Kubernetes': put the
// new key first and restart every server (they must all have the same
// configuration), rewrite every object (an update, or `kubectl get secrets
// -A -o json | kubectl replace -f -`: a value read with another than the
// first key is stale, so even an update that changes nothing writes it),
// then remove the old key. A value whose key the server does not have is
// an internal error naming the etcd key, never its bytes.
//
// KMS providers are refused: objwatch runs no KMS plugin connections or
// health checks, and does not reload the file (restart to change it).
//
// # Concurrency
//
// Transformers are safe for concurrent use.
package encryption

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// Transformers choose the transformer of each stored key (For).
type Transformers struct {
	// resources is nil without a configuration.
	resources value.ResourceTransformers

	mu sync.RWMutex
	// byResource caches resources' transformers by "group/resource" as
	// the key spells it.
	byResource map[string]value.Transformer
}

// None is the Transformers of a server without a configuration: nothing
// is encrypted, and encrypted values fail to read.
func None() *Transformers { return &Transformers{} }

// Load reads the EncryptionConfiguration at path with Kubernetes' decoding
// and validation (kube-apiserver's errors for a bad file) and builds its
// transformers.
func Load(path string) (*Transformers, error) {
	if err := refuseKMS(path); err != nil {
		return nil, err
	}
	// Only KMS providers start goroutines (bound to ctx); none is left
	// running once Load returns.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "")
	if err != nil {
		return nil, fmt.Errorf("encryption provider config: %w", err)
	}
	if len(cfg.HealthChecks) > 0 {
		return nil, fmt.Errorf("encryption provider config %s: %w", path, errKMS)
	}
	return &Transformers{
		resources:  encryptionconfig.StaticTransformers(cfg.Transformers),
		byResource: map[string]value.Transformer{},
	}, nil
}

var errKMS = fmt.Errorf("kms providers are not supported by objwatch; use aesgcm, aescbc, secretbox or identity")

// configCodecs decode the file as encryptionconfig does, to look for KMS
// providers before it connects to any.
var configCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	utilruntime.Must(apiserver.AddToScheme(scheme))
	utilruntime.Must(apiserverv1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict)
}()

// refuseKMS fails if the file at path configures a KMS provider. A file
// it cannot read or decode is left to LoadEncryptionConfig to report.
func refuseKMS(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	obj, _, err := configCodecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil
	}
	cfg, ok := obj.(*apiserver.EncryptionConfiguration)
	if !ok {
		return nil
	}
	for i, r := range cfg.Resources {
		for j, p := range r.Providers {
			if p.KMS != nil {
				return fmt.Errorf("encryption provider config %s: resources[%d].providers[%d]: %w", path, i, j, errKMS)
			}
		}
	}
	return nil
}

// For returns the transformer of key's value: nil for keys that are not
// an API resource's (kept as they are), the configured one for a resource
// the configuration lists, Kubernetes' identity check otherwise.
func (t *Transformers) For(key string) value.Transformer {
	gr, name, ok := resourceOfKey(key)
	switch {
	case !ok:
		return nil
	case t.resources == nil:
		return identity.NewEncryptCheckTransformer()
	}
	t.mu.RLock()
	tr := t.byResource[name]
	t.mu.RUnlock()
	if tr != nil {
		return tr
	}
	tr = t.resources.TransformerForResource(gr)
	t.mu.Lock()
	t.byResource[name] = tr
	t.mu.Unlock()
	return tr
}

// bookkeeping are the group/resource parts of the keys objwatch keeps
// under registry.Root for itself, which are no API resource's: the audit
// chain's checkpoints (server/audit), the shared service-account public
// keys and the cluster IP claims (server/lifecycle).
var bookkeeping = map[string]bool{
	"objwatch.io/audit":              true,
	"objwatch.io/serviceaccountkeys": true,
	"ranges/serviceips":              true,
}

// resourceOfKey returns the resource whose objects key belongs to, as
// registry.StoragePrefix lays keys out (registry.Root + group + "/" +
// plural + "/", group "core" for the core group), and the key's
// "group/resource" part; false for keys of no resource.
func resourceOfKey(key string) (gr schema.GroupResource, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, registry.Root)
	if !ok {
		return gr, "", false
	}
	group, rest, ok := strings.Cut(rest, "/")
	if !ok || group == "" {
		return gr, "", false
	}
	resource, _, ok := strings.Cut(rest, "/")
	if !ok || resource == "" {
		return gr, "", false
	}
	name = key[len(registry.Root) : len(registry.Root)+len(group)+1+len(resource)]
	if bookkeeping[name] {
		return gr, "", false
	}
	if group == "core" {
		group = ""
	}
	return schema.GroupResource{Group: group, Resource: resource}, name, true
}

// Store returns store keeping values at rest as the EncryptionConfiguration
// at path says (path empty: nothing encrypted, encrypted values fail to
// read). A store that cannot transform values is returned as it is
// without a configuration, and refused with one.
func Store(store storage.Interface, path string) (storage.Interface, error) {
	t := None()
	if path != "" {
		var err error
		if t, err = Load(path); err != nil {
			return nil, err
		}
	}
	ts, ok := store.(storage.Transforming)
	switch {
	case ok:
		return ts.WithTransformers(t.For), nil
	case path != "":
		return nil, fmt.Errorf("encryption provider config: storage %T cannot keep values encrypted at rest", store)
	}
	return store, nil
}
