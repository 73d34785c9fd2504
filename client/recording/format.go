package recording

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Format and Version identify the file format written in every header.
const (
	Format  = "objwatch-recording"
	Version = 1
)

// Kind is the kind of an item line.
type Kind string

// The item kinds; see the package documentation.
const (
	Initial  Kind = "initial"
	Synced   Kind = "synced"
	Added    Kind = "ADDED"
	Modified Kind = "MODIFIED"
	Deleted  Kind = "DELETED"
	Bookmark Kind = "BOOKMARK"
	Gone     Kind = "gone"
	Relist   Kind = "relist"
	Listed   Kind = "listed"
	End      Kind = "end"
)

// hasObject reports whether items of kind k carry an object.
func (k Kind) hasObject() bool {
	switch k {
	case Initial, Added, Modified, Deleted, Bookmark, Listed:
		return true
	}
	return false
}

func (k Kind) known() bool {
	switch k {
	case Initial, Synced, Added, Modified, Deleted, Bookmark, Gone, Relist, Listed, End:
		return true
	}
	return false
}

// Header is a recording's first line.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Resources recorded, as apiVersion/plural ("v1/configmaps").
	Resources     []string  `json:"resources"`
	Server        string    `json:"server,omitempty"`
	Namespace     string    `json:"namespace,omitempty"` // "" for all namespaces
	LabelSelector string    `json:"labelSelector,omitempty"`
	Start         time.Time `json:"start"`
	// Secrets is true when Secrets were recorded (Options.IncludeSecrets).
	Secrets bool `json:"secrets"`
	// Redacted lists the paths whose values were replaced.
	Redacted []string `json:"redacted,omitempty"`
}

// Item is one line after the header.
type Item struct {
	Kind Kind `json:"kind"`
	// At is the arrival time, since Header.Start.
	At       time.Duration `json:"at"`
	Resource string        `json:"resource,omitempty"`
	// Object is the object, JSON-encoded, for the kinds that carry one.
	Object json.RawMessage `json:"object,omitempty"`
	// ResourceVersion: of the list (synced) or the expired one (gone).
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Unknown marks a DELETED whose final state the client did not see.
	Unknown bool `json:"unknown,omitempty"`
	// Items is the count of item lines, on the end line.
	Items int `json:"items,omitempty"`
	// Line is the item's line number in the file (1 is the header); set
	// by the Reader, not written.
	Line int `json:"-"`
}

// Recording is a whole recording in memory.
type Recording struct {
	Header Header
	Items  []Item // without the end line
}

// maxLine bounds one line (an object plus its envelope).
const maxLine = 64 << 20

// Reader reads a recording line by line, checking each line. Errors name
// the line ("line 7: ..."). Not safe for concurrent use.
type Reader struct {
	zr       *gzip.Reader
	sc       *bufio.Scanner
	header   Header
	line     int
	last     time.Duration
	items    int
	inRelist map[string]bool // resources between relist and synced
	ended    bool
}

// NewReader reads and checks the header of the recording r holds.
func NewReader(r io.Reader) (*Reader, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("recording: line 1: not a gzip-compressed recording: %w", err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	rd := &Reader{zr: zr, sc: sc, inRelist: map[string]bool{}}
	data, err := rd.scan()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("recording: line 1: truncated: empty recording, no header")
	}
	if err != nil {
		return nil, err
	}
	if err := rd.parseHeader(data); err != nil {
		return nil, fmt.Errorf("recording: line 1: %w", err)
	}
	return rd, nil
}

// scan reads the next line, counting it; io.EOF at a clean end of input.
func (rd *Reader) scan() ([]byte, error) {
	rd.line++
	if rd.sc.Scan() {
		return rd.sc.Bytes(), nil
	}
	if err := rd.sc.Err(); err != nil {
		return nil, fmt.Errorf("recording: line %d: truncated or corrupt: %w", rd.line, err)
	}
	return nil, io.EOF
}

func (rd *Reader) parseHeader(data []byte) error {
	if data == nil {
		return errors.New("truncated: empty recording, no header")
	}
	var h Header
	if err := strictUnmarshal(data, &h); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if h.Format != Format {
		return fmt.Errorf("not an objwatch recording (format %q, want %q)", h.Format, Format)
	}
	if h.Version != Version {
		return fmt.Errorf("version %d not supported (this reader reads version %d)", h.Version, Version)
	}
	if len(h.Resources) == 0 {
		return errors.New("header names no resources")
	}
	for _, r := range h.Resources {
		if _, _, err := SplitResource(r); err != nil {
			return err
		}
	}
	rd.header = h
	return nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// Header returns the recording's header.
func (rd *Reader) Header() Header { return rd.header }

// Next returns the next item, or io.EOF after the end line. A recording
// that stops before its end line is truncated: Next returns an error.
func (rd *Reader) Next() (Item, error) {
	if rd.ended {
		return Item{}, io.EOF
	}
	data, err := rd.scan()
	if errors.Is(err, io.EOF) {
		return Item{}, fmt.Errorf("recording: line %d: truncated: the recording ends without its end line", rd.line)
	}
	if err != nil {
		return Item{}, err
	}
	it, err := rd.check(data)
	if err != nil {
		return Item{}, fmt.Errorf("recording: line %d: %w", rd.line, err)
	}
	if it.Kind == End {
		rd.ended = true
		if err := rd.trailing(); err != nil {
			return Item{}, err
		}
		return Item{}, io.EOF
	}
	return it, nil
}

// trailing checks that nothing follows the end line, and the gzip footer.
func (rd *Reader) trailing() error {
	if _, err := rd.scan(); !errors.Is(err, io.EOF) {
		if err == nil {
			return fmt.Errorf("recording: line %d: a line after the end line", rd.line)
		}
		return err
	}
	return nil
}

// check parses and checks one item line.
func (rd *Reader) check(data []byte) (Item, error) {
	var it Item
	if err := strictUnmarshal(data, &it); err != nil {
		return it, fmt.Errorf("not an item: %w", err)
	}
	it.Line = rd.line
	if !it.Kind.known() {
		return it, fmt.Errorf("unknown kind %q", it.Kind)
	}
	if it.At < rd.last {
		return it, fmt.Errorf("out of order: at %v is before the previous line's %v", it.At, rd.last)
	}
	rd.last = it.At
	if it.Kind == End {
		if it.Items != rd.items {
			return it, fmt.Errorf("truncated or corrupt: the end line counts %d items, the recording has %d", it.Items, rd.items)
		}
		return it, nil
	}
	rd.items++
	if !slices.Contains(rd.header.Resources, it.Resource) {
		return it, fmt.Errorf("resource %q is not one the header names (%s)", it.Resource, strings.Join(rd.header.Resources, ", "))
	}
	if it.Kind.hasObject() != (len(it.Object) > 0) {
		if it.Kind.hasObject() {
			return it, fmt.Errorf("%s without an object", it.Kind)
		}
		return it, fmt.Errorf("%s with an object", it.Kind)
	}
	if it.Kind.hasObject() && (it.Object[0] != '{') {
		return it, fmt.Errorf("%s: the object is not a JSON object", it.Kind)
	}
	if it.Unknown && it.Kind != Deleted {
		return it, fmt.Errorf("%s marked unknown (only DELETED may be)", it.Kind)
	}
	return it, rd.checkRelist(it)
}

// checkRelist checks that listed items sit between relist and synced.
func (rd *Reader) checkRelist(it Item) error {
	in := rd.inRelist[it.Resource]
	switch it.Kind {
	case Relist:
		if in {
			return fmt.Errorf("relist of %s inside a relist", it.Resource)
		}
		rd.inRelist[it.Resource] = true
	case Listed:
		if !in {
			return fmt.Errorf("listed object of %s outside a relist", it.Resource)
		}
	case Synced:
		delete(rd.inRelist, it.Resource)
	default:
		if in {
			return fmt.Errorf("%s of %s inside a relist (only listed items until synced)", it.Kind, it.Resource)
		}
	}
	return nil
}

// Close releases the decompressor; it does not close the underlying reader.
func (rd *Reader) Close() error { return rd.zr.Close() }

// ReadAll reads a whole recording, checking every line.
func ReadAll(r io.Reader) (*Recording, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	rec := &Recording{Header: rd.Header()}
	for {
		it, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rec, nil
		}
		if err != nil {
			return nil, err
		}
		rec.Items = append(rec.Items, it)
	}
}

// SplitResource splits "apps/v1/deployments" into apiVersion "apps/v1"
// and plural "deployments" ("v1/configmaps": "v1", "configmaps").
func SplitResource(s string) (apiVersion, plural string, err error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 || i == len(s)-1 || strings.Count(s, "/") > 2 {
		return "", "", fmt.Errorf("resource %q is not apiVersion/plural (v1/configmaps, apps/v1/deployments)", s)
	}
	return s[:i], s[i+1:], nil
}

// ResourceName returns how a recording names gvr: apiVersion/plural
// ("v1/configmaps", "apps/v1/deployments").
func ResourceName(gvr schema.GroupVersionResource) string {
	return gvr.GroupVersion().String() + "/" + gvr.Resource
}

// ParseResource is the inverse of ResourceName.
func ParseResource(s string) (schema.GroupVersionResource, error) {
	apiVersion, plural, err := SplitResource(s)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("resource %q: %w", s, err)
	}
	return gv.WithResource(plural), nil
}
