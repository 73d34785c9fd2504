package registry_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// Built-in resources answer kubectl's Table requests with Kubernetes'
// columns (kubectl get ns shows STATUS, get cm DATA, and so on), and a
// secret without a type is Opaque.
func TestBuiltinTables(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create cm", a.JSON("POST", servertest.CMs, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1","b":"2"},"binaryData":{"z":"AA=="}}`), http.StatusCreated)
	sec := a.JSON("POST", "/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"p":"cQ=="}}`)
	servertest.MustCode(t, "create secret", sec, http.StatusCreated)
	if typ := sec.Object()["type"]; typ != "Opaque" {
		t.Errorf("secret created without a type has type %v, want Opaque", typ)
	}
	servertest.MustCode(t, "create lease", a.JSON("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},"spec":{"holderIdentity":"me"}}`), http.StatusCreated)

	for _, c := range []struct {
		path, name string
		cols       string
		cells      string // the cells after the name, Age left out
	}{
		{"/api/v1/namespaces", "default", "[Name Status Age]", "[Active]"},
		{servertest.CMs, "c", "[Name Data Age]", "[3]"},
		{"/api/v1/namespaces/default/secrets", "s", "[Name Type Data Age]", "[Opaque 1]"},
		{"/apis/coordination.k8s.io/v1/namespaces/default/leases", "l", "[Name Holder Age]", "[me]"},
	} {
		req, _ := http.NewRequest("GET", a.Host+c.path, nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := a.C.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var tab metav1.Table
		err = json.NewDecoder(resp.Body).Decode(&tab)
		resp.Body.Close()
		if err != nil || tab.Kind != "Table" {
			t.Fatalf("GET %s as Table = %d, %v", c.path, resp.StatusCode, err)
		}
		var cols []string
		for _, d := range tab.ColumnDefinitions {
			cols = append(cols, d.Name)
		}
		if fmt.Sprint(cols) != c.cols {
			t.Errorf("%s columns %v, want %s", c.path, cols, c.cols)
			continue
		}
		found := false
		for _, row := range tab.Rows {
			if row.Cells[0] != c.name {
				continue
			}
			found = true
			if got := fmt.Sprint(row.Cells[1 : len(row.Cells)-1]); got != c.cells {
				t.Errorf("%s row %s: cells %s, want %s", c.path, c.name, got, c.cells)
			}
			if age, _ := row.Cells[len(row.Cells)-1].(string); age == "" || age == "<unknown>" {
				t.Errorf("%s row %s: age %v", c.path, c.name, row.Cells[len(row.Cells)-1])
			}
		}
		if !found {
			t.Errorf("%s: no row %s", c.path, c.name)
		}
	}
}
