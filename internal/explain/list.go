package explain

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
)

// ListAll lists every object of c matching opts in namespace ns, 500 a
// page, and returns them with the list's resourceVersion (where a watch
// of them starts).
func ListAll(ctx context.Context, c *client.Client[*unstructured.Unstructured], ns string, opts metav1.ListOptions) ([]*unstructured.Unstructured, string, error) {
	opts.Limit = 500
	var items []*unstructured.Unstructured
	for {
		l, err := c.List(ctx, ns, opts)
		if err != nil {
			return nil, "", fmt.Errorf("list %s: %w", c.Resource(), err)
		}
		items = append(items, l.Items...)
		if l.Continue == "" {
			return items, l.ResourceVersion, nil
		}
		opts.Continue = l.Continue
	}
}

// JSONChange is one changed field as JSON carries it (objwatch watch -o
// json, the web page).
type JSONChange struct {
	Path string    `json:"path"`
	Op   change.Op `json:"op"`
	Old  *any      `json:"old,omitempty"` // set, maybe to null, unless the op is add
	New  *any      `json:"new,omitempty"` // set, maybe to null, unless the op is remove
}

// JSONChanges converts changes for JSON.
func JSONChanges(cs []change.Change) []JSONChange {
	out := make([]JSONChange, 0, len(cs))
	for _, c := range cs {
		jc := JSONChange{Path: c.Path.String(), Op: c.Op}
		if c.Op != change.OpAdd {
			jc.Old = &c.Old
		}
		if c.Op != change.OpRemove {
			jc.New = &c.New
		}
		out = append(out, jc)
	}
	return out
}
