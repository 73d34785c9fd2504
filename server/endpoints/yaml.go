package endpoints

import (
	"bytes"
	"mime"
	"net/http"
	"strconv"

	"sigs.k8s.io/yaml"
)

// yamlResponse holds a response rendered as JSON for a client that asked
// for YAML (output.yaml) and sends it converted, as kube-apiserver's YAML
// serializer is its JSON one followed by a conversion (sigs.k8s.io/yaml):
// the same keys in sorted order, so an object reads the same in both. A
// response already in another encoding (a Status encoded for the Accept
// header, which is YAML already) is sent as it is.
//
// It belongs to the request's goroutine; send must be called once, after
// the handler wrote everything.
type yamlResponse struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (y *yamlResponse) WriteHeader(code int) {
	if y.code == 0 {
		y.code = code
	}
}

func (y *yamlResponse) Write(b []byte) (int, error) {
	if y.code == 0 {
		y.code = http.StatusOK
	}
	return y.body.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (y *yamlResponse) Unwrap() http.ResponseWriter { return y.ResponseWriter }

// send writes the response held, converted to YAML if it is JSON.
func (y *yamlResponse) send() {
	if y.code == 0 {
		return // nothing written
	}
	h := y.Header()
	body := y.body.Bytes()
	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt == jsonType {
		if out, err := yaml.JSONToYAML(body); err == nil {
			body = out
			h.Set("Content-Type", yamlType)
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	y.ResponseWriter.WriteHeader(y.code)
	y.ResponseWriter.Write(body)
}
