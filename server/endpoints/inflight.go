package endpoints

import (
	"context"
	"math"
	"net/http"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/objwatch/objwatch/server/auth"
)

// DefaultUserInFlightShare is the share of each in-flight limit one user
// may hold when Config.UserInFlightShare is 0: half, so that one user
// flooding the server leaves at least half of the slots to everyone else.
const DefaultUserInFlightShare = 0.5

// tooManyRequests is kube-apiserver's answer when its in-flight limit is
// reached (its text, its Retry-After of one second), as a Status.
func tooManyRequests() error {
	return apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
}

// inFlight is one in-flight limit (reads or mutations): at most cap(slots)
// requests hold a slot at once, and at most perUser of them belong to one
// user. It is safe for concurrent use; mu guards only the per-user counts
// and is never held while a request is served.
type inFlight struct {
	slots   chan struct{}
	perUser int

	mu    sync.Mutex
	users map[string]int // slots held, by user name; no zero entries
}

// newInFlight returns a limit of n slots of which one user may hold
// share (0: DefaultUserInFlightShare; ≥1: all), rounded up, at least one.
func newInFlight(n int, share float64) *inFlight {
	if share == 0 {
		share = DefaultUserInFlightShare
	}
	per := n
	if share < 1 {
		per = max(1, int(math.Ceil(share*float64(n))))
	}
	return &inFlight{slots: make(chan struct{}, n), perUser: per, users: map[string]int{}}
}

// acquire takes a slot for a request of u (nil: no user is known, no
// share applies). It returns the function that gives the slot back, or
// ok false when u holds its share already or no slot is free.
//
// A member of system:masters is never refused, as kube-apiserver's
// max-in-flight filter serves it when the limit is reached: it takes a
// slot while it is within its share and one is free, and is served
// without one otherwise, so that it cannot take other users' slots either.
func (l *inFlight) acquire(u *auth.User) (release func(), ok bool) {
	masters := u != nil && slices.Contains(u.Groups, auth.GroupMasters)
	name, shared := "", u != nil && l.perUser < cap(l.slots)
	if shared {
		name = u.Name
		l.mu.Lock()
		if l.users[name] >= l.perUser {
			l.mu.Unlock()
			return func() {}, masters
		}
		l.users[name]++
		l.mu.Unlock()
	}
	select {
	case l.slots <- struct{}{}:
		return func() {
			<-l.slots
			if shared {
				l.giveBack(name)
			}
		}, true
	default:
		if shared {
			l.giveBack(name)
		}
		return func() {}, masters
	}
}

func (l *inFlight) giveBack(name string) {
	l.mu.Lock()
	if l.users[name]--; l.users[name] == 0 {
		delete(l.users, name)
	}
	l.mu.Unlock()
}

// limitInFlight takes a slot of the read or mutating limit for the
// request's user; it returns false (and has answered 429 with Retry-After)
// when the user holds its share of the limit or none is free.
func (a *API) limitInFlight(w http.ResponseWriter, r *http.Request, verb string) (release func(), ok bool) {
	l := a.reads
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		l = a.mutations
	}
	var u *auth.User
	if user, ok := auth.UserFrom(r.Context()); ok {
		u = &user
	}
	release, ok = l.acquire(u)
	if !ok {
		WriteStatus(w, tooManyRequests())
	}
	return release, ok
}

// admitted takes the request's in-flight slot (limitInFlight) and bounds
// it by the request timeout: the request to serve and what releases both.
// ok is false when it was refused (answered 429).
func (a *API) admitted(w http.ResponseWriter, r *http.Request, verb string) (_ *http.Request, release func(), ok bool) {
	free, ok := a.limitInFlight(w, r, verb)
	if !ok {
		return r, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	return r.WithContext(ctx), func() { cancel(); free() }, true
}
