package instance_test

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/internal/instance"
)

func TestParseEtcdServersOverrides(t *testing.T) {
	got, err := instance.ParseEtcdServersOverrides("/events#http://127.0.0.1:2479;https://10.0.0.2:2379,coordination.k8s.io/leases#http://10.0.0.3:2379")
	if err != nil {
		t.Fatal(err)
	}
	want := []instance.EtcdOverride{
		{Resource: schema.GroupResource{Resource: "events"}, Servers: []string{"http://127.0.0.1:2479", "https://10.0.0.2:2379"}},
		{Resource: schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, Servers: []string{"http://10.0.0.3:2379"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := instance.ParseEtcdServersOverrides(""); got != nil || err != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	for in, msg := range map[string]string{
		"events#http://a:1":                     "the resource must be group/resource",
		"/events":                               "want group/resource#servers",
		"/events#":                              "events has no servers",
		"/events# ; ":                           "events has no servers",
		"/events#127.0.0.1:2379":                "is not an etcd client URL",
		"/events#unix:///x.sock":                "is not an etcd client URL",
		"/events#http://a:1,/events#http://b:1": "events is named twice",
		"a/b/c#http://a:1":                      "the resource must be group/resource",
	} {
		if _, err := instance.ParseEtcdServersOverrides(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error saying %q", in, err, msg)
		}
	}
}

func FuzzParseEtcdServersOverrides(f *testing.F) {
	for _, s := range []string{"/events#http://127.0.0.1:2479", "coordination.k8s.io/leases#https://a:1;https://b:2,/events#http://c:3", "#", "/#;", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		os, err := instance.ParseEtcdServersOverrides(s)
		if err != nil {
			return
		}
		seen := map[schema.GroupResource]bool{}
		for _, o := range os {
			if o.Resource.Resource == "" || len(o.Servers) == 0 || seen[o.Resource] {
				t.Fatalf("%q: accepted %+v", s, os)
			}
			seen[o.Resource] = true
		}
	})
}
