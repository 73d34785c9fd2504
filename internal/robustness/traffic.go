package robustness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Namespace holds the harness's ConfigMaps.
const Namespace = "robustness"

// object is the part of an answer the harness reads: a ConfigMap, a list
// of them, a Status, or a watch event's object.
type object struct {
	Metadata struct {
		Name            string `json:"name"`
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Data    map[string]string `json:"data"`
	Items   []object          `json:"items"`
	Details struct {
		UID string `json:"uid"`
	} `json:"details"`
	Code    int    `json:"code"` // a Status's
	Message string `json:"message"`
}

// Object is the part of an answer the harness reads (see object), for
// other HTTP tests of the same model (test/e2e's linearizability test).
type Object = object

// RV is the object's resourceVersion as a number (0 if it is not one).
func (o object) RV() int64 {
	n, _ := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
	return n
}

// DoJSON sends a request with a JSON body (nil: none) and decodes a 2xx
// answer. An error means there is no definite answer.
func DoJSON(ctx context.Context, c *http.Client, method, u string, body any) (int, object, error) {
	var obj object
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, obj, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return 0, obj, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, obj, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, obj, err
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, &obj); err != nil {
			return 0, obj, fmt.Errorf("%s %s: decode: %w", method, u, err)
		}
	}
	return resp.StatusCode, obj, nil
}

func configMap(name, value string, rv int64) map[string]any {
	md := map[string]any{"name": name, "namespace": Namespace}
	if rv != 0 {
		md["resourceVersion"] = strconv.FormatInt(rv, 10)
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": map[string]string{"v": value}}
}

// Op is one single-object operation as a client saw it, with call and
// return times since the run started. Out.Code 0: no definite answer (the
// write may have happened).
type Op struct {
	Client int           `json:"client"`
	Server string        `json:"server"`
	In     Input         `json:"in"`
	Out    Output        `json:"out"`
	Call   time.Duration `json:"call"`
	Return time.Duration `json:"return"`
	Err    string        `json:"err,omitempty"`
}

// Item is one ConfigMap as a list or the history has it.
type Item struct {
	Value string `json:"value"`
	RV    int64  `json:"rv"`
	UID   string `json:"uid"`
}

// PagedList is a list read page by page (limit and continue). Every page
// is of one snapshot, at RV.
type PagedList struct {
	Client int           `json:"client"`
	Server string        `json:"server"`
	Call   time.Duration `json:"call"`
	Return time.Duration `json:"return"`
	RV     int64         `json:"rv"`
	PageRV []int64       `json:"pageRVs"`
	// After410 marks the full list a client made after its last one's
	// continue token expired.
	After410 bool            `json:"after410"`
	Items    map[string]Item `json:"items"`
	Code     int             `json:"code"` // 200 when complete; 410 when its continue expired; 0: failed
	Err      string          `json:"err,omitempty"`
}

// endpoint is a server as the clients reach it.
type endpoint struct {
	name string
	url  string
	hc   *http.Client
}

func (e endpoint) base() string { return e.url + "/api/v1/namespaces/" + Namespace + "/configmaps" }

// client is one sequential traffic client, like a Kubernetes controller:
// mostly optimistic updates (read, then write with the resourceVersion
// read), some creates and deletes, lists whole and by pages. It is used by
// one goroutine.
type client struct {
	id      int
	since   func() time.Duration
	servers []endpoint
	keys    []string
	rng     *rand.Rand
	timeout time.Duration
	n       int

	ops   []Op
	lists []PagedList
}

func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.step(ctx)
	}
}

func (c *client) value() string {
	c.n++
	return fmt.Sprintf("c%d-%d", c.id, c.n)
}

// call sends one request and records it as an operation (reads without
// an answer are not recorded: they tell nothing). It returns the answer.
func (c *client) call(ctx context.Context, srv endpoint, in Input, method, u string, body any) (Output, object) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	call := c.since()
	code, obj, err := DoJSON(rctx, srv.hc, method, u, body)
	ret := c.since()
	op := Op{Client: c.id, Server: srv.name, In: in, Call: call, Return: ret}
	switch {
	case err != nil:
		op.Err = err.Error()
	case code == http.StatusOK || code == http.StatusCreated:
		op.Out = Output{Code: code, Value: obj.Data["v"], RV: obj.RV(), UID: obj.Metadata.UID}
		if in.Kind == OpDelete {
			op.Out = Output{Code: code, UID: obj.Details.UID}
		}
	case code == http.StatusConflict || code == http.StatusNotFound:
		op.Out = Output{Code: code}
	default:
		op.Err = fmt.Sprintf("HTTP %d", code)
	}
	if op.Out.Code != 0 || in.Kind != OpGet {
		c.ops = append(c.ops, op)
	}
	return op.Out, obj
}

func (c *client) step(ctx context.Context) {
	srv := c.servers[c.rng.IntN(len(c.servers))]
	key := c.keys[c.rng.IntN(len(c.keys))]
	switch p := c.rng.IntN(100); {
	case p < 80:
		// Optimistic update: GET, then PUT with its resourceVersion (a
		// 409 means another client won; the next step reads again).
		out, _ := c.call(ctx, srv, Input{Kind: OpGet, Key: key}, http.MethodGet, srv.base()+"/"+key, nil)
		switch out.Code {
		case http.StatusOK:
			v := c.value()
			c.call(ctx, srv, Input{Kind: OpUpdate, Key: key, Value: v, RV: out.RV}, http.MethodPut, srv.base()+"/"+key, configMap(key, v, out.RV))
		case http.StatusNotFound:
			v := c.value()
			c.call(ctx, srv, Input{Kind: OpCreate, Key: key, Value: v}, http.MethodPost, srv.base(), configMap(key, v, 0))
		}
	case p < 86:
		v := c.value()
		c.call(ctx, srv, Input{Kind: OpCreate, Key: key, Value: v}, http.MethodPost, srv.base(), configMap(key, v, 0))
	case p < 91:
		c.call(ctx, srv, Input{Kind: OpDelete, Key: key}, http.MethodDelete, srv.base()+"/"+key, nil)
	case p < 95:
		c.list(ctx, srv)
	default:
		// A slow reader of pages: its continue token may expire with a
		// compaction (410), and it lists again in full, as client-go's
		// pager does (FullListIfExpired).
		if c.pagedList(ctx, srv, false) == http.StatusGone {
			c.pagedList(ctx, srv, true)
		}
	}
}

// list reads every key with one consistent list: one operation per key.
func (c *client) list(ctx context.Context, srv endpoint) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	call := c.since()
	code, obj, err := DoJSON(rctx, srv.hc, http.MethodGet, srv.base(), nil)
	ret := c.since()
	if err != nil || code != http.StatusOK {
		return
	}
	found := map[string]object{}
	for _, it := range obj.Items {
		found[it.Metadata.Name] = it
	}
	for _, k := range c.keys {
		op := Op{Client: c.id, Server: srv.name, In: Input{Kind: OpList, Key: k}, Call: call, Return: ret, Out: Output{Code: http.StatusNotFound}}
		if it, ok := found[k]; ok {
			op.Out = Output{Code: http.StatusOK, Value: it.Data["v"], RV: it.RV(), UID: it.Metadata.UID}
		}
		c.ops = append(c.ops, op)
	}
}

// pagedList reads the namespace two items a page, with pauses between
// pages (after410: in one page), and returns how it ended.
func (c *client) pagedList(ctx context.Context, srv endpoint, after410 bool) int {
	pl := PagedList{Client: c.id, Server: srv.name, Call: c.since(), Items: map[string]Item{}, After410: after410}
	defer func() { pl.Return = c.since(); c.lists = append(c.lists, pl) }()
	cont := ""
	for {
		if cont != "" && !after410 {
			sleep(ctx, time.Duration(c.rng.IntN(400))*time.Millisecond)
		}
		q := url.Values{"limit": {"2"}}
		if after410 {
			q = url.Values{} // one page
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		code, obj, err := DoJSON(rctx, srv.hc, http.MethodGet, srv.base()+"?"+q.Encode(), nil)
		cancel()
		switch {
		case err != nil:
			pl.Err = err.Error()
			return 0
		case code == http.StatusGone:
			pl.Code = code
			return code
		case code != http.StatusOK:
			pl.Err = fmt.Sprintf("HTTP %d", code)
			return 0
		}
		rv := obj.RV()
		if pl.RV == 0 {
			pl.RV = rv
		}
		pl.PageRV = append(pl.PageRV, rv)
		for _, it := range obj.Items {
			pl.Items[it.Metadata.Name] = Item{Value: it.Data["v"], RV: it.RV(), UID: it.Metadata.UID}
		}
		if cont = obj.Metadata.Continue; cont == "" {
			pl.Code = http.StatusOK
			return pl.Code
		}
	}
}
