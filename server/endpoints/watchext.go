package endpoints

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/server/apistatus"
)

// WatchExtensions is what /version's watchExtensions lists: the query
// parameters of objwatch's watch extensions, which a client sends only to
// a server that lists them (docs/WATCH-EXTENSIONS.md).
const WatchExtensions = "fieldMask,projection,watchDeltas"

// extensions are a request's watch extensions: fieldMask (RFC 6901
// pointers, comma-separated, the parameter may repeat), projection=mask
// and watchDeltas.
type extensions struct {
	mask    *fieldmask.Mask
	project bool
	deltas  bool
}

// extensions are r's extensions (none when the server takes none).
func (a *API) extensions(r *http.Request, verb string) (extensions, error) {
	if a.cfg.NoExtensions {
		return extensions{}, nil
	}
	return parseExtensions(r.URL.Query(), verb)
}

// parseExtensions reads and checks the extensions of a request with the
// given verb ("" for a request that is neither a list nor a watch of a
// resource). A watch takes all three; a list takes a mask only with
// projection=mask, which trims its items; anything else is 400, naming
// the parameter.
func parseExtensions(q url.Values, verb string) (extensions, error) {
	var e extensions
	masks, hasMask := q["fieldMask"]
	proj, hasProj := q["projection"]
	deltas, hasDeltas := q["watchDeltas"]
	if !hasMask && !hasProj && !hasDeltas {
		return e, nil
	}
	if verb != "watch" && verb != "list" {
		name := "fieldMask"
		switch {
		case hasProj:
			name = "projection"
		case hasDeltas:
			name = "watchDeltas"
		}
		return e, apistatus.BadRequest("%s: applies only to lists and watches of a resource", name)
	}
	if hasMask {
		m, err := fieldmask.Parse(masks...)
		if err != nil {
			return e, apistatus.BadRequest("fieldMask: %v", err)
		}
		e.mask = &m
	}
	if hasProj {
		if len(proj) != 1 || proj[0] != "mask" {
			return e, apistatus.BadRequest(`projection: unsupported value %q: the only projection is "mask"`, proj[0])
		}
		if e.mask == nil {
			return e, apistatus.BadRequest("projection: projection=mask needs a fieldMask")
		}
		e.project = true
	}
	if hasDeltas {
		if verb != "watch" {
			return e, apistatus.BadRequest("watchDeltas: applies only to watches")
		}
		on, err := strconv.ParseBool(deltas[0])
		if len(deltas) != 1 || err != nil {
			return e, apistatus.BadRequest(`watchDeltas: invalid value %q: must be "true" or "false", once`, deltas[0])
		}
		e.deltas = on
	}
	if verb == "list" && e.mask != nil && !e.project {
		return e, apistatus.BadRequest("fieldMask: a list takes a mask only with projection=mask")
	}
	return e, nil
}

// shaped reports whether e changes what the objects of a response are.
func (e extensions) shaped() bool { return e.project || e.deltas }

// errShapedAs is the 400 of a projection or deltas asked of a Table or
// PartialObjectMetadata response.
func errShapedAs() error {
	return apistatus.BadRequest("projection and watchDeltas apply to objects, not to Table or PartialObjectMetadata responses")
}
