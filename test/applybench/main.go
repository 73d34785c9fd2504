// Command applybench measures server-side apply: 16 concurrent clients
// (-clients), each applying (PATCH application/apply-patch+yaml, its own
// fieldManager) its own object again and again with one data field
// changed each time, first ConfigMaps of about 1 KiB, then custom
// resources of a CRD it creates (widgets.applybench.objwatch.io) with the
// same data under spec. It prints p50, p99 and throughput of each
// scenario for each server, then the p50 ratio of the first server to
// each other.
//
// Servers are given as name=KUBECONFIG; each round runs every server once,
// the order reversed every other round so that no server always runs
// first on a machine that warms up or gets busier:
//
//	go run ./test/applybench [-rounds 3] [-n 200] objwatch=objwatch-data/kubeconfig kas=/tmp/kas/run/admin.kubeconfig
//
// It deletes what it created when it ends (the CRD too).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// server is one API server under test.
type server struct {
	name string
	host string
	hc   *http.Client
}

// do sends one request and returns its status code and body.
func (s *server) do(method, path, contentType, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, s.host+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// scenario is the kind of object applied.
type scenario struct {
	name string
	// path is the collection's path in namespace default.
	path string
	// object returns the applied configuration of client c's object
	// named name with data field "seq" set to seq.
	object func(name string, seq int) string
}

const (
	crdName = "widgets.applybench.objwatch.io"
	crd     = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"` + crdName + `"},
"spec":{"group":"applybench.objwatch.io","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{
"spec":{"type":"object","properties":{"data":{"type":"object","additionalProperties":{"type":"string"}}}}}}}}]}}`
)

// data is ~1 KiB of data fields: 16 keys of 56 bytes and the changing seq.
func data(seq int) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"seq":"%d"`, seq)
	for i := range 16 {
		fmt.Fprintf(&b, `,"key%d":"%s"`, i, strings.Repeat("x", 56))
	}
	b.WriteString("}")
	return b.String()
}

var scenarios = []scenario{
	{
		name: "configmaps",
		path: "/api/v1/namespaces/default/configmaps",
		object: func(name string, seq int) string {
			return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q},"data":%s}`, name, data(seq))
		},
	},
	{
		name: "widgets",
		path: "/apis/applybench.objwatch.io/v1/namespaces/default/widgets",
		object: func(name string, seq int) string {
			return fmt.Sprintf(`{"apiVersion":"applybench.objwatch.io/v1","kind":"Widget","metadata":{"name":%q},"spec":{"data":%s}}`, name, data(seq))
		},
	},
}

// result is one scenario's run against one server.
type result struct {
	p50, p99   time.Duration
	throughput float64 // applies per second
}

func main() {
	clients := flag.Int("clients", 16, "concurrent clients, each applying its own object")
	n := flag.Int("n", 200, "applies per client and scenario (after 10 not measured)")
	rounds := flag.Int("rounds", 3, "rounds; each runs every server once")
	flag.Parse()
	if flag.NArg() == 0 || *clients < 1 || *n < 10 || *rounds < 1 {
		log.Fatal("usage: applybench [-clients 16] [-n 200] [-rounds 3] name=KUBECONFIG...")
	}
	var servers []*server
	for _, arg := range flag.Args() {
		name, kc, ok := strings.Cut(arg, "=")
		if !ok {
			log.Fatalf("%q: want name=KUBECONFIG", arg)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			log.Fatal(err)
		}
		cfg.QPS, cfg.Burst = -1, 0
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			log.Fatal(err)
		}
		s := &server{name: name, host: cfg.Host, hc: hc}
		if err := s.setUp(); err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		defer s.tearDown(*clients)
		servers = append(servers, s)
	}
	results := map[string][]result{} // by server/scenario, one per round
	for r := range *rounds {
		order := slices.Clone(servers)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			for _, sc := range scenarios {
				res, err := s.run(sc, *clients, *n, r)
				if err != nil {
					log.Printf("%s %s: %v", s.name, sc.name, err)
					return // deferred tear-downs run
				}
				fmt.Printf("round %d %s %s: p50=%v p99=%v %.0f applies/s\n", r+1, s.name, sc.name,
					res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond), res.throughput)
				results[s.name+"/"+sc.name] = append(results[s.name+"/"+sc.name], res)
			}
		}
	}
	fmt.Println("medians over rounds:")
	for _, sc := range scenarios {
		var base time.Duration
		for i, s := range servers {
			m := median(results[s.name+"/"+sc.name])
			line := fmt.Sprintf("%s %s: p50=%v p99=%v %.0f applies/s", s.name, sc.name,
				m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond), m.throughput)
			if i == 0 {
				base = m.p50
			} else {
				line += fmt.Sprintf(" (%s/%s p50 %.2f)", servers[0].name, s.name, float64(base)/float64(m.p50))
			}
			fmt.Println(line)
		}
	}
}

// median is each measure's median over rs, taken separately.
func median(rs []result) result {
	var p50s, p99s []time.Duration
	var tps []float64
	for _, r := range rs {
		p50s, p99s, tps = append(p50s, r.p50), append(p99s, r.p99), append(tps, r.throughput)
	}
	slices.Sort(p50s)
	slices.Sort(p99s)
	slices.Sort(tps)
	return result{p50: p50s[len(rs)/2], p99: p99s[len(rs)/2], throughput: tps[len(rs)/2]}
}

// setUp creates the CRD and waits until its resource is served.
func (s *server) setUp() error {
	code, body, err := s.do("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", crd)
	if err != nil {
		return err
	}
	if code != http.StatusCreated && code != http.StatusConflict {
		return fmt.Errorf("create CRD: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if code, _, err := s.do("GET", scenarios[1].path, "", ""); err == nil && code == http.StatusOK {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("CRD %s not served after a minute", crdName)
}

// tearDown deletes the objects and the CRD.
func (s *server) tearDown(clients int) {
	for _, sc := range scenarios {
		for c := range clients {
			s.do("DELETE", fmt.Sprintf("%s/applybench-%d", sc.path, c), "", "")
		}
	}
	s.do("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+crdName, "", "")
}

// run has clients apply their objects n times each, concurrently, after
// 10 unmeasured applies each (the first creates the object in round 0).
// seq continues across rounds so that every apply changes the object.
func (s *server) run(sc scenario, clients, n, round int) (result, error) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var start time.Time
	ready := make(chan struct{})
	var warm sync.WaitGroup
	warm.Add(clients)
	for c := range clients {
		wg.Go(func() {
			name := fmt.Sprintf("applybench-%d", c)
			path := fmt.Sprintf("%s/%s?fieldManager=applybench-%d&force=true", sc.path, name, c)
			seq := round * (n + 10)
			apply := func() error {
				seq++
				code, body, err := s.do("PATCH", path, "application/apply-patch+yaml", sc.object(name, seq))
				if err != nil {
					return err
				}
				if code != http.StatusOK && code != http.StatusCreated {
					return fmt.Errorf("apply %s: %d %s", name, code, body)
				}
				return nil
			}
			for range 10 {
				if errs[c] == nil {
					errs[c] = apply()
				}
			}
			warm.Done()
			<-ready
			for range n {
				if errs[c] != nil {
					return
				}
				t := time.Now()
				errs[c] = apply()
				lat[c] = append(lat[c], time.Since(t))
			}
		})
	}
	warm.Wait()
	start = time.Now()
	close(ready)
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return result{p50: all[len(all)/2], p99: all[len(all)*99/100], throughput: float64(len(all)) / elapsed.Seconds()}, nil
}

func init() {
	log.SetFlags(0)
	log.SetOutput(os.Stderr)
}
