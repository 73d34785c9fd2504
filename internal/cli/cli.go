// Package cli holds objwatch's cobra commands.
package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Main runs the command line and returns the exit code.
func Main(args []string) int {
	root := &cobra.Command{
		Use:           "objwatch",
		Short:         "A watch-native object store with a Kubernetes-compatible API",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newBenchCommand(), newWatchCommand(), newWhyCommand(), newUserCommand(), newAuditCommand(), newHistoryCommand(), newBlameCommand(), newGetCommand(), newChangesCommand(), newRecordCommand(), newReplayCommand(), newUICommand())
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "objwatch:", err)
		return 1
	}
	return 0
}
