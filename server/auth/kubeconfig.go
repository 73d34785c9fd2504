package auth

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the subset of the client-go clientcmd v1 Config that
// WriteKubeconfig needs. []byte fields marshal as standard base64, which is
// what the *-data fields hold.
type kubeconfig struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Users          []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type namedCluster struct {
	Name    string  `json:"name"`
	Cluster cluster `json:"cluster"`
}

type cluster struct {
	Server                   string `json:"server"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
}

type namedUser struct {
	Name string   `json:"name"`
	User authInfo `json:"user"`
}

type authInfo struct {
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKeyData         []byte `json:"client-key-data"`
	Token                 string `json:"token,omitempty"`
}

type namedContext struct {
	Name    string      `json:"name"`
	Context kubecontext `json:"context"`
}

type kubecontext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// WriteKubeconfig writes a kubeconfig for c's admin user to path (mode 0600,
// parent directories 0700), replacing any file there atomically. It has
// cluster and context "objwatch", the latter current, and user "admin" with
// both the client certificate and the bearer token.
func WriteKubeconfig(path, serverURL string, c *Credentials) error {
	b, err := Kubeconfig(serverURL, c.CACertPEM, "admin", c.AdminCertPEM, c.AdminKeyPEM, c.AdminToken)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("auth: kubeconfig: %w", err)
	}
	if err := writeFileAtomic(path, b, 0o600); err != nil {
		return fmt.Errorf("auth: kubeconfig: %w", err)
	}
	return nil
}

// Kubeconfig returns a kubeconfig with cluster and context "objwatch",
// the latter current, for serverURL trusting caPEM, and user userName
// with the client certificate and key (PEM) and, if not empty, a bearer
// token.
func Kubeconfig(serverURL string, caPEM []byte, userName string, certPEM, keyPEM []byte, token string) ([]byte, error) {
	const name = "objwatch"
	b, err := yaml.Marshal(kubeconfig{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []namedCluster{{Name: name, Cluster: cluster{
			Server:                   serverURL,
			CertificateAuthorityData: caPEM,
		}}},
		Users: []namedUser{{Name: userName, User: authInfo{
			ClientCertificateData: certPEM,
			ClientKeyData:         keyPEM,
			Token:                 token,
		}}},
		Contexts:       []namedContext{{Name: name, Context: kubecontext{Cluster: name, User: userName}}},
		CurrentContext: name,
	})
	if err != nil {
		return nil, fmt.Errorf("auth: kubeconfig: %w", err)
	}
	return b, nil
}

// KubeconfigServer returns the server URL of the current context's
// cluster in the kubeconfig at path (as WriteKubeconfig writes it).
func KubeconfigServer(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("auth: kubeconfig: %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return "", fmt.Errorf("auth: kubeconfig %s: %w", path, err)
	}
	for _, ctx := range kc.Contexts {
		if ctx.Name != kc.CurrentContext {
			continue
		}
		for _, c := range kc.Clusters {
			if c.Name == ctx.Context.Cluster {
				return c.Cluster.Server, nil
			}
		}
	}
	return "", fmt.Errorf("auth: kubeconfig %s: no server for the current context", path)
}
