package instance

import (
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// EtcdOverride puts one resource on an etcd cluster of its own
// (--etcd-servers-overrides).
type EtcdOverride struct {
	// Resource is a built-in resource; the core group is "".
	Resource schema.GroupResource
	// Servers are the cluster's client URLs.
	Servers []string
}

// ParseEtcdServersOverrides parses kube-apiserver's --etcd-servers-overrides:
// comma-separated overrides, each `group/resource#servers`, servers being
// client URLs separated by `;` and the core group empty
// (`/events#http://10.0.0.1:2379;http://10.0.0.2:2379`). It refuses an
// override without `#` or `/`, a resource named twice, empty servers and
// a URL that is not http or https with a host. Whether the server has the
// resource is the server's to say (server.New).
func ParseEtcdServersOverrides(s string) ([]EtcdOverride, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []EtcdOverride
	seen := map[schema.GroupResource]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		res, servers, ok := strings.Cut(item, "#")
		if !ok {
			return nil, fmt.Errorf("--etcd-servers-overrides: %q: want group/resource#servers (servers separated by ';', the core group empty: /events#http://127.0.0.1:2379)", item)
		}
		group, resource, ok := strings.Cut(res, "/")
		if !ok || resource == "" || strings.Contains(resource, "/") {
			return nil, fmt.Errorf("--etcd-servers-overrides: %q: the resource must be group/resource (the core group empty: /events)", res)
		}
		gr := schema.GroupResource{Group: group, Resource: resource}
		if seen[gr] {
			return nil, fmt.Errorf("--etcd-servers-overrides: %s is named twice", gr)
		}
		seen[gr] = true
		o := EtcdOverride{Resource: gr}
		for _, u := range strings.Split(servers, ";") {
			u = strings.TrimSpace(u)
			if u == "" {
				continue
			}
			p, err := url.Parse(u)
			if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
				return nil, fmt.Errorf("--etcd-servers-overrides: %s: %q is not an etcd client URL (http:// or https://host:port)", gr, u)
			}
			o.Servers = append(o.Servers, u)
		}
		if len(o.Servers) == 0 {
			return nil, fmt.Errorf("--etcd-servers-overrides: %s has no servers", gr)
		}
		out = append(out, o)
	}
	return out, nil
}
