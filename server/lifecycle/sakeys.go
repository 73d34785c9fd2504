package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// Servers sharing an etcd accept each other's service-account tokens:
// each publishes the public half of its signing key under
// serviceAccountKeysPrefix + its kid (Kubernetes' key id), and verifies
// tokens with every key found there. A key stays published after its
// server stops, so that the tokens it issued keep working until they
// expire, as a kube-apiserver's --service-account-key-file lists old keys.
const serviceAccountKeysPrefix = registry.Root + "objwatch.io/serviceaccountkeys/"

// ServiceAccountKeys shares Issuer's key with the other servers of Storage.
type ServiceAccountKeys struct {
	Storage storage.Interface
	Issuer  *auth.TokenIssuer
	Log     *slog.Logger
}

// Run publishes the issuer's key and keeps its shared keys those
// published by every server, until ctx ends.
func (k *ServiceAccountKeys) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := k.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		k.Log.Warn("service-account keys: watching again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (k *ServiceAccountKeys) follow(ctx context.Context) error {
	issuer := k.Issuer
	own, err := issuer.PublicKeyPEM()
	if err != nil {
		return err
	}
	if _, err := k.Storage.Create(ctx, serviceAccountKeysPrefix+issuer.KeyID(), own); err != nil && !errors.Is(err, storage.ErrExists) {
		return err
	}
	lr, err := k.Storage.List(ctx, serviceAccountKeysPrefix, storage.ListOptions{})
	if err != nil {
		return err
	}
	keys := map[string][]byte{}
	for _, kv := range lr.KVs {
		keys[kv.Key] = kv.Value
	}
	k.setShared(keys)
	w, err := k.Storage.Watch(ctx, serviceAccountKeysPrefix, lr.Revision+1)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		switch ev.Type {
		case storage.Error:
			return ev.Err
		case storage.Put:
			keys[ev.KV.Key] = ev.KV.Value
		case storage.Delete:
			delete(keys, ev.KV.Key)
		default:
			continue
		}
		k.setShared(keys)
	}
	return errors.New("watch ended")
}

func (k *ServiceAccountKeys) setShared(keys map[string][]byte) {
	pems := make([][]byte, 0, len(keys))
	for _, b := range keys {
		pems = append(pems, b)
	}
	if err := k.Issuer.SetSharedKeys(pems); err != nil {
		k.Log.Error("service-account keys: a published key does not parse", "err", err)
	}
}
