package etcd_test

import (
	"errors"
	"io"
	"log/slog"

	"github.com/objwatch/objwatch/storage"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func isCompacted(err error) bool { return errors.Is(err, storage.ErrCompacted) }
