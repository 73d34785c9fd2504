package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Request is one API call being built, the part of client-go's
// RESTClient a controller author reaches for: any verb, path, query and
// body, sent with the REST's retries, failover, rate limit and error
// mapping.
//
//	var cm corev1.ConfigMap
//	err := rest.Get().Namespace("default").Resource(cms).Name("settings").Do(ctx).Into(&cm)
//	res := rest.Verb("POST").AbsPath("/api/v1/namespaces/default/configmaps").Body(&cm).Do(ctx)
//
// The methods set one part each and return the Request, so calls chain;
// a bad part (a name with a slash, a body that does not encode) is kept
// and returned by Do, as client-go does. A Request is not safe for
// concurrent use; Do may be called more than once.
//
// Retries follow REST's rules: a request the server did not process (a
// 429 or 503 with Retry-After, a failover before it was written) is sent
// again for any verb; one that may have been processed only for GET,
// HEAD and OPTIONS.
type Request struct {
	rest *REST
	verb string
	err  error

	abs         string // AbsPath, else the resource path below
	res         *Resource
	namespace   string
	name        string
	subresource []string

	query       url.Values
	body        []byte
	contentType string
	accept      string
	timeout     time.Duration
}

// Verb starts a request with the HTTP method verb ("GET", "POST", ...).
func (r *REST) Verb(verb string) *Request {
	q := &Request{rest: r, verb: strings.ToUpper(verb)}
	if verb == "" {
		q.err = errors.New("request: empty verb")
	}
	return q
}

// Get starts a GET.
func (r *REST) Get() *Request { return r.Verb(http.MethodGet) }

// Post starts a POST.
func (r *REST) Post() *Request { return r.Verb(http.MethodPost) }

// Put starts a PUT.
func (r *REST) Put() *Request { return r.Verb(http.MethodPut) }

// Delete starts a DELETE.
func (r *REST) Delete() *Request { return r.Verb(http.MethodDelete) }

// Patch starts a PATCH whose body is a patch of type pt (JSON, merge,
// strategic merge or apply patch): its Content-Type.
func (r *REST) Patch(pt types.PatchType) *Request {
	return r.Verb(http.MethodPatch).ContentType(string(pt))
}

// AbsPath sets the path, from the segments joined by "/" (e.g.
// AbsPath("/apis", "apps/v1", "deployments")), instead of one built from
// Resource, Namespace, Name and SubResource.
func (q *Request) AbsPath(segments ...string) *Request {
	q.abs = path.Join(append([]string{"/"}, segments...)...)
	return q
}

// Resource sets the resource: its group, version and name, and whether
// Namespace applies.
func (q *Request) Resource(res Resource) *Request {
	q.res = &res
	return q
}

// Namespace sets the namespace of a namespaced Resource.
func (q *Request) Namespace(ns string) *Request {
	q.setSegment("namespace", ns, &q.namespace)
	return q
}

// Name sets the object's name.
func (q *Request) Name(name string) *Request {
	q.setSegment("name", name, &q.name)
	return q
}

// SubResource sets the subresource: "status", "scale", or several
// segments such as "proxy", "path".
func (q *Request) SubResource(segments ...string) *Request {
	for _, s := range segments {
		var v string
		if q.setSegment("subresource", s, &v) {
			q.subresource = append(q.subresource, v)
		}
	}
	return q
}

// setSegment sets *dst to a path segment, or records why it cannot be one.
func (q *Request) setSegment(what, s string, dst *string) bool {
	if s == "" || s == "." || s == ".." || strings.Contains(s, "/") || strings.Contains(s, "%") {
		q.fail(fmt.Errorf("request: %s %q cannot be a path segment", what, s))
		return false
	}
	*dst = s
	return true
}

// Param adds a query parameter (repeatable: each call adds a value).
func (q *Request) Param(key, value string) *Request {
	if key == "" {
		q.fail(errors.New("request: query parameter without a name"))
		return q
	}
	if q.query == nil {
		q.query = url.Values{}
	}
	q.query.Add(key, value)
	return q
}

// Body sets the request body: []byte, string and json.RawMessage as they
// are, an io.Reader read to its end, anything else encoded as JSON
// (typed objects, maps); nil for none. The Content-Type is
// application/json unless set by Patch or ContentType.
func (q *Request) Body(body any) *Request {
	switch b := body.(type) {
	case nil:
		q.body = nil
		return q
	case []byte:
		q.body = b
	case json.RawMessage:
		q.body = b
	case string:
		q.body = []byte(b)
	case io.Reader:
		data, err := io.ReadAll(b)
		if err != nil {
			q.fail(fmt.Errorf("request: read body: %w", err))
		}
		q.body = data
	default:
		data, err := json.Marshal(b)
		if err != nil {
			q.fail(fmt.Errorf("request: encode body: %w", err))
		}
		q.body = data
	}
	if q.body == nil {
		q.body = []byte{}
	}
	return q
}

// ContentType sets the body's Content-Type.
func (q *Request) ContentType(ct string) *Request {
	q.contentType = ct
	return q
}

// Accept sets the Accept header (default application/json).
func (q *Request) Accept(ct string) *Request {
	q.accept = ct
	return q
}

// Timeout bounds this request, retries included, instead of
// Config.Timeout.
func (q *Request) Timeout(d time.Duration) *Request {
	q.timeout = d
	return q
}

func (q *Request) fail(err error) {
	if q.err == nil {
		q.err = err
	}
}

// URL returns the request's path and query below the server's base URL,
// or the error that keeps it from being sent.
func (q *Request) URL() (string, error) {
	p, err := q.path()
	if err != nil {
		return "", err
	}
	if len(q.query) > 0 {
		p += "?" + q.query.Encode()
	}
	return p, nil
}

// path builds the absolute path below the base URL.
func (q *Request) path() (string, error) {
	if q.err != nil {
		return "", q.err
	}
	if q.abs != "" {
		if q.res != nil || q.name != "" || q.namespace != "" || q.subresource != nil {
			return "", errors.New("request: AbsPath with Resource, Namespace, Name or SubResource")
		}
		return q.abs, nil
	}
	if q.res == nil {
		return "", errors.New("request: neither AbsPath nor Resource set")
	}
	if q.namespace != "" && !q.res.Namespaced {
		return "", fmt.Errorf("request: namespace %q for cluster-scoped %s", q.namespace, q.res.GVR.Resource)
	}
	if q.subresource != nil && q.name == "" {
		return "", errors.New("request: SubResource without Name")
	}
	return resourcePath(*q.res, q.namespace, q.name, strings.Join(q.subresource, "/")), nil
}

// Do sends the request and reads the answer. A non-2xx answer is the
// Result's error, a *StatusError (errors.Is matches ErrNotFound,
// ErrConflict, ...), with its status code and body kept.
func (q *Request) Do(ctx context.Context) Result {
	req, err := q.build()
	if err != nil {
		return Result{err: err}
	}
	p := req.path
	timeout := q.timeout
	if timeout == 0 {
		timeout = q.rest.timeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	resp, err := q.rest.do(ctx, req)
	if se, ok := errors.AsType[*StatusError](err); ok {
		return Result{code: int(se.ErrStatus.Code), err: se}
	}
	if err != nil {
		return Result{err: fmt.Errorf("%s %s: %w", q.verb, p, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	res := Result{code: resp.StatusCode, body: body, contentType: resp.Header.Get("Content-Type")}
	if err != nil {
		res.err = fmt.Errorf("%s %s: read answer: %w", q.verb, p, err)
	}
	return res
}

// build checks the request and returns it as REST.do sends it.
func (q *Request) build() (request, error) {
	p, err := q.path()
	if err != nil {
		return request{}, err
	}
	if q.verb == http.MethodPatch && q.contentType == "" {
		return request{}, errors.New("request: PATCH without a patch type (use REST.Patch or ContentType)")
	}
	req := request{method: q.verb, path: p, query: q.query, body: q.body, contentType: q.contentType, accept: q.accept}
	if req.body != nil && req.contentType == "" {
		req.contentType = "application/json"
	}
	return req, nil
}

// Stream sends the request and returns the body of a 2xx answer as it
// comes (a pod's log, a watch): the caller reads it and closes it. It is
// long-running: Config.Timeout does not apply, Timeout does (until Close).
// A non-2xx answer is a *StatusError.
func (q *Request) Stream(ctx context.Context) (io.ReadCloser, error) {
	req, err := q.build()
	if err != nil {
		return nil, err
	}
	req.watch = true
	cancel := context.CancelFunc(func() {})
	if q.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, q.timeout)
	}
	resp, err := q.rest.do(ctx, req)
	if err != nil {
		cancel()
		if _, ok := errors.AsType[*StatusError](err); ok {
			return nil, err
		}
		return nil, fmt.Errorf("%s %s: %w", q.verb, req.path, err)
	}
	return &streamBody{ReadCloser: resp.Body, cancel: cancel}, nil
}

// streamBody ends the stream's timeout when closed.
type streamBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *streamBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Result is the answer to a Request.
type Result struct {
	code        int
	body        []byte
	contentType string
	err         error
}

// StatusCode is the HTTP status of the answer: a 2xx, the code of a
// *StatusError, or 0 if no answer came.
func (r Result) StatusCode() int { return r.code }

// Error is why the request failed: a *StatusError for a non-2xx answer,
// else a transport, timeout or request-building error; nil on success.
func (r Result) Error() error { return r.err }

// Raw returns the body of a 2xx answer and the error.
func (r Result) Raw() ([]byte, error) { return r.body, r.err }

// ContentType is the answer's Content-Type.
func (r Result) ContentType() string { return r.contentType }

// Into decodes the body of a 2xx answer into obj, or returns the error:
// JSON, or CBOR when the answer's Content-Type says so (after
// Accept("application/cbor")), decoded by apimachinery's CBOR serializer,
// or protobuf (after Accept("application/vnd.kubernetes.protobuf")) into
// a generated protobuf type (the k8s.io/api types), its kind set from
// the answer.
func (r Result) Into(obj any) error {
	if r.err != nil {
		return r.err
	}
	if len(r.body) == 0 {
		return errors.New("decode answer: empty body")
	}
	if isCBOR(r.contentType) {
		return decodeCBORAnswer(r.body, obj)
	}
	if isProtobuf(r.contentType) {
		return decodeProtobufAnswer(r.body, obj)
	}
	if err := json.Unmarshal(r.body, obj); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}
