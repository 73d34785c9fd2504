package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
)

func TestIgnoreNotFound(t *testing.T) {
	notFound := fmt.Errorf("get x: %w", &client.StatusError{ErrStatus: metav1.Status{Reason: metav1.StatusReasonNotFound, Code: 404}})
	conflict := &client.StatusError{ErrStatus: metav1.Status{Reason: metav1.StatusReasonConflict, Code: 409}}
	if err := client.IgnoreNotFound(notFound); err != nil {
		t.Errorf("IgnoreNotFound(wrapped 404) = %v, want nil", err)
	}
	if err := client.IgnoreNotFound(conflict); err != conflict {
		t.Errorf("IgnoreNotFound(409) = %v, want it unchanged", err)
	}
	if err := client.IgnoreNotFound(nil); err != nil {
		t.Errorf("IgnoreNotFound(nil) = %v", err)
	}
}

func TestStatusErrorIs(t *testing.T) {
	tests := []struct {
		reason metav1.StatusReason
		code   int32
		want   error
	}{
		{metav1.StatusReasonNotFound, 404, client.ErrNotFound},
		{"", 404, client.ErrNotFound},
		{metav1.StatusReasonUnknown, 404, client.ErrNotFound},
		{metav1.StatusReasonAlreadyExists, 409, client.ErrAlreadyExists},
		{metav1.StatusReasonConflict, 409, client.ErrConflict},
		{"", 409, client.ErrConflict},
		{metav1.StatusReasonExpired, 410, client.ErrGone},
		{metav1.StatusReasonGone, 410, client.ErrGone},
		{metav1.StatusReasonForbidden, 403, client.ErrForbidden},
		{metav1.StatusReasonUnauthorized, 401, client.ErrUnauthorized},
		{metav1.StatusReasonInvalid, 422, client.ErrInvalid},
		{metav1.StatusReasonBadRequest, 400, client.ErrBadRequest},
		{metav1.StatusReasonTooManyRequests, 429, client.ErrTooManyRequests},
		{metav1.StatusReasonTimeout, 504, client.ErrTimeout},
		{metav1.StatusReasonServerTimeout, 500, client.ErrTimeout},
		{metav1.StatusReasonInternalError, 500, client.ErrInternal},
		{metav1.StatusReasonRequestEntityTooLarge, 413, client.ErrTooLarge},
	}
	all := []error{
		client.ErrNotFound, client.ErrAlreadyExists, client.ErrConflict, client.ErrGone, client.ErrForbidden,
		client.ErrUnauthorized, client.ErrInvalid, client.ErrBadRequest, client.ErrTooManyRequests,
		client.ErrTimeout, client.ErrInternal, client.ErrTooLarge,
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.reason, tt.code), func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", &client.StatusError{ErrStatus: metav1.Status{Reason: tt.reason, Code: tt.code}})
			for _, s := range all {
				if got := errors.Is(err, s); got != (s == tt.want) {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, s == tt.want)
				}
			}
			var se *client.StatusError
			if !errors.As(err, &se) || se.ErrStatus.Code != tt.code {
				t.Errorf("errors.As(%v) = %v, want the StatusError", err, se)
			}
		})
	}
}

func TestStatusErrorAPIStatus(t *testing.T) {
	err := &client.StatusError{ErrStatus: metav1.Status{Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound}}
	if !apierrors.IsNotFound(err) {
		t.Errorf("apierrors.IsNotFound(%v) = false, want true", err)
	}
	if apierrors.IsConflict(err) {
		t.Errorf("apierrors.IsConflict(%v) = true, want false", err)
	}
}
