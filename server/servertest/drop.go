package servertest

import (
	"bytes"

	"io"
	"net/http"
)

// accept sends a request with an Accept header (none if "").
func (a *API) Accept(method, path, accept, contentType string, body []byte) Response {
	a.T.Helper()
	req, err := http.NewRequest(method, a.Host+path, bytes.NewReader(body))
	if err != nil {
		a.T.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.C.Do(req)
	if err != nil {
		a.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{Code: resp.StatusCode, Body: b, Header: resp.Header}
}
