package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// Cluster IPs of Services are allocated from Config.ServiceClusterIPRange.
// Each allocated IP is one key, serviceIPsPrefix + the IP, whose value
// names the service holding it; a new key is taken with a create that
// fails if it exists, so servers sharing an etcd never hand out one IP
// twice (a lost race moves on to another IP). The key is written before
// the service and removed after it is deleted (or when its create fails).
// A key left by a server that stopped in between is taken over once it is
// older than serviceIPLeakAge and no service of its name holds the IP, as
// Kubernetes' repair loop frees an IP it has found leaked for a while.
// The range's first address is the default/kubernetes service's, created
// at bootstrap as kube-apiserver does; dynamic allocation never picks it.

const (
	serviceIPsPrefix = registry.Root + "ranges/serviceips/"
	serviceIPLeakAge = 10 * time.Minute
)

// serviceIPRecord is the value of an allocated IP's key.
type serviceIPRecord struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Allocated time.Time `json:"allocated"`
}

// parseServiceRange checks a --service-cluster-ip-range value: an IPv4
// CIDR of 2^2 to 2^20 addresses (Kubernetes' largest).
func parseServiceRange(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("service cluster IP range %q: must be an IPv4 CIDR", s)
	}
	if p.Bits() < 12 || p.Bits() > 30 {
		return netip.Prefix{}, fmt.Errorf("service cluster IP range %q: must be between /12 and /30", s)
	}
	return p.Masked(), nil
}

// serviceRangeHosts returns the range's first usable address and how many
// there are (without the network and broadcast addresses).
func serviceRangeHosts(p netip.Prefix) (first netip.Addr, n int) {
	return p.Addr().Next(), 1<<(32-p.Bits()) - 2
}

func addrAt(first netip.Addr, i int) netip.Addr {
	b := first.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ServiceIPs allocates and releases Services' cluster IPs, and resolves
// the Services of webhooks.
type ServiceIPs struct {
	*env
	serviceRange  netip.Prefix
	apiServerPort int
	// recreate wakes KeepKubernetesService: default/kubernetes was
	// deleted through this server.
	recreate chan struct{}
}

// kubernetesServiceInterval is how often KeepKubernetesService checks
// that default/kubernetes exists (kube-apiserver's bootstrap controller
// reconciles it every 10 s).
const kubernetesServiceInterval = 10 * time.Second

// KeepKubernetesService recreates default/kubernetes when it has been
// deleted, at once when the deletion went through this server, else
// within kubernetesServiceInterval, until ctx ends. Run it in one
// goroutine.
func (s *ServiceIPs) KeepKubernetesService(ctx context.Context) {
	t := time.NewTicker(kubernetesServiceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.recreate:
		}
		if err := s.bootstrapKubernetesService(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("service: recreate default/kubernetes", "err", err)
		}
	}
}

func (s *ServiceIPs) inServiceRange(a netip.Addr) bool {
	first, n := serviceRangeHosts(s.serviceRange)
	return s.serviceRange.Contains(a) && a.Compare(first) >= 0 && a.Compare(addrAt(first, n-1)) <= 0
}

// allocate gives a new object what its resource allocates before it is
// stored: a ClusterIP service its cluster IP (the one it asks for, or a
// free one). undo releases that when the object is not stored after all.
// A dry run allocates nothing but shows what it would have (the IP asked
// for, checked; else one free now), as kube-apiserver's dry-run allocator.
func (s *ServiceIPs) allocate(ctx context.Context, res *registry.Resource, obj *unstructured.Unstructured, dryRun bool) (undo func(), err error) {
	undo = func() {}
	if !registry.IsServiceResource(res) {
		return undo, nil
	}
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &svc); err != nil {
		return undo, apierrors.NewInternalError(err)
	}
	if !registry.NeedsClusterIP(&svc) {
		return undo, nil
	}
	rec := serviceIPRecord{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}
	ip, err := s.allocateServiceIP(ctx, rec, svc.Spec.ClusterIP, dryRun)
	if err != nil {
		return undo, err
	}
	unstructured.SetNestedField(obj.Object, ip.String(), "spec", "clusterIP")
	unstructured.SetNestedStringSlice(obj.Object, []string{ip.String()}, "spec", "clusterIPs")
	if dryRun {
		return undo, nil
	}
	return func() { s.releaseServiceIP(context.WithoutCancel(ctx), rec, ip.String()) }, nil
}

// released frees what a deleted object held: a service's cluster IP.
func (s *ServiceIPs) released(ctx context.Context, res *registry.Resource, obj *unstructured.Unstructured) {
	if !registry.IsServiceResource(res) {
		return
	}
	ip, _, _ := unstructured.NestedString(obj.Object, "spec", "clusterIP")
	if ip == "" || ip == corev1.ClusterIPNone {
		return
	}
	s.releaseServiceIP(context.WithoutCancel(ctx), serviceIPRecord{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}, ip)
	if obj.GetNamespace() == metav1.NamespaceDefault && obj.GetName() == "kubernetes" {
		select {
		case s.recreate <- struct{}{}:
		default:
		}
	}
}

func allocationError(name, ip, msg string) error {
	return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, name, field.ErrorList{
		field.Invalid(field.NewPath("spec", "clusterIPs"), []string{ip}, fmt.Sprintf("failed to allocate IP %s: %s", ip, msg)),
	})
}

// allocateServiceIP takes want (when set) or a free IP of the range for
// the service rec names; a dry run only finds it.
func (s *ServiceIPs) allocateServiceIP(ctx context.Context, rec serviceIPRecord, want string, dryRun bool) (netip.Addr, error) {
	first, n := serviceRangeHosts(s.serviceRange)
	claim := s.claimServiceIP
	if dryRun {
		claim = s.serviceIPFree
	}
	if want != "" {
		a, err := netip.ParseAddr(want)
		if err != nil || !s.inServiceRange(a) {
			return netip.Addr{}, allocationError(rec.Name, want, "the provided network does not match the current range")
		}
		ok, err := claim(ctx, rec, a)
		switch {
		case err != nil:
			return netip.Addr{}, err
		case !ok:
			return netip.Addr{}, allocationError(rec.Name, want, "provided IP is already allocated")
		}
		return a, nil
	}
	// taken: the addresses with a key; stale: those of them old enough
	// to have leaked, judged from the listed records (claimServiceIP checks
	// again before it takes one over).
	taken, stale := map[string]bool{}, map[string]bool{}
	lr, err := s.store.List(ctx, serviceIPsPrefix, storage.ListOptions{})
	if err != nil {
		return netip.Addr{}, apistatus.Storage(err, schema.GroupResource{Resource: "services"}, rec.Name)
	}
	for _, kv := range lr.KVs {
		ip := kv.Key[len(serviceIPsPrefix):]
		taken[ip] = true
		var cur serviceIPRecord
		if json.Unmarshal(kv.Value, &cur) != nil || time.Since(cur.Allocated) >= serviceIPLeakAge {
			stale[ip] = true
		}
	}
	// From a random place, every address but the first (the kubernetes
	// service's): free ones first, then those whose keys may have leaked.
	start := rand.IntN(n)
	for _, leaked := range []bool{false, true} {
		if leaked && dryRun {
			break // a dry run does not take over a leaked key
		}
		for i := range n {
			a := addrAt(first, (start+i)%n)
			if a == first || taken[a.String()] != leaked || leaked && !stale[a.String()] {
				continue
			}
			ok, err := claim(ctx, rec, a)
			if err != nil {
				return netip.Addr{}, err
			}
			if ok {
				return a, nil
			}
		}
	}
	return netip.Addr{}, apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: range is full"))
}

// serviceIPFree reports whether a has no key: what a dry run would claim.
func (s *ServiceIPs) serviceIPFree(ctx context.Context, _ serviceIPRecord, a netip.Addr) (bool, error) {
	_, err := s.store.Get(ctx, serviceIPsPrefix+a.String())
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return true, nil
	case err != nil:
		return false, apistatus.Storage(err, schema.GroupResource{Resource: "services"}, "")
	}
	return false, nil
}

// claimServiceIP takes a for rec: its key is created, or taken over when
// it has leaked. ok is false when another service holds a.
func (s *ServiceIPs) claimServiceIP(ctx context.Context, rec serviceIPRecord, a netip.Addr) (ok bool, err error) {
	rec.Allocated = time.Now().UTC()
	b, _ := json.Marshal(rec)
	key := serviceIPsPrefix + a.String()
	gr := schema.GroupResource{Resource: "services"}
	_, err = s.store.Create(ctx, key, b)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, storage.ErrExists) {
		return false, apistatus.Storage(err, gr, rec.Name)
	}
	kv, err := s.store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil // released meanwhile: another pass or request gets it
	}
	if err != nil {
		return false, apistatus.Storage(err, gr, rec.Name)
	}
	var cur serviceIPRecord
	if json.Unmarshal(kv.Value, &cur) == nil && time.Since(cur.Allocated) < serviceIPLeakAge {
		return false, nil
	}
	if held, err := s.serviceHolds(ctx, cur, a.String()); err != nil || held {
		return false, err
	}
	if _, err := s.store.Update(ctx, key, b, kv.ModRevision); err != nil {
		if errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
			return false, nil
		}
		return false, apistatus.Storage(err, gr, rec.Name)
	}
	return true, nil
}

// serviceHolds reports whether the service rec names exists with cluster
// IP ip (a quorum read).
func (s *ServiceIPs) serviceHolds(ctx context.Context, rec serviceIPRecord, ip string) (bool, error) {
	res := s.serviceResource()
	if res == nil || rec.Name == "" {
		return false, nil
	}
	obj, err := s.objects.Get(ctx, &objects.Request{Verb: "get", Resource: res, Namespace: rec.Namespace, Name: rec.Name}, nil)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cur, _, _ := unstructured.NestedString(obj.Object, "spec", "clusterIP")
	return cur == ip, nil
}

// releaseServiceIP removes ip's key if it is still rec's. A failure only
// leaves the key to be taken over later.
func (s *ServiceIPs) releaseServiceIP(ctx context.Context, rec serviceIPRecord, ip string) {
	key := serviceIPsPrefix + ip
	kv, err := s.store.Get(ctx, key)
	if err != nil {
		return
	}
	var cur serviceIPRecord
	if json.Unmarshal(kv.Value, &cur) != nil || cur.Namespace != rec.Namespace || cur.Name != rec.Name || cur.UID != rec.UID {
		return
	}
	if _, err := s.store.Delete(ctx, key, kv.ModRevision); err != nil && !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrNotFound) {
		s.log.Warn("service: release cluster IP", "ip", ip, "err", err)
	}
}

func (s *ServiceIPs) serviceResource() *registry.Resource { return s.resource("", "services") }

// bootstrapKubernetesService creates default/kubernetes, the service of
// the API server itself, with the range's first address, unless it
// exists. Several servers may do it at once: one create wins, the others
// find it (and keep the address's key, which names the same service).
func (s *ServiceIPs) bootstrapKubernetesService(ctx context.Context) error {
	res := s.serviceResource()
	if _, err := s.store.Get(ctx, res.Key(metav1.NamespaceDefault, "kubernetes")); !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	first, _ := serviceRangeHosts(s.serviceRange)
	policy := corev1.IPFamilyPolicySingleStack
	traffic := corev1.ServiceInternalTrafficPolicyCluster
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "kubernetes", Namespace: metav1.NamespaceDefault, UID: uuid.NewUUID(),
			CreationTimestamp: metav1.NewTime(time.Now().UTC().Truncate(time.Second)),
			Labels:            map[string]string{"component": "apiserver", "provider": "kubernetes"},
		},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  first.String(),
			ClusterIPs: []string{first.String()},
			Ports: []corev1.ServicePort{{
				Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt(s.apiServerPort),
			}},
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        &policy,
			InternalTrafficPolicy: &traffic,
		},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(svc)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: m}
	rec := serviceIPRecord{Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, Allocated: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	// The first address is the kubernetes service's alone: a key another
	// server left for an earlier one of it (its release may come after
	// this create) is written over.
	key := serviceIPsPrefix + first.String()
	_, err = s.store.Create(ctx, key, b)
	if errors.Is(err, storage.ErrExists) {
		var kv storage.KeyValue
		if kv, err = s.store.Get(ctx, key); err == nil {
			_, err = s.store.Update(ctx, key, b, kv.ModRevision)
		}
		if errors.Is(err, storage.ErrConflict) || errors.Is(err, storage.ErrNotFound) {
			err = nil // another server's bootstrap at the same time
		}
	}
	if err != nil {
		return err
	}
	sb, err := objects.ToStorage(obj)
	if err != nil {
		return err
	}
	if _, err := s.store.Create(ctx, res.Key(svc.Namespace, svc.Name), sb); err != nil && !errors.Is(err, storage.ErrExists) {
		return err
	}
	return nil
}

// ResolveService is the webhook.Resolver of the server's webhooks: objwatch
// runs no cluster network, so a webhook's Service must be of type
// ExternalName, naming a host the server can reach; the port is the one
// the webhook configuration asks for.
func (s *ServiceIPs) ResolveService(ctx context.Context, namespace, name string, port int32) (string, error) {
	res := s.serviceResource()
	svc, err := s.objects.Get(ctx, &objects.Request{Verb: "get", Resource: res, Namespace: namespace, Name: name}, nil)
	if err != nil {
		return "", err
	}
	typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type")
	host, _, _ := unstructured.NestedString(svc.Object, "spec", "externalName")
	if typ != "ExternalName" || host == "" {
		return "", fmt.Errorf("service %s/%s is of type %s: objwatch reaches webhook services of type ExternalName only (spec.externalName: a host this server can reach)", namespace, name, typ)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}
