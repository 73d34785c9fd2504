package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/objwatch/objwatch/server/auth"
)

func newUserCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Manage users who authenticate with client certificates",
		Long: `Manage users who authenticate with client certificates from the server's CA.

A user is a client certificate: its CN is the user name and its O values are
the groups, as in Kubernetes. objwatch keeps no list of users; what they may
do is up to RBAC (bind roles to the user or its groups).`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newUserAddCommand())
	return cmd
}

func newUserAddCommand() *cobra.Command {
	var (
		dataDir, serverURL string
		groups             []string
		validity           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Issue a client certificate for NAME and print a kubeconfig for it",
		Long: `Issue a client certificate for user NAME (CN=NAME, O=each --group) from the
CA in the data dir and print a kubeconfig with the CA, certificate and key
on standard output. The server URL is the data dir's admin kubeconfig's
unless --server is given. Nothing is written: keep the output safe, it holds
the user's key. The certificate cannot be revoked before it expires.

  objwatch user add alice --group dev > alice.kubeconfig`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pki := filepath.Join(dataDir, "pki")
			ca, err := os.ReadFile(filepath.Join(pki, auth.CACertFile))
			if err != nil {
				return fmt.Errorf("user add: %w (has objwatch serve run with --data-dir %s?)", err, dataDir)
			}
			if serverURL == "" {
				if serverURL, err = auth.KubeconfigServer(filepath.Join(dataDir, "kubeconfig")); err != nil {
					return fmt.Errorf("user add: %w (or give --server)", err)
				}
			}
			cert, key, err := auth.IssueClientCert(pki, args[0], groups, validity)
			if err != nil {
				return fmt.Errorf("user add: %w", err)
			}
			kc, err := auth.Kubeconfig(serverURL, ca, args[0], cert, key, "")
			if err != nil {
				return fmt.Errorf("user add: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(kc)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "objwatch-data", "the server's data directory (its pki/ca.key signs the certificate)")
	f.StringVar(&serverURL, "server", "", "server URL for the kubeconfig (default: the data dir's admin kubeconfig's)")
	f.StringArrayVar(&groups, "group", nil, "group of the user (repeatable)")
	f.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificate is valid")
	return cmd
}
