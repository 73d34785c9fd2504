package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the part of the clientcmd v1 Config the client uses.
// []byte fields decode from the base64 the *-data fields hold.
type kubeconfig struct {
	Clusters []struct {
		Name    string    `json:"name"`
		Cluster kcCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User kcUser `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string    `json:"name"`
		Context kcContext `json:"context"`
	} `json:"contexts"`
	CurrentContext string `json:"current-context"`
}

type kcCluster struct {
	file                     string // the file that defined it, for errors
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	ProxyURL                 string `json:"proxy-url"`
	Extensions               []struct {
		Name      string          `json:"name"`
		Extension json.RawMessage `json:"extension"`
	} `json:"extensions"`
}

type kcUser struct {
	ClientCertificate     string  `json:"client-certificate"`
	ClientCertificateData []byte  `json:"client-certificate-data"`
	ClientKey             string  `json:"client-key"`
	ClientKeyData         []byte  `json:"client-key-data"`
	Token                 string  `json:"token"`
	TokenFile             string  `json:"tokenFile"`
	Username              string  `json:"username"`
	Password              string  `json:"password"`
	Exec                  *kcExec `json:"exec"`
	AuthProvider          any     `json:"auth-provider"`
}

type kcExec struct {
	Command            string       `json:"command"`
	Args               []string     `json:"args"`
	Env                []ExecEnvVar `json:"env"`
	APIVersion         string       `json:"apiVersion"`
	InstallHint        string       `json:"installHint"`
	ProvideClusterInfo bool         `json:"provideClusterInfo"`
	InteractiveMode    string       `json:"interactiveMode"`
}

type kcContext struct {
	Cluster   string `json:"cluster"`
	User      string `json:"user"`
	Namespace string `json:"namespace"`
}

// merged is several kubeconfig files merged the way kubectl merges them:
// the first file to define a name wins, and so does the first
// current-context. Paths are made absolute relative to their file.
type merged struct {
	clusters       map[string]kcCluster
	users          map[string]kcUser
	contexts       map[string]kcContext
	currentContext string
}

func loadKubeconfigs(paths []string) (*merged, error) {
	m := &merged{clusters: map[string]kcCluster{}, users: map[string]kcUser{}, contexts: map[string]kcContext{}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		var kc kubeconfig
		if err := yaml.Unmarshal(b, &kc); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", p, err)
		}
		dir := filepath.Dir(p)
		for _, c := range kc.Clusters {
			if _, ok := m.clusters[c.Name]; !ok {
				c.Cluster.CertificateAuthority = resolvePath(dir, c.Cluster.CertificateAuthority)
				c.Cluster.file = p
				m.clusters[c.Name] = c.Cluster
			}
		}
		for _, u := range kc.Users {
			if _, ok := m.users[u.Name]; !ok {
				u.User.ClientCertificate = resolvePath(dir, u.User.ClientCertificate)
				u.User.ClientKey = resolvePath(dir, u.User.ClientKey)
				u.User.TokenFile = resolvePath(dir, u.User.TokenFile)
				// As kubectl: a command with a separator is a path
				// relative to the file; otherwise looked up in PATH.
				if e := u.User.Exec; e != nil && strings.ContainsRune(e.Command, filepath.Separator) {
					e.Command = resolvePath(dir, e.Command)
				}
				m.users[u.Name] = u.User
			}
		}
		for _, c := range kc.Contexts {
			if _, ok := m.contexts[c.Name]; !ok {
				m.contexts[c.Name] = c.Context
			}
		}
		if m.currentContext == "" {
			m.currentContext = kc.CurrentContext
		}
	}
	return m, nil
}

func resolvePath(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	return filepath.Join(dir, p)
}

// FromKubeconfig loads a kubeconfig. path may list several files separated
// by the OS list separator (as KUBECONFIG does); "" means KUBECONFIG, else
// ~/.kube/config. context "" means the current context.
//
// An exec credential plugin of the user becomes Config.Exec (checked as
// kubectl checks it: command and apiVersion required, interactiveMode too
// for v1). Auth providers are not supported; a context whose user needs
// one is an error.
func FromKubeconfig(path, context string) (*Config, error) {
	var paths []string
	if path == "" {
		paths = kubeconfigPaths()
		if len(paths) == 0 {
			return nil, errors.New("kubeconfig: none found (KUBECONFIG, ~/.kube/config)")
		}
	} else {
		paths = filepath.SplitList(path)
	}
	m, err := loadKubeconfigs(paths)
	if err != nil {
		return nil, err
	}
	if context == "" {
		context = m.currentContext
	}
	if context == "" {
		return nil, errors.New("kubeconfig: no current context")
	}
	kctx, ok := m.contexts[context]
	if !ok {
		return nil, fmt.Errorf("kubeconfig: context %q not found", context)
	}
	cl, ok := m.clusters[kctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("kubeconfig: context %q: cluster %q not found", context, kctx.Cluster)
	}
	if cl.Server == "" {
		return nil, fmt.Errorf("kubeconfig: cluster %q has no server", kctx.Cluster)
	}
	hosts, err := serversExtension(cl)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: cluster %q: %w", cl.file, kctx.Cluster, err)
	}
	cfg := &Config{
		Host:       cl.Server,
		Hosts:      hosts,
		CAData:     cl.CertificateAuthorityData,
		CAFile:     cl.CertificateAuthority,
		ServerName: cl.TLSServerName,
		Insecure:   cl.InsecureSkipTLSVerify,
		ProxyURL:   cl.ProxyURL,
		Namespace:  kctx.Namespace,
	}
	if kctx.User != "" {
		u, ok := m.users[kctx.User]
		if !ok {
			return nil, fmt.Errorf("kubeconfig: context %q: user %q not found", context, kctx.User)
		}
		if u.AuthProvider != nil {
			return nil, fmt.Errorf("kubeconfig: user %q: auth providers are not supported", kctx.User)
		}
		if u.Exec != nil {
			e, err := execFromKubeconfig(u.Exec, cl)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig: user %q: %w", kctx.User, err)
			}
			cfg.Exec = e
		}
		cfg.CertData, cfg.CertFile = u.ClientCertificateData, u.ClientCertificate
		cfg.KeyData, cfg.KeyFile = u.ClientKeyData, u.ClientKey
		cfg.BearerToken, cfg.BearerTokenFile = u.Token, u.TokenFile
		cfg.Username, cfg.Password = u.Username, u.Password
	}
	return cfg, nil
}

// ServersExtension names the kubeconfig cluster extension that lists more
// servers of the cluster, for failover (Config.Hosts):
//
//	clusters:
//	- name: prod
//	  cluster:
//	    server: https://a.example:6443       # preferred, Config.Host
//	    certificate-authority-data: ...
//	    extensions:
//	    - name: objwatch.io/servers
//	      extension:
//	        servers:                          # Config.Hosts
//	        - https://b.example:6443
//	        - https://c.example:6443
//
// kubectl and client-go keep a cluster extension they do not know as it
// is and use only server; every server must have a certificate valid for
// its name (or tls-server-name) from the same CA.
const ServersExtension = "objwatch.io/servers"

// serversExtension returns the servers listed by cl's ServersExtension,
// without cl.Server.
func serversExtension(cl kcCluster) ([]string, error) {
	var hosts []string
	for _, x := range cl.Extensions {
		if x.Name != ServersExtension || len(x.Extension) == 0 {
			continue
		}
		var ext struct {
			Servers []string `json:"servers"`
		}
		dec := json.NewDecoder(bytes.NewReader(x.Extension))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ext); err != nil {
			return nil, fmt.Errorf("extension %s: want {servers: [URL, ...]}: %w", ServersExtension, err)
		}
		for _, h := range ext.Servers {
			if _, err := parseHost(h); err != nil {
				return nil, fmt.Errorf("extension %s: %w", ServersExtension, err)
			}
			if h != cl.Server {
				hosts = append(hosts, h)
			}
		}
	}
	return hosts, nil
}

// execFromKubeconfig converts and checks a user's exec section the way
// clientcmd does, cl giving the plugin's cluster config.
func execFromKubeconfig(ke *kcExec, cl kcCluster) (*ExecConfig, error) {
	mode := ke.InteractiveMode
	switch {
	case ke.APIVersion == "":
		return nil, errors.New("exec: apiVersion must be specified")
	case mode == "" && ke.APIVersion == execAPIv1beta1:
		mode = "IfAvailable" // clientcmd's default for v1beta1
	case mode == "":
		return nil, errors.New("exec: interactiveMode must be specified")
	}
	e := &ExecConfig{
		Command:            ke.Command,
		Args:               ke.Args,
		Env:                ke.Env,
		APIVersion:         ke.APIVersion,
		InstallHint:        ke.InstallHint,
		ProvideClusterInfo: ke.ProvideClusterInfo,
		InteractiveMode:    mode,
	}
	for _, x := range cl.Extensions {
		if x.Name == execClusterExtension {
			e.ClusterConfig = x.Extension
		}
	}
	if err := e.validate(); err != nil {
		return nil, err
	}
	return e, nil
}
