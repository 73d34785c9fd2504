package conversion_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
)

// masked replaces what differs between runs and servers in a conversion
// error: the webhook's host and port, uids, the stored object's revision.
func masked(msg string) string {
	for _, m := range []struct{ re, with string }{
		{`127\.0\.0\.1:\d+`, "HOST"},
		{`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, "UID"},
		{`revision=\d+`, "revision=N"},
	} {
		msg = regexp.MustCompile(m.re).ReplaceAllString(msg, m.with)
	}
	return msg
}

// TestConversionWebhookFaults: a conversion webhook that is down, too
// slow, serving a certificate the caBundle does not trust, or answering
// wrongly, fails a read in the version it converts to and a create
// through it with kube-apiserver's code, reason and message (v1.37.2,
// the same webhook and CRD, host and port masked). The read's message is
// kube's storage error around the webhook's failure, the list's kube's
// StorageReadError around the same (the key with its /registry prefix),
// the create's the failure alone.
func TestConversionWebhookFaults(t *testing.T) {
	env, w := servertest.StartWidgets(t)
	a := servertest.NewAPI(t, env)
	other := servertest.StartConvWebhook(t) // another CA
	servertest.MustCode(t, "create b in v1", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("b", "5")), http.StatusCreated)
	const (
		crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
		read    = `Internal error occurred: StorageError: corrupt object, Code: 7, Key: /example.com/widgets/default/b, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=N: conversion webhook for example.com/v1, Kind=Widget `
		list    = `failed to read one or more widgets.example.com from the storage: StorageError: corrupt object, Code: 7, Key: /registry/example.com/widgets/default/b, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=N: conversion webhook for example.com/v1, Kind=Widget `
		write   = `conversion webhook for example.com/v2, Kind=Widget `
		post    = `failed: Post "https://HOST/convert?timeout=30s": `
	)
	caBundle := func(from, to []byte) {
		r := a.JSON("GET", crdPath, "")
		body := strings.Replace(string(r.Body), base64.StdEncoding.EncodeToString(from), base64.StdEncoding.EncodeToString(to), 1)
		servertest.MustCode(t, "change the caBundle", a.JSON("PUT", crdPath, body), http.StatusOK)
		want := http.StatusOK // in effect once b reads in v2 again, or no longer does
		if !bytes.Equal(to, w.CaPEM) {
			want = http.StatusInternalServerError
		}
		servertest.EventuallyWithin(t, 10*time.Second, func() bool { return a.JSON("GET", servertest.WidgetsV2+"/b", "").Code == want })
	}
	for _, tc := range []struct {
		fault       string
		setup, undo func()
		// The webhook's failure, as kube-apiserver words it for the read
		// (to v2) and for the create (to v1).
		read, write string
		// writeAlt, if set, is another wording of the create's failure
		// that is as right: the webhook gone while the server held a
		// kept-alive connection to it (the POST, not retried, meets EOF).
		writeAlt string
	}{
		{fault: "wronguid", read: `failed: expected response.uid="UID", got "not-the-request-uid"`},
		{fault: "refuse", read: `failed: cannot convert this one`},
		{fault: "failed", read: `failed: response.result.status was 'Failure', not 'Success'`},
		{fault: "wrongversion",
			read:  `returned invalid object at index 0: invalid groupVersion (expected example.com/v2, received example.com/v3)`,
			write: `returned invalid object at index 0: invalid groupVersion (expected example.com/v1, received example.com/v3)`},
		{fault: "garbage", read: `failed: couldn't get version/kind; json parse error: json: cannot unmarshal string into Go value of type struct { APIVersion string "json:\"apiVersion,omitempty\""; Kind string "json:\"kind,omitempty\"" }`},
		{fault: "500", read: `failed: an error on the server ("boom") has prevented the request from succeeding`},
		{fault: "badcert", setup: func() { caBundle(w.CaPEM, other.CaPEM) }, undo: func() { caBundle(other.CaPEM, w.CaPEM) },
			read: post + `tls: failed to verify certificate: x509: certificate signed by unknown authority (possibly because of "x509: ECDSA verification failure" while trying to verify candidate authority certificate "conversion test CA")`},
		{fault: "slow", read: post + `net/http: request canceled (Client.Timeout exceeded while awaiting headers)`},
		{fault: "down", setup: w.Close, read: post + `dial tcp HOST: connect: connection refused`, writeAlt: post + `EOF`},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			} else {
				w.SetMode(tc.fault)
				defer w.SetMode("ok")
			}
			if tc.undo != nil {
				defer tc.undo()
			}
			if tc.write == "" {
				tc.write = tc.read
			}
			var got, listed, created servertest.Response
			var wg sync.WaitGroup // a slow webhook takes its 30 s for each
			wg.Go(func() { got = a.JSON("GET", servertest.WidgetsV2+"/b", "") })
			wg.Go(func() { listed = a.JSON("GET", servertest.WidgetsV2+"?limit=10", "") })
			wg.Go(func() { created = a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("x-"+tc.fault, 1)) })
			wg.Wait()
			check := func(what string, r servertest.Response, reason, want string, alt ...string) {
				t.Helper()
				st := r.Status()
				if m := masked(st.Message); len(alt) > 0 && m == alt[0] {
					want = m
				}
				if r.Code != http.StatusInternalServerError || string(st.Reason) != reason || masked(st.Message) != want {
					t.Errorf("%s = %d %q %q\nwant 500 %q %q", what, r.Code, st.Reason, masked(st.Message), reason, want)
				}
			}
			check("get in v2", got, "InternalError", read+tc.read)
			check("list in v2", listed, "StorageReadError", list+tc.read)
			var alt []string
			if tc.writeAlt != "" {
				alt = append(alt, write+tc.writeAlt)
			}
			check("create in v2", created, "", write+tc.write, alt...)
			servertest.MustCode(t, "nothing created", a.JSON("GET", servertest.WidgetsV1+"/x-"+tc.fault, ""), http.StatusNotFound)
		})
	}
}
