package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/storage"
)

// statusOf turns any error into the metav1.Status Kubernetes would send.
// Errors that are not API errors become 500 InternalError.
func statusOf(err error) *metav1.Status {
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		s := api.Status()
		return &s
	}
	s := apierrors.NewInternalError(err).ErrStatus
	return &s
}

// writeStatus sends err as a Status with its HTTP code.
func writeStatus(w http.ResponseWriter, err error) {
	s := statusOf(err)
	s.Kind, s.APIVersion = "Status", "v1"
	if s.Details != nil && s.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.Details.RetryAfterSeconds)))
	}
	writeJSON(w, int(s.Code), s)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"encode response","reason":"InternalError","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

func badRequest(format string, args ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

func newStatus(code int32, reason metav1.StatusReason, msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}}
}

func unsupportedMediaType(ct string) error {
	return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
		fmt.Sprintf("the body of the request was in an unknown format (%s) - accepted media types include: application/json, application/yaml", ct))
}

// tooOld is the 410 Gone a compacted resourceVersion gets.
func tooOld(requested, compacted int64) error {
	msg := fmt.Sprintf("too old resource version: %d", requested)
	if compacted > 0 {
		msg = fmt.Sprintf("too old resource version: %d (%d)", requested, compacted)
	}
	return apierrors.NewResourceExpired(msg)
}

// tooLarge is the 504 a resourceVersion newer than the store gets after waiting.
func tooLarge() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout,
		Message: "Too large resource version",
		Details: &metav1.StatusDetails{
			Causes:            []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}},
			RetryAfterSeconds: 1,
		},
	}}
}

// storageError maps storage sentinels to API errors for resource gr and name.
func storageError(err error, gr schema.GroupResource, name string) error {
	var ce *storage.CompactedError
	switch {
	case errors.As(err, &ce):
		return tooOld(ce.Requested, ce.Compacted)
	case errors.Is(err, storage.ErrNotFound):
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, storage.ErrExists):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.Is(err, storage.ErrConflict):
		return apierrors.NewConflict(gr, name, errors.New(conflictMessage))
	case errors.Is(err, storage.ErrFutureRevision):
		return tooLarge()
	}
	return apierrors.NewInternalError(err)
}

const conflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

func invalid(gk schema.GroupKind, name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(gk, name, errs)
}

// tooSlow ends a watch whose client could not keep up: 410, so the client
// resumes or relists.
func tooSlow() error {
	return apierrors.NewResourceExpired("watch ended: the client fell too far behind the event stream; resume from the last resourceVersion or relist")
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
