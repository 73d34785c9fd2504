package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Client is a typed client for one resource. T is a pointer to the
// resource's Go type: a k8s.io/api struct, your own struct embedding
// metav1.TypeMeta and metav1.ObjectMeta, or *unstructured.Unstructured.
//
// Methods take the namespace explicitly; "" means all namespaces for List,
// Watch and DeleteCollection, and is required for cluster-scoped resources.
// Objects passed to Create and Update are not modified; the server's answer
// is returned as a new object.
//
// A Client is safe for concurrent use and cheap; it holds no connections of
// its own (they belong to its REST).
type Client[T Object] struct {
	rest  *REST
	res   Resource
	codec codec[T]
	// accept is the Accept header of reads ("" for application/json).
	accept string
	// params are the watch-extension parameters of lists and watches.
	params WatchParams
	// cbor overrides Config.PreferCBOR when set (WithCBOR).
	cbor *bool
	// protobuf overrides Config.PreferProtobuf when set (WithProtobuf).
	protobuf *bool
}

// WithCBOR returns a copy of c whose reads ask for CBOR (on) or JSON
// only (off), whatever Config.PreferCBOR says. With CBOR asked for, Get,
// List, ListRaw and Watch send Accept: application/cbor,
// application/json;q=0.9 and decode the answer by its Content-Type.
// Writes send and receive JSON either way.
func (c *Client[T]) WithCBOR(on bool) *Client[T] {
	out := *c
	out.cbor = &on
	return &out
}

// WithProtobuf returns a copy of c whose reads ask for protobuf (on) or
// not (off), whatever Config.PreferProtobuf says. With protobuf asked for
// and T a generated protobuf type (the k8s.io/api types), Get, List,
// ListRaw and Watch send Accept: application/vnd.kubernetes.protobuf,
// application/json;q=0.9 and decode the answer by its Content-Type.
// Writes send and receive JSON either way.
func (c *Client[T]) WithProtobuf(on bool) *Client[T] {
	out := *c
	out.protobuf = &on
	return &out
}

// readAccept is the Accept header of reads: JSON (as WithoutManagedFields
// says), or protobuf or CBOR first when asked for and possible (protobuf
// before CBOR: it is the faster of the two to decode). Neither is asked
// for when T cannot be decoded from it (see protobufCapable and
// cborCapable) nor with watch extensions (projection, deltas), whose
// additions binary events lack.
func (c *Client[T]) readAccept() string {
	if c.params.Projection || c.params.Deltas {
		return c.accept
	}
	drop := c.accept == DropManagedFieldsAccept
	switch {
	case c.codec.protobuf && setting(c.protobuf, c.rest.preferProtobuf):
		if drop {
			return protobufDropAccept
		}
		return protobufAccept
	case c.codec.cbor && setting(c.cbor, c.rest.preferCBOR):
		if drop {
			return cborDropAccept
		}
		return cborAccept
	}
	return c.accept
}

// setting is a client's override if it has one, else the REST's default.
func setting(override *bool, def bool) bool {
	if override != nil {
		return *override
	}
	return def
}

// DropManagedFieldsAccept is the Accept header with which a client asks
// the server to leave metadata.managedFields out of the objects it
// returns (KEP-5958's drop parameter).
const DropManagedFieldsAccept = "application/json;drop=metadata.managedFields"

// WithoutManagedFields returns a copy of c whose Get, List, ListRaw and
// Watch ask the server to leave metadata.managedFields out of the objects
// it returns (Accept: application/json;drop=metadata.managedFields, the
// request of KEP-5958), which saves bandwidth and decoding where a client
// does not need them. objwatch honours it; a server that does not know the
// parameter ignores it and sends them anyway (as Kubernetes does up to
// 1.37). Writes are unchanged: their answers keep managedFields.
func (c *Client[T]) WithoutManagedFields() *Client[T] {
	out := *c
	out.accept = DropManagedFieldsAccept
	return &out
}

// NewClient returns a typed client for res. It panics if T is not a
// pointer to a struct.
func NewClient[T Object](r *REST, res Resource) *Client[T] {
	return &Client[T]{rest: r, res: res, codec: newCodec[T](res)}
}

// NewUnstructured returns a client that handles res as
// *unstructured.Unstructured, for resources known only at run time (see
// REST.Resource and REST.ResourceFor).
func NewUnstructured(r *REST, res Resource) *Client[*unstructured.Unstructured] {
	return NewClient[*unstructured.Unstructured](r, res)
}

// For is NewClient.
//
// Deprecated: use NewClient (constructors are named New; see the package
// documentation, # Names).
func For[T Object](r *REST, res Resource) *Client[T] { return NewClient[T](r, res) }

// Unstructured is NewUnstructured.
//
// Deprecated: use NewUnstructured.
func Unstructured(r *REST, res Resource) *Client[*unstructured.Unstructured] {
	return NewUnstructured(r, res)
}

// Resource returns the resource the client addresses.
func (c *Client[T]) Resource() Resource { return c.res }

// REST returns the connection the client uses.
func (c *Client[T]) REST() *REST { return c.rest }

// New returns a new, empty T.
func (c *Client[T]) New() T { return c.codec.New() }

func (c *Client[T]) path(namespace, name, sub string) (string, error) {
	if c.res.Namespaced && name != "" && namespace == "" {
		return "", errors.New("namespace required")
	}
	if !c.res.Namespaced && namespace != "" {
		return "", fmt.Errorf("%s is not namespaced", c.res)
	}
	return resourcePath(c.res, namespace, name, sub), nil
}

// object sends req and decodes the object in the answer.
func (c *Client[T]) object(ctx context.Context, req request) (T, error) {
	b, ct, err := c.rest.callType(ctx, req)
	if err != nil {
		var zero T
		return zero, err
	}
	return c.codec.decodeAs(ct, b)
}

// Get reads one object from the server. An object that does not exist is
// an error matching ErrNotFound (the server's 404 Status), as in client-go:
// here absence is the server's answer to a request that named the object.
// controller.Client.Get, which reads a cache where absence is an ordinary
// state, returns (obj, false, nil) instead.
func (c *Client[T]) Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error) {
	var zero T
	p, err := c.path(namespace, name, "")
	if err != nil {
		return zero, fmt.Errorf("get %s: %w", c.res, err)
	}
	return c.object(ctx, request{method: http.MethodGet, path: p, query: getQuery(opts), accept: c.readAccept()})
}

// List is one page of a list, or a whole list.
type List[T Object] struct {
	metav1.ListMeta
	Items []T
}

// List reads the objects matching opts. With opts.Limit set it returns one
// page; pass the returned Continue in opts.Continue for the next.
func (c *Client[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*List[T], error) {
	l := &List[T]{Items: []T{}}
	meta, err := c.ListRaw(ctx, namespace, opts, func(r Raw[T]) error {
		obj, err := r.Decode()
		if err != nil {
			return err
		}
		l.Items = append(l.Items, obj)
		return nil
	})
	if err != nil {
		return nil, err
	}
	l.ListMeta = meta
	return l, nil
}

func (c *Client[T]) encode(obj T) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return b, nil
}

// Create creates obj (in obj's namespace).
func (c *Client[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	var zero T
	p, err := c.path(obj.GetNamespace(), "", "")
	if err != nil {
		return zero, fmt.Errorf("create %s: %w", c.res, err)
	}
	if c.res.Namespaced && obj.GetNamespace() == "" {
		return zero, fmt.Errorf("create %s: namespace required", c.res)
	}
	b, err := c.encode(obj)
	if err != nil {
		return zero, err
	}
	return c.object(ctx, request{method: http.MethodPost, path: p, body: b, contentType: "application/json",
		query: writeQuery(opts.DryRun, opts.FieldManager, opts.FieldValidation, nil)})
}

// Update replaces obj. With metadata.resourceVersion set it succeeds only
// if the object is still at that version (else ErrConflict).
func (c *Client[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.update(ctx, obj, opts, "")
}

// UpdateStatus replaces obj's status through the status subresource.
func (c *Client[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.update(ctx, obj, opts, "status")
}

func (c *Client[T]) update(ctx context.Context, obj T, opts metav1.UpdateOptions, sub string) (T, error) {
	var zero T
	if obj.GetName() == "" {
		return zero, fmt.Errorf("update %s: name required", c.res)
	}
	p, err := c.path(obj.GetNamespace(), obj.GetName(), sub)
	if err != nil {
		return zero, fmt.Errorf("update %s: %w", c.res, err)
	}
	b, err := c.encode(obj)
	if err != nil {
		return zero, err
	}
	return c.object(ctx, request{method: http.MethodPut, path: p, body: b, contentType: "application/json",
		query: writeQuery(opts.DryRun, opts.FieldManager, opts.FieldValidation, nil)})
}

// Patch applies a patch: types.JSONPatchType (RFC 6902),
// types.MergePatchType (RFC 7386), types.StrategicMergePatchType (only
// for built-in types) or types.ApplyPatchType. As in client-go, the
// object itself is patched unless subresources name one ("status"; more
// than one are joined by "/"). A single "" is the object itself, so calls
// written when the argument was a required string still mean the same.
func (c *Client[T]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	var zero T
	if name == "" {
		return zero, fmt.Errorf("patch %s: name required", c.res)
	}
	p, err := c.path(namespace, name, strings.Join(subresources, "/"))
	if err != nil {
		return zero, fmt.Errorf("patch %s: %w", c.res, err)
	}
	return c.object(ctx, request{method: http.MethodPatch, path: p, body: data, contentType: string(pt),
		query: writeQuery(opts.DryRun, opts.FieldManager, opts.FieldValidation, opts.Force)})
}

// Delete deletes one object. Objects with finalizers are only marked for
// deletion (see metadata.deletionTimestamp).
func (c *Client[T]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	if name == "" {
		return fmt.Errorf("delete %s: name required", c.res)
	}
	p, err := c.path(namespace, name, "")
	if err != nil {
		return fmt.Errorf("delete %s: %w", c.res, err)
	}
	return c.delete(ctx, p, opts, nil)
}

// DeleteCollection deletes the objects matching listOpts' selectors.
func (c *Client[T]) DeleteCollection(ctx context.Context, namespace string, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error {
	p, err := c.path(namespace, "", "")
	if err != nil {
		return fmt.Errorf("deletecollection %s: %w", c.res, err)
	}
	return c.delete(ctx, p, opts, &listOpts)
}

func (c *Client[T]) delete(ctx context.Context, path string, opts metav1.DeleteOptions, lo *metav1.ListOptions) error {
	opts.Kind, opts.APIVersion = "DeleteOptions", "meta.k8s.io/v1"
	b, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	req := request{method: http.MethodDelete, path: path, body: b, contentType: "application/json"}
	if lo != nil {
		req.query = listQuery(*lo)
	}
	_, err = c.rest.call(ctx, req)
	return err
}
