// Package apistatus builds the errors the server answers with: each is an
// *apierrors.StatusError carrying the metav1.Status Kubernetes sends for
// the same failure. Both the object service and the HTTP endpoints use
// them; neither has to know how the other spells an error.
package apistatus

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/storage"
)

// Of turns any error into the metav1.Status Kubernetes would send. Errors
// that are not API errors become 500 InternalError.
func Of(err error) *metav1.Status {
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		s := api.Status()
		return &s
	}
	s := apierrors.NewInternalError(err).ErrStatus
	return &s
}

// BadRequest is a 400 with a formatted message.
func BadRequest(format string, args ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

// New is a failure Status with the given code, reason and message.
func New(code int32, reason metav1.StatusReason, msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}}
}

// Internal is a 500 without a reason: what kube-apiserver answers when its
// storage refuses a request with a plain error (its words, as they are).
func Internal(msg string) error {
	return New(http.StatusInternalServerError, "", msg)
}

// UnsupportedMediaType is the 415 of a body in a format the server does
// not read.
func UnsupportedMediaType(ct string) error {
	return New(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
		fmt.Sprintf("the body of the request was in an unknown format (%s) - accepted media types include: application/json, application/yaml", ct))
}

// TooOld is the 410 Gone a compacted resourceVersion gets.
func TooOld(requested, compacted int64) error {
	msg := fmt.Sprintf("too old resource version: %d", requested)
	if compacted > 0 {
		msg = fmt.Sprintf("too old resource version: %d (%d)", requested, compacted)
	}
	return apierrors.NewResourceExpired(msg)
}

// TooLarge is the 504 a resourceVersion newer than the store gets after
// waiting.
func TooLarge() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout,
		Message: "Too large resource version",
		Details: &metav1.StatusDetails{
			Causes:            []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}},
			RetryAfterSeconds: 1,
		},
	}}
}

// Storage maps storage sentinels to API errors for resource gr and name;
// an error that is already a Status is returned as it is.
func Storage(err error, gr schema.GroupResource, name string) error {
	var ce *storage.CompactedError
	var st apierrors.APIStatus
	switch {
	case errors.As(err, &st):
		return err // already a Status
	case errors.As(err, &ce):
		return TooOld(ce.Requested, ce.Compacted)
	case errors.Is(err, storage.ErrNotFound):
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, storage.ErrExists):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.Is(err, storage.ErrConflict):
		return apierrors.NewConflict(gr, name, errors.New(ConflictMessage))
	case errors.Is(err, storage.ErrFutureRevision):
		return TooLarge()
	case errors.Is(err, storage.ErrOutcomeUnknown):
		// Kubernetes' answer to a write etcd did not confirm in time.
		return apierrors.NewTimeoutError("etcd became unavailable during the write, which may or may not have been applied: "+err.Error(), 1)
	case errors.Is(err, storage.ErrUnavailable):
		return Unavailable(err)
	case errors.Is(err, storage.ErrNoSpace):
		// Kubernetes' answer, word for word: etcd's error as a 500.
		return apierrors.NewInternalError(storage.ErrNoSpace)
	}
	return apierrors.NewInternalError(err)
}

// Unavailable is the 503 of a request refused, or a watch ended, because
// the server cannot reach its storage (err wraps storage.ErrUnavailable):
// nothing was processed, and a client may retry, here after a second or
// on another server at once.
func Unavailable(err error) error {
	se := apierrors.NewServiceUnavailable("etcd unavailable: " + err.Error())
	se.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return se
}

// ConflictMessage is Kubernetes' message for an optimistic-concurrency
// conflict.
const ConflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

// Invalid is the 422 of an object that fails validation.
func Invalid(gk schema.GroupKind, name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(gk, name, errs)
}

// TooSlow ends a watch whose client could not keep up: 410, so the client
// resumes or relists.
func TooSlow() error {
	return apierrors.NewResourceExpired("watch ended: the client fell too far behind the event stream; resume from the last resourceVersion or relist")
}

// Strict formats unknown fields the way Kubernetes' strict decoding does.
func Strict(unknown []string) error {
	msgs := make([]string, len(unknown))
	for i, u := range unknown {
		msgs[i] = fmt.Sprintf("unknown field %q", u)
	}
	return BadRequest("strict decoding error: %s", strings.Join(msgs, ", "))
}
