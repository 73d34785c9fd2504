package servertest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ListPage is what a page of a list says, tokens decoded: two servers
// give the same page when these are equal (the token's issue time aside).
type ListPage struct {
	RV        string
	Items     []string // name@resourceVersion
	ContRV    int64
	ContStart string
	Remaining int64 // -1: none
	Cont      string
}

func (a *API) Page(path string) ListPage {
	a.T.Helper()
	r := a.JSON("GET", path, "")
	if r.Code != 200 {
		a.T.Fatalf("GET %s = %d %s", path, r.Code, Truncate(r.Body))
	}
	var l struct {
		Metadata metav1.ListMeta `json:"metadata"`
		Items    []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.Body, &l); err != nil {
		a.T.Fatalf("GET %s: %v", path, err)
	}
	p := ListPage{RV: l.Metadata.ResourceVersion, Remaining: -1, Cont: l.Metadata.Continue}
	for _, it := range l.Items {
		p.Items = append(p.Items, it.Metadata.Namespace+"/"+it.Metadata.Name+"@"+it.Metadata.ResourceVersion)
	}
	if l.Metadata.RemainingItemCount != nil {
		p.Remaining = *l.Metadata.RemainingItemCount
	}
	if p.Cont != "" {
		b, err := base64.RawURLEncoding.DecodeString(p.Cont)
		var tok struct {
			V     string `json:"v"`
			RV    int64  `json:"rv"`
			Start string `json:"start"`
		}
		if err != nil || json.Unmarshal(b, &tok) != nil || tok.V != "meta.k8s.io/v1" {
			a.T.Fatalf("GET %s: continue %q is not Kubernetes' token (%v)", path, p.Cont, err)
		}
		p.ContRV, p.ContStart = tok.RV, tok.Start
	}
	return p
}

func (p ListPage) String() string {
	return fmt.Sprintf("rv=%s continue=(%d %q) remaining=%d items=%v", p.RV, p.ContRV, p.ContStart, p.Remaining, p.Items)
}
