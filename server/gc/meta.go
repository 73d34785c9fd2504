package gc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Meta is the part of an object's metadata the collector reads.
type Meta struct {
	UID             types.UID               `json:"uid"`
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
	Finalizers      []string                `json:"finalizers"`
	DeletionTime    *metav1.Time            `json:"deletionTimestamp"`
	// Rev is the revision the metadata was read at (0 when unknown).
	Rev int64 `json:"-"`
}

// Deleting reports whether the object's deletion has started.
func (m Meta) Deleting() bool { return m.DeletionTime != nil }

// HasFinalizer reports whether f is among the object's finalizers.
func (m Meta) HasFinalizer(f string) bool { return slices.Contains(m.Finalizers, f) }

// DecodeMeta reads the metadata of a stored object (JSON).
func DecodeMeta(value []byte) (Meta, error) {
	var obj struct {
		Metadata Meta `json:"metadata"`
	}
	if err := json.Unmarshal(value, &obj); err != nil {
		return Meta{}, fmt.Errorf("gc: decode metadata: %w", err)
	}
	return obj.Metadata, nil
}

// interesting reports, without decoding, whether a stored object may have
// owner references or a deletion in progress: most writes have neither
// and cost the collector two byte searches.
func interesting(value []byte) bool {
	return bytes.Contains(value, []byte(`"ownerReferences"`)) || bytes.Contains(value, []byte(`"deletionTimestamp"`))
}
