package endpoints

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// convertedResponse holds a response rendered as JSON and sends it
// converted: to YAML for a client that asked for YAML (output.yaml), as
// kube-apiserver's YAML serializer is its JSON one followed by a
// conversion (sigs.k8s.io/yaml: the same keys in sorted order), or
// indented for one that asked for pretty printing (prettyPrint). A
// response in another encoding (a protobuf answer, a Status encoded for
// the Accept header) is sent as it is, and so is one the conversion
// fails on.
//
// It belongs to the request's goroutine; send must be called once, after
// the handler wrote everything.
type convertedResponse struct {
	http.ResponseWriter
	convert func(json []byte) (out []byte, contentType string, err error)
	code    int
	body    bytes.Buffer
}

func toYAML(j []byte) ([]byte, string, error) {
	y, err := yaml.JSONToYAML(j)
	return y, yamlType, err
}

func indented(j []byte) ([]byte, string, error) {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(j), "", "  "); err != nil {
		return nil, "", err
	}
	b.WriteByte('\n')
	return b.Bytes(), jsonType, nil
}

// prettyPrint tells whether r asks for indented JSON as kube-apiserver
// reads it: pretty=true (any true strconv.ParseBool takes), or, without
// the parameter, a User-Agent of curl, Wget or a browser.
func prettyPrint(r *http.Request) bool {
	if strings.Contains(r.URL.RawQuery, "pretty") {
		if p := r.URL.Query().Get("pretty"); p != "" {
			pretty, _ := strconv.ParseBool(p)
			return pretty
		}
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl") || strings.HasPrefix(ua, "Wget") || strings.HasPrefix(ua, "Mozilla/5.0")
}

func (y *convertedResponse) WriteHeader(code int) {
	if y.code == 0 {
		y.code = code
	}
}

func (y *convertedResponse) Write(b []byte) (int, error) {
	if y.code == 0 {
		y.code = http.StatusOK
	}
	return y.body.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (y *convertedResponse) Unwrap() http.ResponseWriter { return y.ResponseWriter }

// send writes the response held, converted if it is JSON.
func (y *convertedResponse) send() {
	if y.code == 0 {
		return // nothing written
	}
	h := y.Header()
	body := y.body.Bytes()
	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt == jsonType {
		if out, ct, err := y.convert(body); err == nil {
			body = out
			h.Set("Content-Type", ct)
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	y.ResponseWriter.WriteHeader(y.code)
	y.ResponseWriter.Write(body)
}
