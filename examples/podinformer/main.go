// Command podinformer keeps an informer on Pods with an index on
// spec.nodeName and prints the pods on each node as they come and go:
// the pod informer and node index that controllers and node agents start
// from, built on objwatch's client library (no client-go). It uses the
// kubeconfig of KUBECONFIG or ~/.kube/config; -node limits the output to
// one node.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// NodeIndex names the index of pods by spec.nodeName. Pods not yet
// scheduled are not in it.
const NodeIndex = "spec.nodeName"

var pods = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("pods"), Namespaced: true, Kind: "Pod"}

func main() {
	node := flag.String("node", "", "print only the pods of this node (default: every node)")
	namespace := flag.String("namespace", "", "watch only this namespace (default: all)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg, err := client.Default()
	if err != nil {
		log.Fatal(err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	inf, err := NewInformer(rc, *namespace)
	if err != nil {
		log.Fatal(err)
	}
	if err := Print(ctx, inf, *node, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// NewInformer returns an informer on the Pods of namespace ("" for all)
// with the NodeIndex; the caller runs it.
func NewInformer(rc *client.REST, namespace string) (*informer.SharedInformer[*corev1.Pod], error) {
	return informer.New(client.NewClient[*corev1.Pod](rc, pods), informer.Options[*corev1.Pod]{
		Namespace: namespace,
		Indexers:  informer.Indexers[*corev1.Pod]{NodeIndex: nodeOf},
		// Only spec.nodeName, labels and names are read here.
		DropManagedFields: true,
	})
}

func nodeOf(p *corev1.Pod) []string {
	if p.Spec.NodeName == "" {
		return nil
	}
	return []string{p.Spec.NodeName}
}

// PodsOn answers from the informer's cache which pods run on node, as
// namespace/name, sorted.
func PodsOn(inf *informer.SharedInformer[*corev1.Pod], node string) ([]string, error) {
	ps, err := inf.Lister().ByIndex(NodeIndex, node)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	slices.Sort(names)
	return names, nil
}

// Print runs inf until ctx ends and writes a line to w whenever a pod
// arrives on or leaves a node (only node's, if node is not ""), followed
// by that node's pods as the index then answers. Lines are written from
// one goroutine, the handler's, in the order the changes happened.
func Print(ctx context.Context, inf *informer.SharedInformer[*corev1.Pod], node string, w io.Writer) error {
	show := func(verb string, p *corev1.Pod) {
		if p.Spec.NodeName == "" || node != "" && p.Spec.NodeName != node {
			return
		}
		on, err := PodsOn(inf, p.Spec.NodeName)
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", p.Spec.NodeName, err)
			return
		}
		fmt.Fprintf(w, "%s %s/%s on %s; %s has %d: %v\n", verb, p.Namespace, p.Name, p.Spec.NodeName, p.Spec.NodeName, len(on), on)
	}
	_, err := inf.AddHandler(informer.HandlerFuncs[*corev1.Pod]{
		Add: func(p *corev1.Pod, _ bool) { show("+", p) },
		Update: func(old, new *corev1.Pod) {
			// spec.nodeName is set once (by binding) and never changes
			// after, so only a pod being scheduled moves between entries.
			if old.Spec.NodeName != new.Spec.NodeName {
				show("-", old)
				show("+", new)
			}
		},
		Delete: func(p *corev1.Pod, _ bool) { show("-", p) },
	}, informer.HandlerOptions{Name: "print"})
	if err != nil {
		return err
	}
	inf.Run(ctx)
	return nil
}
