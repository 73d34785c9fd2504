package informer_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// A typed and an unstructured informer of one selection get the same names
// whichever a program creates first: the unstructured one names its type.
func TestFactoryNamesDoNotDependOnOrder(t *testing.T) {
	rest, err := client.New(&client.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	sel := informer.Selection{Namespace: "default"}
	typedFirst := informer.NewFactory(rest, informer.FactoryOptions{})
	a := informer.Shared[CM](typedFirst, configMaps, sel).Name()
	b := informer.Shared[*unstructured.Unstructured](typedFirst, configMaps, sel).Name()
	unstructuredFirst := informer.NewFactory(rest, informer.FactoryOptions{})
	d := informer.Shared[*unstructured.Unstructured](unstructuredFirst, configMaps, sel).Name()
	c := informer.Shared[CM](unstructuredFirst, configMaps, sel).Name()
	if a != c || b != d || a == b {
		t.Errorf("typed first: %q and %q; unstructured first: %q and %q; want the same two names", a, b, c, d)
	}
	if want := "configmaps/default (*unstructured.Unstructured)"; d != want {
		t.Errorf("unstructured informer alone: %q, want %q", d, want)
	}
	if a != "configmaps/default" {
		t.Errorf("typed informer: %q, want the selection's name", a)
	}
}
