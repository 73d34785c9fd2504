package client

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/json"
)

// Sentinel errors for the API server's failure reasons. A *StatusError
// matches (errors.Is) the sentinel for its reason, or for its HTTP code when
// the reason is empty or unknown.
var (
	ErrBadRequest           = errors.New("bad request")
	ErrUnauthorized         = errors.New("unauthorized")
	ErrForbidden            = errors.New("forbidden")
	ErrNotFound             = errors.New("not found")
	ErrMethodNotAllowed     = errors.New("method not allowed")
	ErrAlreadyExists        = errors.New("already exists")
	ErrConflict             = errors.New("conflict")
	ErrGone                 = errors.New("gone") // 410: resourceVersion or continue token expired
	ErrTooLarge             = errors.New("request entity too large")
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	ErrInvalid              = errors.New("invalid")
	ErrTooManyRequests      = errors.New("too many requests")
	ErrInternal             = errors.New("internal error")
	ErrServiceUnavailable   = errors.New("service unavailable")
	ErrTimeout              = errors.New("timeout") // 504, and 500 ServerTimeout
)

// IgnoreNotFound returns nil for an error matching ErrNotFound (the
// object is gone, which is often what a caller wanted), else err, as
// controller-runtime's client.IgnoreNotFound does.
func IgnoreNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// StatusError is a failure reported by the API server as a metav1.Status,
// either as the body of an HTTP error response or as a watch ERROR event.
//
// Its Status method makes it an APIStatus for
// k8s.io/apimachinery/pkg/api/errors, so apierrors.IsNotFound and friends
// work on it too.
type StatusError struct {
	ErrStatus metav1.Status
}

func (e *StatusError) Error() string {
	s := e.ErrStatus
	if s.Message != "" {
		return s.Message
	}
	if s.Reason != "" {
		return fmt.Sprintf("%s (%d)", s.Reason, s.Code)
	}
	return fmt.Sprintf("%d %s", s.Code, http.StatusText(int(s.Code)))
}

// Status returns the metav1.Status the server sent.
func (e *StatusError) Status() metav1.Status { return e.ErrStatus }

// Is reports whether target is the sentinel for e's reason or code.
func (e *StatusError) Is(target error) bool {
	return target != nil && sentinelFor(e.ErrStatus) == target
}

var reasonSentinels = map[metav1.StatusReason]error{
	metav1.StatusReasonBadRequest:            ErrBadRequest,
	metav1.StatusReasonUnauthorized:          ErrUnauthorized,
	metav1.StatusReasonForbidden:             ErrForbidden,
	metav1.StatusReasonNotFound:              ErrNotFound,
	metav1.StatusReasonMethodNotAllowed:      ErrMethodNotAllowed,
	metav1.StatusReasonAlreadyExists:         ErrAlreadyExists,
	metav1.StatusReasonConflict:              ErrConflict,
	metav1.StatusReasonGone:                  ErrGone,
	metav1.StatusReasonExpired:               ErrGone,
	metav1.StatusReasonRequestEntityTooLarge: ErrTooLarge,
	metav1.StatusReasonUnsupportedMediaType:  ErrUnsupportedMediaType,
	metav1.StatusReasonInvalid:               ErrInvalid,
	metav1.StatusReasonTooManyRequests:       ErrTooManyRequests,
	metav1.StatusReasonInternalError:         ErrInternal,
	metav1.StatusReasonServiceUnavailable:    ErrServiceUnavailable,
	metav1.StatusReasonTimeout:               ErrTimeout,
	metav1.StatusReasonServerTimeout:         ErrTimeout,
}

// codeReasons is the reason a Status with an empty or unknown reason is
// taken to have, by its code.
var codeReasons = map[int32]metav1.StatusReason{
	http.StatusBadRequest:            metav1.StatusReasonBadRequest,
	http.StatusUnauthorized:          metav1.StatusReasonUnauthorized,
	http.StatusForbidden:             metav1.StatusReasonForbidden,
	http.StatusNotFound:              metav1.StatusReasonNotFound,
	http.StatusMethodNotAllowed:      metav1.StatusReasonMethodNotAllowed,
	http.StatusConflict:              metav1.StatusReasonConflict,
	http.StatusGone:                  metav1.StatusReasonGone,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusUnsupportedMediaType:  metav1.StatusReasonUnsupportedMediaType,
	http.StatusUnprocessableEntity:   metav1.StatusReasonInvalid,
	http.StatusTooManyRequests:       metav1.StatusReasonTooManyRequests,
	http.StatusInternalServerError:   metav1.StatusReasonInternalError,
	http.StatusServiceUnavailable:    metav1.StatusReasonServiceUnavailable,
	http.StatusGatewayTimeout:        metav1.StatusReasonTimeout,
}

func sentinelFor(s metav1.Status) error {
	if err, ok := reasonSentinels[s.Reason]; ok {
		return err
	}
	return reasonSentinels[codeReasons[s.Code]]
}

// maxErrorBody bounds how much of a non-Status error body is kept.
const maxErrorBody = 4 << 10

// responseError turns a non-2xx response into a *StatusError: the Status in
// the body if there is one, else a Status made from the code and the start
// of the body (a proxy's HTML page, say).
func responseError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var st metav1.Status
	var err error
	switch ct := resp.Header.Get("Content-Type"); {
	case isCBOR(ct):
		st, err = decodeCBORStatus(body)
	case isProtobuf(ct):
		st, err = decodeProtobufStatus(body)
	default:
		err = json.UnmarshalCaseSensitivePreserveInts(body, &st)
	}
	if err == nil && st.Kind == "Status" {
		if st.Code == 0 {
			st.Code = int32(resp.StatusCode)
		}
		return &StatusError{ErrStatus: st}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > maxErrorBody {
		msg = msg[:maxErrorBody] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    int32(resp.StatusCode),
		Reason:  reasonForCode(resp.StatusCode),
		Message: fmt.Sprintf("the server responded with %d: %s", resp.StatusCode, msg),
	}}
}

func reasonForCode(code int) metav1.StatusReason {
	if r, ok := codeReasons[int32(code)]; ok {
		return r
	}
	return metav1.StatusReasonUnknown
}
