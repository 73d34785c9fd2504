package endpoints

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/objwatch/objwatch/server/apistatus"
)

// WriteStatus sends err as a JSON Status with its HTTP code (500 for an
// error that is not an API error).
func WriteStatus(w http.ResponseWriter, err error) {
	writeStatus(w, encJSON, err)
}

// writeStatusFor sends err as a Status in the encoding r's Accept header
// asks for (see statusEncoding): a protobuf client gets a protobuf
// Status, as from kube-apiserver.
func writeStatusFor(w http.ResponseWriter, r *http.Request, err error) {
	writeStatus(w, statusEncoding(r), err)
}

func writeStatus(w http.ResponseWriter, enc encoding, err error) {
	s := apistatus.Of(err)
	s.Kind, s.APIVersion = "Status", "v1"
	if s.Details != nil && s.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.Details.RetryAfterSeconds)))
	}
	if enc.encode(w, int(s.Code), s) != nil {
		WriteJSON(w, int(s.Code), s)
	}
}

// writeStatusObject sends a successful Status (200) in the encoding r's
// Accept header asks for.
func writeStatusObject(w http.ResponseWriter, r *http.Request, s *metav1.Status) error {
	return statusEncoding(r).encode(w, http.StatusOK, s)
}

// WriteJSON sends v as JSON with the given code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"encode response","reason":"InternalError","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// addWarnings sends warnings as Warning headers, formatted as Kubernetes
// formats them (code 299, no agent).
func addWarnings(w http.ResponseWriter, warnings []string) {
	for _, text := range warnings {
		h, err := utilnet.NewWarningHeader(299, "-", text)
		if err != nil {
			// Control characters or invalid UTF-8: sent quoted instead.
			h, _ = utilnet.NewWarningHeader(299, "-", strings.Trim(strconv.QuoteToASCII(text), `"`))
		}
		w.Header().Add("Warning", h)
	}
}
