package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/internal/explain"
	"github.com/objwatch/objwatch/internal/ui"
	"github.com/objwatch/objwatch/server/audit"
)

// uiCmd is `objwatch ui`.
type uiCmd struct {
	target
	listen   string
	auditLog string
	// ready, if set, is called with the page's URL once it is served
	// (tests).
	ready func(url string)
}

func newUICommand() *cobra.Command {
	u := &uiCmd{}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a local web page of live changes, object histories and blame, timelines and audit records",
		Long: `ui serves a web page on this machine, on your own credentials (like kubectl
proxy), for any Kubernetes-compatible server reached through a kubeconfig:

  Live changes   every change of chosen resources as it happens, with the fields
                 it changed; filters, pause and resume without losing a change
  Object         the YAML with a blame gutter (manager, user, when), the history
                 as a timeline, a diff of any two revisions, owners, dependents,
                 and why a deletion waits
  Timeline       what was created, changed and deleted in a namespace in a window,
                 charted per minute by resource and by user (objwatch servers)
  Audit          a search of the audit log given with --audit-log

It prints the page's URL, with a random token that guards every request; open it
in a browser on this machine. The page is read-only and listens on loopback
unless --listen says otherwise; requests from other origins or for another Host
are refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return u.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&u.kubeconfig, "kubeconfig", "", "kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)")
	f.StringVar(&u.context, "context", "", "kubeconfig context (default: the current one)")
	f.StringVar(&u.listen, "listen", "127.0.0.1:0", "address to serve the page at (a port of 0 picks a free one)")
	f.StringVar(&u.auditLog, "audit-log", "", "audit log of objwatch serve --audit-log-path to search (the file on this host)")
	return cmd
}

func (u *uiCmd) run(ctx context.Context, out io.Writer) error {
	host, _, err := net.SplitHostPort(u.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", u.listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("--listen %q: give the address the page is opened at (127.0.0.1:8080), not all addresses: requests for another Host are refused", u.listen)
	}
	rc, _, err := restClient(u.kubeconfig, u.context, nil)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	l, err := net.Listen("tcp", u.listen)
	if err != nil {
		return err
	}
	token, err := ui.NewToken()
	if err != nil {
		l.Close()
		return err
	}
	cfg := ui.Config{REST: rc, Addr: l.Addr().String(), Token: token}
	if u.auditLog != "" {
		cfg.Audit = auditSearch(u.auditLog)
	}
	s, err := ui.New(cfg)
	if err != nil {
		l.Close()
		return err
	}
	defer s.Close()
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(out, "# warning: serving on %s, not loopback: anyone who can reach it and has the URL reads the cluster as you\n", l.Addr())
	}
	fmt.Fprintf(out, "objwatch ui: open %s\n", s.URL())
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	if u.ready != nil {
		u.ready(s.URL())
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close() // ends the live streams, so that Shutdown does not wait for them
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// auditSearch searches the audit log at path and its rotated files, as
// objwatch audit query does, keeping the newest records.
func auditSearch(path string) ui.AuditSearch {
	return func(ctx context.Context, q ui.AuditQuery) ([]ui.AuditRecord, error) {
		files, err := logFiles([]string{path})
		if err != nil {
			return nil, err
		}
		f := audit.Filter{User: q.User, Verb: q.Verb, Resource: q.Resource, Namespace: q.Namespace, Name: q.Name, Since: q.Since,
			Stages: []auditv1.Stage{auditv1.StageResponseComplete, auditv1.StagePanic}}
		var out []ui.AuditRecord
		err = audit.ScanFiles(files, f, func(ev *auditv1.Event, _ []byte) bool {
			r := ui.AuditRecord{Time: ev.StageTimestamp.Time, User: ev.User.Username, Verb: ev.Verb, URI: ev.RequestURI,
				RV: ev.Annotations[audit.ResourceVersionAnnotation]}
			if ev.ImpersonatedUser != nil {
				r.User += " as " + ev.ImpersonatedUser.Username
			}
			if ref := ev.ObjectRef; ref != nil {
				r.Resource, r.Namespace, r.Name = ref.Resource, ref.Namespace, ref.Name
				if ref.APIGroup != "" {
					r.Resource += "." + ref.APIGroup
				}
			}
			if ev.ResponseStatus != nil {
				r.Code = ev.ResponseStatus.Code
			}
			if p := ev.Annotations[audit.PatchAnnotation]; p != "" {
				r.Lines = explain.PatchLines(json.RawMessage(p))
			}
			out = append(out, r)
			if q.Limit > 0 && len(out) > 2*q.Limit {
				out = append(out[:0], out[len(out)-q.Limit:]...)
			}
			return ctx.Err() == nil
		})
		if q.Limit > 0 && len(out) > q.Limit {
			out = out[len(out)-q.Limit:]
		}
		return out, err
	}
}
