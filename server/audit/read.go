package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Filter selects records; zero fields match everything.
type Filter struct {
	Resource, Namespace, Name, User, Verb string
	// Since: records whose stage ended at or after it.
	Since time.Time
	// Stages; empty: every stage.
	Stages []auditv1.Stage
}

// Match reports whether ev passes f. User matches the user or the
// impersonated user.
func (f Filter) Match(ev *auditv1.Event) bool {
	ref := ev.ObjectRef
	if ref == nil {
		ref = &auditv1.ObjectReference{}
	}
	switch {
	case f.Resource != "" && ref.Resource != f.Resource,
		f.Namespace != "" && ref.Namespace != f.Namespace,
		f.Name != "" && ref.Name != f.Name,
		f.Verb != "" && ev.Verb != f.Verb,
		f.User != "" && ev.User.Username != f.User && (ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != f.User),
		!f.Since.IsZero() && ev.StageTimestamp.Time.Before(f.Since):
		return false
	}
	if len(f.Stages) > 0 {
		for _, s := range f.Stages {
			if s == ev.Stage {
				return true
			}
		}
		return false
	}
	return true
}

// quick is a cheap test that a line may match f, before decoding it.
func (f Filter) quick(line []byte) bool {
	for _, s := range []string{f.Name, f.Namespace, f.User} {
		if s != "" && !bytes.Contains(line, []byte(s)) {
			return false
		}
	}
	return true
}

// Scan reads the records of r, calling fn with each that matches f and
// its line, until fn returns false. A line that is not a record is an
// error.
func Scan(r io.Reader, f Filter, fn func(ev *auditv1.Event, line []byte) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && f.quick(line) {
			var ev auditv1.Event
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				if err == io.EOF {
					return nil // a record being written
				}
				return fmt.Errorf("line %d: %w", n, jerr)
			}
			if f.Match(&ev) && !fn(&ev, bytes.TrimSuffix(line, []byte("\n"))) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// ScanFiles is Scan over files in order.
func ScanFiles(files []string, f Filter, fn func(ev *auditv1.Event, line []byte) bool) error {
	stop := false
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			return err
		}
		err = Scan(fh, f, func(ev *auditv1.Event, line []byte) bool {
			if !fn(ev, line) {
				stop = true
				return false
			}
			return true
		})
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if stop {
			return nil
		}
	}
	return nil
}

// Author is who made one write, from its record.
type Author struct {
	User             string    `json:"user"`
	ImpersonatedUser string    `json:"impersonatedUser,omitempty"`
	Verb             string    `json:"verb"`
	AuditID          string    `json:"auditID"`
	Time             time.Time `json:"time"`
}

// Authors returns, by the resourceVersion they wrote, who made the writes
// of one object that the log's files (rotated ones included) record.
func (l *Log) Authors(group, resource, namespace, name string) (map[string]Author, error) {
	files, err := Files(l.cfg.Path)
	if err != nil {
		return nil, err
	}
	out := map[string]Author{}
	f := Filter{Resource: resource, Namespace: namespace, Name: name, Stages: []auditv1.Stage{auditv1.StageResponseComplete}}
	err = ScanFiles(files, f, func(ev *auditv1.Event, _ []byte) bool {
		rv := ev.Annotations[ResourceVersionAnnotation]
		if rv == "" || ev.ObjectRef.APIGroup != group || ev.Annotations[PatchAnnotation] == "[]" {
			return true
		}
		a := Author{User: ev.User.Username, Verb: ev.Verb, AuditID: string(ev.AuditID), Time: ev.StageTimestamp.Time}
		if ev.ImpersonatedUser != nil {
			a.ImpersonatedUser = ev.ImpersonatedUser.Username
		}
		out[rv] = a
		return true
	})
	return out, err
}
