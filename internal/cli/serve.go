package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/objwatch/objwatch/internal/instance"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
)

func newServeCommand() *cobra.Command {
	var (
		o                         instance.Options
		etcdServers               string
		etcdServersOverrides      string
		etcdCA, etcdCert, etcdKey string
		hosts                     []string
		verbose                   bool
		auditJournalMB            int
		auditHeadroomMB           int
		keepHistory               bool
		authorNotes               bool
		sharedWatch               bool
		historyMaxSize            string
		historyValueCache         string
		listEncodings             bool
		listEncodingsMaxSize      string
		exitWithParent            bool
		cacheSnapshots            bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Kubernetes-compatible API server (embedded etcd unless --etcd-servers is set)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			o.Hosts = hosts
			o.Server.Audit.JournalSize = int64(auditJournalMB) << 20
			if auditJournalMB <= 0 {
				o.Server.Audit.JournalSize = -1
			}
			o.Server.Audit.Headroom = int64(auditHeadroomMB) << 20
			if auditHeadroomMB <= 0 {
				o.Server.Audit.Headroom = -1
			}
			overrides, err := instance.ParseEtcdServersOverrides(etcdServersOverrides)
			if err != nil {
				return err
			}
			o.EtcdOverrides = overrides
			if etcdServers != "" || len(overrides) > 0 {
				if etcdServers != "" {
					o.EtcdServers = strings.Split(etcdServers, ",")
				}
				tc, err := etcdTLS(etcdCA, etcdCert, etcdKey)
				if err != nil {
					return err
				}
				o.EtcdTLS = tc
			}
			if err := listEncodingsSize(&o, listEncodings, listEncodingsMaxSize, cmd.Flags().Changed("watch-cache-list-encodings-max-size")); err != nil {
				return err
			}
			o.Server.NoSharedWatch = !sharedWatch
			if cacheSnapshots {
				o.Server.WatchCacheSnapshots = filepath.Join(o.DataDir, "watchcache")
			}
			if keepHistory && o.Server.History.Dir == "" {
				o.Server.History.Dir = filepath.Join(o.DataDir, "history")
			}
			switch {
			case cmd.Flags().Changed("history-author-notes"):
				o.Server.History.WriteAuthorNotes, o.Server.History.LocalAuthors = authorNotes, !authorNotes
			case len(o.EtcdServers) == 0:
				// Embedded etcd: no other server records its changes.
				o.Server.History.LocalAuthors = true
			}
			if historyMaxSize != "" {
				q, err := resource.ParseQuantity(historyMaxSize)
				if err != nil || q.Value() <= 0 {
					return fmt.Errorf("--history-max-size %q: a size such as 4Gi or 500Mi", historyMaxSize)
				}
				o.Server.History.MaxSize = q.Value()
			}
			if historyValueCache != "" {
				q, err := resource.ParseQuantity(historyValueCache)
				if err != nil || q.Value() < 0 {
					return fmt.Errorf("--history-value-cache %q: a size such as 128Mi, or 0 for none", historyValueCache)
				}
				o.Server.History.ValueCache = q.Value()
				if q.Value() == 0 {
					o.Server.History.ValueCache = -1
				}
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if exitWithParent {
				ppid := os.Getppid()
				wait := followParent(ctx, ppid, os.Getppid, parentPollInterval, func() {
					o.Log.Info("parent process exited; shutting down", "parent", ppid)
					cancel()
				})
				defer func() { cancel(); wait() }()
			}
			in, err := instance.Start(ctx, o)
			if err != nil {
				return err
			}
			defer in.Close()
			kc, _ := filepath.Abs(in.Kubeconfig)
			fmt.Fprintf(cmd.OutOrStdout(), "objwatch (pid %d) is serving on %s; use it with: export KUBECONFIG=%s; kubectl get namespaces\n", os.Getpid(), in.URL, kc)
			select {
			case <-ctx.Done():
				o.Log.Info("shutting down")
				return nil
			case err := <-in.Err():
				return err
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DataDir, "data-dir", "objwatch-data", "directory for etcd data, credentials and the kubeconfig")
	f.StringVar(&o.Listen, "listen", "127.0.0.1:6443", "HTTPS listen address")
	f.StringSliceVar(&hosts, "host", nil, "extra host names or IPs for the serving certificate")
	f.StringVar(&etcdServers, "etcd-servers", "", "comma-separated external etcd client URLs (default: embedded etcd)")
	f.StringVar(&etcdServersOverrides, "etcd-servers-overrides", "", "per-resource external etcd clusters, as kube-apiserver's: comma-separated group/resource#servers, servers being client URLs separated by ';' and the core group empty (/events#http://10.0.0.1:2379;http://10.0.0.2:2379,coordination.k8s.io/leases#http://10.0.0.3:2379); the --etcd-cafile, --etcd-certfile and --etcd-keyfile apply to every cluster; the history store records the main cluster only")
	f.StringVar(&etcdCA, "etcd-cafile", "", "CA bundle to verify external etcd servers")
	f.StringVar(&etcdCert, "etcd-certfile", "", "client certificate for external etcd")
	f.StringVar(&etcdKey, "etcd-keyfile", "", "client key for external etcd")
	f.DurationVar(&o.CompactionInterval, "compaction-interval", 5*time.Minute, "interval between etcd history compactions (0 disables)")
	f.DurationVar(&o.Server.BookmarkInterval, "bookmark-interval", time.Minute, "interval between watch bookmarks")
	f.DurationVar(&o.Server.WatchFlushInterval, "watch-flush-interval", 10*time.Millisecond, "longest time watch output of a busy watch waits to be batched with later events while the CPUs have room")
	f.DurationVar(&o.Server.WatchFlushIntervalMax, "watch-flush-interval-max", 80*time.Millisecond, "longest the watch flush window grows to while the CPUs (affinity, cgroup quota) are saturated (at most --watch-flush-interval: fixed)")
	f.IntVar(&o.Server.WatchBufferEvents, "watch-buffer-events", 10000, "events queued for one watch before it is ended with 410 Expired")
	f.IntVar(&o.Server.WatchQueueLimit, "watch-queue-limit", 1000000, "events queued for all watches of one resource together; past it a watch holding more than its share (the limit over the resource's watches, at least 100) is ended with 410 Expired (negative: no limit)")
	f.DurationVar(&o.Server.WatchEventCPU, "watch-event-cpu", 3*time.Microsecond, "server CPU taken to deliver one watch event to one watch: a write by a user who is not in system:masters keeps its execution seat that long per watch of its resource after it returns (plus 1ns per byte, at most 1s), so that a user's writes pay for their fan-out as with kube-apiserver's mutating work estimator (negative: no hold)")
	f.IntVar(&o.Server.WatchWriters, "watch-writers", 0, "how many watches write their events at once (0: one per CPU, one fewer while more than one user is active, so that one CPU is left to their requests; negative: no limit): the others wait parked, so that a request is not queued behind thousands of watches' writes in the Go scheduler; a write holds its place at most 2ms")
	f.BoolVar(&sharedWatch, "etcd-shared-watch", true, "serve the watch caches and the history recorder from one etcd watch per etcd cluster (etcd sends each change once) instead of one watch each")
	f.DurationVar(&o.Server.WatchWriteTimeout, "watch-write-timeout", time.Minute, "longest a write of watch output may block before the watch is ended (negative: no limit)")
	f.StringVar(&o.Server.ServiceClusterIPRange, "service-cluster-ip-range", "10.0.0.0/24", "IPv4 CIDR that Services' cluster IPs are allocated from (the same on every server of an etcd); its first address is the default/kubernetes service's")
	f.DurationVar(&o.Server.StorageInitializationTimeout, "storage-initialization-timeout", time.Minute, "longest /readyz waits for the watch caches of the resources served at start to load, as kube-apiserver's (negative: do not wait)")
	f.StringVar(&listEncodingsMaxSize, "watch-cache-list-encodings-max-size", "1Gi", "memory for the protobuf and CBOR encodings kept with the watch caches' objects once a list has asked for them, so that later binary lists copy bytes instead of encoding every item (about 1.2 KB per ConfigMap and encoding in use), over every resource; past it, items are encoded anew for each list (0: keep none)")
	f.BoolVar(&listEncodings, "watch-cache-list-encodings", true, "keep list encodings with the watch caches' objects (off: as --watch-cache-list-encodings-max-size=0)")
	_ = f.MarkDeprecated("watch-cache-list-encodings", "use --watch-cache-list-encodings-max-size (0 keeps none)")
	f.BoolVar(&cacheSnapshots, "watch-cache-snapshots", true, "keep each watch cache's state in DATA-DIR/watchcache (written every --watch-cache-snapshot-interval while it changes, and at shutdown) and start from it, catching up with etcd from its revision, instead of reading and decoding every object; this server's own, never shared; none with --encryption-provider-config (the files are plaintext)")
	f.DurationVar(&o.Server.WatchCacheSnapshotInterval, "watch-cache-snapshot-interval", 5*time.Minute, "how often a changed watch cache's state is written (with --watch-cache-snapshots); after a crash, a state older than etcd's compaction is not used")
	f.IntVar(&o.Server.GCWorkers, "gc-workers", 4, "objects the garbage collector processes at once")
	f.DurationVar(&o.Server.NamespaceDeletionDelay, "namespace-deletion-delay", 5*time.Second, "how long after a namespace's deletion starts its content is deleted and it is finalized (kube-controller-manager's namespace controller: 5s; 0: at once)")
	f.DurationVar(&o.Server.GCLeaseDuration, "gc-lease-duration", 15*time.Second, "lease that elects the one server (of those on an etcd) running the garbage collector (negative: every server runs it)")
	f.StringVar(&o.Auth.TokenAuthFile, "token-auth-file", "", "static bearer tokens, CSV lines token,user,uid[,\"group1,group2\"] as kube-apiserver's")
	f.BoolVar(&o.Auth.Anonymous, "anonymous-auth", false, "let requests without credentials in as system:anonymous (group system:unauthenticated); bad credentials are refused either way")
	f.StringVar(&o.Auth.ServiceAccountSigningKeyFile, "service-account-signing-key-file", "", "PEM private key (ECDSA P-256 or RSA) that signs service-account tokens (default: pki/sa.key in the data dir, created on first start; every server of an etcd needs the same key)")
	f.StringSliceVar(&o.Auth.ServiceAccountKeyFiles, "service-account-key-file", nil, "PEM files with more public or private keys whose service-account tokens are accepted (repeatable), e.g. other servers' signing keys")
	f.StringVar(&o.Auth.ServiceAccountIssuer, "service-account-issuer", auth.DefaultIssuer, "issuer (iss) of service-account tokens, also the API audience")
	f.DurationVar(&o.Auth.ServiceAccountMaxTokenExpiration, "service-account-max-token-expiration", 0, "longest lifetime a token request gets (0: as asked)")
	f.StringVar(&o.Server.Audit.Path, "audit-log-path", "", "write audit.k8s.io/v1 Event records, with each write's diff, to this file (empty: no audit log)")
	f.StringVar(&o.Server.Audit.PolicyFile, "audit-policy-file", "", "audit.k8s.io/v1 Policy choosing what is recorded (default: every request at Metadata level)")
	f.IntVar(&o.Server.Audit.MaxSizeMB, "audit-log-maxsize", 0, "megabytes the audit log grows to before it is rotated (0: never)")
	f.IntVar(&o.Server.Audit.MaxBackups, "audit-log-maxbackup", 0, "rotated audit log files kept (0: all)")
	f.IntVar(&auditJournalMB, "audit-journal-size", audit.DefaultJournalSize>>20, "megabytes of the journal beside the audit log (PATH.journal) that makes records durable without fsyncing the log itself, which on the file system of etcd's WAL slows etcd (0: no journal, the log is fsynced for every batch)")
	f.IntVar(&auditHeadroomMB, "audit-log-headroom", audit.DefaultHeadroom>>20, "megabytes of disk kept allocated past the audit log's end: a write whose record would not fit is refused (507) before it reaches etcd (0: none)")
	f.DurationVar(&o.Server.Audit.CheckpointInterval, "audit-checkpoint-interval", 10*time.Second, "interval between checkpoints of the audit log's hash chain in etcd")
	f.StringVar(&o.Server.EncryptionProviderConfig, "encryption-provider-config", "", "apiserver.config.k8s.io/v1 EncryptionConfiguration choosing the resources encrypted at rest in etcd and their keys (aesgcm, aescbc, secretbox, identity), as kube-apiserver's; every server of an etcd needs the same (default: nothing encrypted)")
	f.BoolVar(&keepHistory, "history", true, "keep every revision of every object past etcd's compaction, with its author (see --history-dir)")
	f.StringVar(&o.Server.History.Dir, "history-dir", "", "directory of the history store (default DATA-DIR/history)")
	f.DurationVar(&o.Server.History.Retention, "history-retention", 7*24*time.Hour, "how long the history store keeps a revision")
	f.StringVar(&historyMaxSize, "history-max-size", "4Gi", "largest size of the history store on disk; past it the oldest revisions are dropped first")
	f.StringVar(&historyValueCache, "history-value-cache", "128Mi", "memory for the last values of recently written keys, the bases of their next records' deltas; a key not in it has its base read back from the store, which costs an update several times the CPU of its record (0: none)")
	f.BoolVar(&authorNotes, "history-author-notes", true, "write who made each change into etcd beside it, for the history stores of every server of the etcd: on for a server without a store whose peers keep one; off hands the authors of this server's writes to its own store in process, saving etcd a key per write (other servers' stores then see no authors for them)")
	f.Lookup("history-author-notes").DefValue = "as --history with --etcd-servers; off with embedded etcd"
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	f.BoolVar(&exitWithParent, "exit-with-parent", startedByGoRun(), "shut down, as on SIGTERM, when the parent process exits (default: on when started by go run, whose go tool does not pass a kill's SIGTERM on to the server)")
	// A test fault (server.Config.DebugFault) for the robustness
	// harness's self-test; hidden from help. Only a binary built with
	// -tags objwatch_debugfault has the faults: any other refuses to
	// start with one named.
	f.StringVar(&o.Server.DebugFault, "debug-fault", "", "TEST ONLY, in builds with -tags "+objects.DebugFaultTag+": break the server on purpose ("+objects.FaultDropEventAfterRestart+")")
	_ = f.MarkHidden("debug-fault")
	return cmd
}

// listEncodingsSize sets o's bound on the encodings kept for lists from
// --watch-cache-list-encodings-max-size (size; explicit when it was
// given) and the deprecated --watch-cache-list-encodings (on).
func listEncodingsSize(o *instance.Options, on bool, size string, explicit bool) error {
	q, err := resource.ParseQuantity(size)
	if err != nil || q.Sign() < 0 {
		return fmt.Errorf("--watch-cache-list-encodings-max-size %q: a size such as 512Mi, or 0 for none", size)
	}
	if !on && explicit && !q.IsZero() {
		return fmt.Errorf("--watch-cache-list-encodings=false keeps no encodings, but --watch-cache-list-encodings-max-size is %s: give only the size", size)
	}
	o.Server.ListEncodingsMaxSize = q.Value()
	if !on || q.Value() == 0 {
		o.Server.ListEncodingsMaxSize = -1 // none kept
	}
	return nil
}

func etcdTLS(ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		b, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("etcd ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("etcd ca: no certificates in %s", ca)
		}
	}
	if cert != "" || key != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}
