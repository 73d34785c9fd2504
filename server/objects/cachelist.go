package objects

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// list serves a list from the cache where Kubernetes' cacher does (its
// shouldDelegateList, with ListFromCacheSnapshot):
//   - resourceVersion "0": the cache's state, the limit ignored;
//   - none (consistent): after the cache caught up with etcd, a page or all;
//   - NotOlderThan R: once the cache reached R, a page or all;
//   - exact R (resourceVersionMatch=Exact, or R with a limit) and a
//     continue token at R: from the cache's snapshot at R, when it holds one.
//
// A page has the items, continue token, remainingItemCount and
// resourceVersion etcd would give (see storeReader.list): the same token
// continues on either path, on this server or another. A revision the cache has no
// snapshot of, a cache that does not catch up in time, or one that is not
// ready, go to etcd (errNoCache), which serves them or answers 410; so do
// the pages and exact lists of a version a conversion webhook converts.
//
// While the cache loads, a page without selectors, and any list of the
// server's own (client false), is read from etcd; a client's list
// without a limit, or with a selector, at any resourceVersion
// (consistent ones included), waits for the cache instead of
// reading the whole collection from etcd while the cache loads it: at 1M
// objects such lists, retried, took minutes of etcd and CPU each and
// starved the load. (Kubernetes' cacher answers them 429 "storage is
// (re)initializing"; objwatch holds them, bounded by the request's
// timeout, which clients that do not retry 429 also get through.)
func (c *Caches) list(ctx context.Context, res *registry.Resource, ns string, sel selector, plan listPlan, client bool) (*List, error) {
	wc := c.usable(res)
	if wc == nil {
		return nil, errNoCache
	}
	limit := plan.limit
	if res.Versions != nil && res.Versions.Remote() && (plan.fromCont || plan.rev > 0 || (limit > 0 && !plan.any)) {
		// Kubernetes converts each list it serves, so a failing webhook
		// fails every read; this cache holds objects it converted earlier.
		// Its pages go to etcd, which converts them now (as before
		// snapshots; its full lists are still served here).
		return nil, errNoCache
	}
	if _, init := wc.Initializing(); init {
		if !client || (plan.limit > 0 && sel.empty()) {
			return nil, errNoCache // etcd answers while the cache loads; see cacheNotReady
		}
		// Wait for the load, bounded by the request's context; only then
		// does a consistent or not-older-than list wait (briefly) for the
		// cache to catch up, as for a cache that was ready.
		if err := wc.WaitFor(ctx, 0); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, errNoCache // its list failed: etcd answers
		}
	}
	switch {
	case plan.any:
		limit = 0 // as Kubernetes' cacher: "0" lists everything it has
		if err := wc.WaitFor(ctx, 0); err != nil {
			return nil, errNoCache
		}
	case plan.rev > 0 || plan.minRev > 0:
		wctx, cancel := context.WithTimeout(ctx, c.cfg.FutureRVWait)
		err := wc.WaitFor(wctx, max(plan.rev, plan.minRev))
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, watchcache.ErrNotReady), err != nil && plan.rev > 0:
			return nil, errNoCache // etcd answers: its list failed, or an exact revision
		case err != nil:
			return nil, apistatus.TooLarge()
		}
	default:
		if _, err := wc.WaitFresh(ctx); err != nil {
			return nil, errNoCache
		}
	}
	prefix := res.Prefix(ns)
	start := ""
	if plan.start != "" {
		start = prefix + plan.start
	}
	p, err := wc.ListAt(filterOf(sel, ns), plan.rev, start, int(limit))
	if err != nil {
		return nil, errNoCache
	}
	l := &List{Meta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(p.Rev, 10)}, Raw: make([][]byte, len(p.Objects))}
	if c.cfg.ListEncodingsMaxSize > 0 {
		l.Cached, l.made = p.Objects, &c.listItemsEncoded
	}
	for i, o := range p.Objects {
		l.Raw[i] = o.JSON
	}
	if p.More {
		last := p.Objects[len(p.Objects)-1].Key
		l.Meta.Continue = encodeContinue(p.Rev, strings.TrimPrefix(last, prefix)+"\x00", time.Now())
		if p.Remaining >= 0 {
			l.Meta.RemainingItemCount = &p.Remaining
		}
	}
	if limit > 0 || plan.rev > 0 || plan.fromCont {
		c.cachedPages.Add(1)
		if c.cfg.Verify {
			c.verifyList(ctx, res, ns, sel, plan, limit, l)
		}
	}
	return l, nil
}

// verifyList panics where a list the cache served differs from
// etcd's answer at the same revision (Config.Verify): the items and their
// resourceVersions, the continue key and the remaining count. A revision
// etcd has compacted meanwhile is not checked.
func (c *Caches) verifyList(ctx context.Context, res *registry.Resource, ns string, sel selector, plan listPlan, limit int64, l *List) {
	rev, _ := strconv.ParseInt(l.Meta.ResourceVersion, 10, 64)
	items, meta, err := c.etcd.list(ctx, res, ns, sel, listPlan{rev: rev, limit: limit, start: plan.start})
	if err != nil {
		return
	}
	summary := func(keys []string, m metav1.ListMeta) string {
		cont := ""
		if m.Continue != "" {
			t, _ := decodeContinue(m.Continue)
			cont = fmt.Sprintf("%d %q", t.RV, t.Start)
		}
		n := int64(-1)
		if m.RemainingItemCount != nil {
			n = *m.RemainingItemCount
		}
		return fmt.Sprintf("rv %s continue %s remaining %d items %v", m.ResourceVersion, cont, n, keys)
	}
	want := make([]string, len(items))
	for i, o := range items {
		want[i] = o.GetNamespace() + "/" + o.GetName() + "@" + o.GetResourceVersion()
	}
	objs, err := l.Objects()
	if err != nil {
		panic(fmt.Sprintf("list served from the watch cache does not decode: %v", err))
	}
	got := make([]string, len(objs))
	for i, o := range objs {
		got[i] = o.GetNamespace() + "/" + o.GetName() + "@" + o.GetResourceVersion()
	}
	if g, w := summary(got, l.Meta), summary(want, meta); g != w {
		panic(fmt.Sprintf("list of %s served from the watch cache differs from etcd's:\ncache %s\netcd  %s", res.StoragePrefix, g, w))
	}
}

func filterOf(sel selector, ns string) watchcache.Filter {
	return watchcache.Filter{Namespace: ns, Labels: sel.labels, Fields: sel.fields}
}
