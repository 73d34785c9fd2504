package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/storage/etcd"
)

func newAuditCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check and read the audit log of `objwatch serve --audit-log-path`",
	}
	cmd.AddCommand(newAuditVerifyCommand(), newAuditReadCommand("query"), newAuditReadCommand("tail"))
	return cmd
}

// logFiles expands each path to its rotated files, oldest first, then
// itself.
func logFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		fs, err := audit.Files(p)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out, nil
}

func newAuditVerifyCommand() *cobra.Command {
	var (
		etcdServers, etcdCA, etcdCert, etcdKey, key string
		exact                                       bool
	)
	cmd := &cobra.Command{
		Use:   "verify PATH...",
		Short: "Check the audit log's hash chain; name the first record edited, removed, reordered or truncated",
		Long: `verify checks that every record of the audit log carries the hash of the record
before it and the next sequence number, across the rotated files (each PATH stands
for its rotated files, oldest first, then itself, unless --exact). With
--etcd-servers it also reads the head of the chain the server checkpointed in etcd:
a log truncated or rewritten before that point fails too. It exits non-zero naming
the first record that does not hold.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files := args
			if !exact {
				var err error
				if files, err = logFiles(args); err != nil {
					return err
				}
			}
			var cp *audit.Checkpoint
			if etcdServers != "" {
				if key == "" {
					key = audit.CheckpointKey(args[len(args)-1])
				}
				c, err := readCheckpoint(cmd.Context(), etcdServers, etcdCA, etcdCert, etcdKey, key)
				if err != nil {
					return err
				}
				cp = &c
			}
			res, err := audit.Verify(files, cp)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "ok: %d records, seq %d to %d, in %d files\n", res.Records, res.FirstSeq, res.Head, len(files))
			if !res.Anchored && res.Records > 0 {
				fmt.Fprintf(out, "note: the chain starts at seq %d: older records are in rotated files not given (or removed)\n", res.FirstSeq)
			}
			if cp != nil {
				fmt.Fprintf(out, "checkpoint: seq %d of %s matches\n", cp.Seq, cp.Time.Format(time.RFC3339))
			} else {
				fmt.Fprintln(out, "note: no checkpoint checked (--etcd-servers): records removed from the end, or a rewritten log, are not detected")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&etcdServers, "etcd-servers", "", "etcd client URLs (comma-separated) to read the chain's checkpoint from")
	f.StringVar(&etcdCA, "etcd-cafile", "", "CA bundle to verify etcd")
	f.StringVar(&etcdCert, "etcd-certfile", "", "client certificate for etcd")
	f.StringVar(&etcdKey, "etcd-keyfile", "", "client key for etcd")
	f.StringVar(&key, "checkpoint-key", "", "etcd key of the checkpoint (default: the one the server on this host uses for the last PATH)")
	f.BoolVar(&exact, "exact", false, "check exactly the files given, in the order given")
	return cmd
}

func readCheckpoint(ctx context.Context, servers, ca, cert, key, cpKey string) (audit.Checkpoint, error) {
	tc, err := etcdTLS(ca, cert, key)
	if err != nil {
		return audit.Checkpoint{}, err
	}
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: strings.Split(servers, ","), TLS: tc})
	if err != nil {
		return audit.Checkpoint{}, err
	}
	defer cli.Close()
	store, err := etcd.New(cli, nil)
	if err != nil {
		return audit.Checkpoint{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return audit.ReadCheckpoint(ctx, store, cpKey)
}

// auditReadCmd is `objwatch audit query` and `objwatch audit tail`.
type auditReadCmd struct {
	filter    audit.Filter
	since     time.Duration
	allStages bool
	output    string
	lines     int
	follow    bool
	noColor   bool
}

func newAuditReadCommand(name string) *cobra.Command {
	c := &auditReadCmd{}
	short := "Print the audit records that match, with their diffs"
	if name == "tail" {
		short = "Print the last matching audit records, with their diffs; -f follows the log"
	}
	cmd := &cobra.Command{
		Use:   name + " PATH",
		Short: short,
		Long: short + `.

Records are ResponseComplete stages (--all-stages: every stage), one header line
each: time, user (user as impersonated), verb, object, the resourceVersion written
and the response code, then with a write's JSON Patch one line per operation:

  15:04:05 alice update configmaps default/app rv=1234 200
    ~ /data/mode: "fast"

-o json prints the matching records themselves, one audit.k8s.io/v1 Event a line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.run(cmd.Context(), cmd.OutOrStdout(), args[0], name == "tail")
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.filter.Resource, "resource", "", "only this resource (plural: configmaps)")
	f.StringVarP(&c.filter.Namespace, "namespace", "n", "", "only this namespace")
	f.StringVar(&c.filter.Name, "name", "", "only objects of this name")
	f.StringVar(&c.filter.User, "user", "", "only this user (or impersonated user)")
	f.StringVar(&c.filter.Verb, "verb", "", "only this verb (create, update, patch, delete, get, list, watch...)")
	f.DurationVar(&c.since, "since", 0, "only records of the last duration (1h)")
	f.BoolVar(&c.allStages, "all-stages", false, "every stage, not only ResponseComplete")
	f.StringVarP(&c.output, "output", "o", "", "output format: text (default) or json")
	f.BoolVar(&c.noColor, "no-color", false, "never use colours")
	if name == "tail" {
		f.IntVar(&c.lines, "lines", 10, "how many records to print before following")
		f.BoolVarP(&c.follow, "follow", "f", false, "keep printing records as they are written")
	}
	return cmd
}

func (c *auditReadCmd) run(ctx context.Context, out io.Writer, path string, tail bool) error {
	switch c.output {
	case "", "text", "json":
	default:
		return fmt.Errorf("--output %q: want text or json", c.output)
	}
	if c.since > 0 {
		c.filter.Since = time.Now().Add(-c.since)
	}
	if !c.allStages {
		c.filter.Stages = []auditv1.Stage{auditv1.StageResponseComplete, auditv1.StagePanic}
	}
	p := &recordPrinter{out: out, json: c.output == "json", color: !c.noColor && c.output != "json" && isTerminal(out)}
	files, err := logFiles([]string{path})
	if err != nil {
		return err
	}
	if !tail {
		return audit.ScanFiles(files, c.filter, func(ev *auditv1.Event, line []byte) bool {
			p.print(ev, line)
			return true
		})
	}
	type rec struct {
		ev   *auditv1.Event
		line []byte
	}
	var last []rec
	if err := audit.ScanFiles(files, c.filter, func(ev *auditv1.Event, line []byte) bool {
		last = append(last, rec{ev, slices.Clone(line)})
		if len(last) > c.lines {
			last = last[1:]
		}
		return true
	}); err != nil {
		return err
	}
	for _, r := range last {
		p.print(r.ev, r.line)
	}
	if !c.follow {
		return nil
	}
	return c.followLog(ctx, path, p)
}

// followLog prints records appended to path from its current end,
// reopening it after a rotation, until ctx ends.
func (c *auditReadCmd) followLog(ctx context.Context, path string, p *recordPrinter) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { f.Close() }()
	off, _ := f.Seek(0, io.SeekEnd)
	var partial []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			off += int64(n)
			partial = append(partial, buf[:n]...)
			for {
				i := slices.Index(partial, '\n')
				if i < 0 {
					break
				}
				line := partial[:i]
				var ev auditv1.Event
				if json.Unmarshal(line, &ev) == nil && c.filter.Match(&ev) {
					p.print(&ev, line)
				}
				partial = partial[i+1:]
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if st, err := os.Stat(path); err == nil && st.Size() < off {
			// Rotated: the log is a new file.
			f.Close()
			if f, err = os.Open(path); err != nil {
				return err
			}
			off, partial = 0, nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// recordPrinter prints audit records as text or JSON lines.
type recordPrinter struct {
	out         io.Writer
	json, color bool
}

func (p *recordPrinter) paint(color, s string) string {
	if !p.color {
		return s
	}
	return color + s + ansiReset
}

func (p *recordPrinter) print(ev *auditv1.Event, line []byte) {
	if p.json {
		fmt.Fprintf(p.out, "%s\n", line)
		return
	}
	who := ev.User.Username
	if ev.ImpersonatedUser != nil {
		who += " as " + ev.ImpersonatedUser.Username
	}
	what := ev.RequestURI
	if ref := ev.ObjectRef; ref != nil {
		what = ref.Resource
		if ref.Subresource != "" {
			what += "/" + ref.Subresource
		}
		obj := ref.Name
		if ref.Namespace != "" {
			obj = ref.Namespace + "/" + ref.Name
		}
		if obj != "" {
			what += " " + obj
		}
	}
	header := fmt.Sprintf("%s %s %s %s", ev.StageTimestamp.Local().Format("15:04:05"), who, ev.Verb, what)
	if rv := ev.Annotations[audit.ResourceVersionAnnotation]; rv != "" {
		header += " rv=" + rv
	}
	if ev.Stage != auditv1.StageResponseComplete {
		header += " " + string(ev.Stage)
	}
	if ev.ResponseStatus != nil {
		header += fmt.Sprintf(" %d", ev.ResponseStatus.Code)
	}
	var b strings.Builder
	b.WriteString(p.paint(ansiBold, header))
	b.WriteByte('\n')
	if patch := ev.Annotations[audit.PatchAnnotation]; patch != "" {
		var ops []struct {
			Op    change.Op `json:"op"`
			Path  string    `json:"path"`
			From  string    `json:"from"`
			Value any       `json:"value"`
		}
		json.Unmarshal([]byte(patch), &ops)
		if len(ops) == 0 {
			b.WriteString("    (no change)\n")
		}
		for _, op := range ops {
			path := op.Path
			if path == "" {
				path = "(the object)"
			}
			switch op.Op {
			case change.OpAdd:
				b.WriteString(p.paint(ansiGreen, fmt.Sprintf("  + %s: %s", path, formatValue(op.Value))))
			case change.OpRemove:
				b.WriteString(p.paint(ansiRed, fmt.Sprintf("  - %s", path)))
			case change.OpMove:
				b.WriteString(p.paint(ansiYellow, fmt.Sprintf("  > %s: moved from %s", path, op.From)))
			default:
				b.WriteString(p.paint(ansiYellow, fmt.Sprintf("  ~ %s: %s", path, formatValue(op.Value))))
			}
			b.WriteByte('\n')
		}
	}
	io.WriteString(p.out, b.String())
}
