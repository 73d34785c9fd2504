package kube_test

import "fmt"

// The parity cases: for every kind, requests whose answers kube-apiserver
// v1.37.2 gave are recorded in testdata/parity.json (see parity_test.go).
// Objects live in namespace parityNS; cluster-scoped ones are named
// parity-*. Times sent are sentTime so that the server's own stand out.

const (
	parityNS = "parity"
	sentTime = "2020-01-01T00:00:00Z"
)

// kindCase is one kind's requests: a valid create (named obj), an invalid
// create, an update of an immutable field, a status change through the
// main resource and through /status, /scale where the kind has it, and
// extra steps after those.
type kindCase struct {
	name      string
	coll      string // collection path
	obj       string // name of the valid object
	valid     string // body of the valid create
	invalid   string // body of the invalid create
	immutable string // merge patch of an immutable field; "" if none
	spec      string // merge patch of a mutable spec field; "" to skip
	status    string // merge patch of status; "": the kind has none
	scale     bool
	extra     []step
	// ignore lists the object paths whose values are not compared, with
	// why: what kube-apiserver's admission plugins add that no objwatch
	// counterpart exists for.
	ignore map[string]string
}

// step is one request.
type step struct {
	name   string
	method string
	path   string
	body   string
	names  bool // a list: only the names of its items are compared
}

// steps expands a case into its requests, in order.
func (c kindCase) steps() []step {
	item := c.coll + "/" + c.obj
	s := []step{
		{name: "create", method: "POST", path: c.coll, body: c.valid},
		{name: "create invalid", method: "POST", path: c.coll, body: c.invalid},
	}
	if c.immutable != "" {
		s = append(s, step{name: "update immutable", method: "PATCH", path: item, body: c.immutable})
	}
	if c.spec != "" {
		s = append(s, step{name: "update spec", method: "PATCH", path: item, body: c.spec})
	}
	if c.status != "" {
		s = append(s,
			step{name: "status via main resource", method: "PATCH", path: item, body: c.status},
			step{name: "status via /status", method: "PATCH", path: item + "/status", body: c.status},
			step{name: "get /status", method: "GET", path: item + "/status"})
	} else {
		s = append(s, step{name: "get /status", method: "GET", path: item + "/status"})
	}
	if c.scale {
		s = append(s,
			step{name: "get /scale", method: "GET", path: item + "/scale"},
			step{name: "update /scale", method: "PATCH", path: item + "/scale", body: `{"spec":{"replicas":3}}`},
			step{name: "get after scale", method: "GET", path: item},
			step{name: "invalid /scale", method: "PATCH", path: item + "/scale", body: `{"spec":{"replicas":-1}}`})
	}
	return append(s, c.extra...)
}

func nsPath(prefix, plural string) string {
	return prefix + "/namespaces/" + parityNS + "/" + plural
}

// obj builds an object's JSON from its apiVersion, kind, name and the
// rest of its fields (JSON without the braces).
func obj(apiVersion, kind, name, rest string) string {
	s := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q}`, apiVersion, kind, name)
	if rest != "" {
		s += "," + rest
	}
	return s + "}"
}

// podSpec is a minimal valid pod spec with restartPolicy rp ("" for the
// default).
func podSpec(rp string) string {
	s := `{"containers":[{"name":"c","image":"nginx"}]`
	if rp != "" {
		s += `,"restartPolicy":"` + rp + `"`
	}
	return s + "}"
}

// template is a pod template labelled app=app.
func template(app, rp string) string {
	return `{"metadata":{"labels":{"app":"` + app + `"}},"spec":` + podSpec(rp) + `}`
}

func workload(apiVersion, kind, name, extraSpec string) string {
	return obj(apiVersion, kind, name, `"spec":{`+extraSpec+`"selector":{"matchLabels":{"app":"`+name+`"}},"template":`+template(name, "")+`}`)
}

const csrRequest = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIS01ITUNBUUF3RVRFUE1BMEdBMVVFQXd3R2NHRnlhWFI1TUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowRApBUWNEUWdBRTVQSEVFakh2Z05pdGE4d0Nxd2RKb0FxVFlsei9RdlNONXFRVTB4TkJ0ckxGemJmVUVKRUxwWnZCClMyTDNiWFNxLzZWd2h2ai9iMjcyTDk0cXJzSDR6YUFBTUFvR0NDcUdTTTQ5QkFNQ0EwY0FNRVFDSURFRnBFdHUKZjZTWW9ST2hmYzQwenZpVFRGcmtDRUFyalFtVFc2YVRjeElTQWlBM2NzM0RDM3hZeGl0dnI1MlZoUGUvSnFsMwp4eU50Q1BZeTdSWUROaDJybWc9PQotLS0tLUVORCBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K"

// podAdmission is what kube-apiserver's default admission plugins add to
// a pod (objwatch has no counterpart for them).
var podAdmission = map[string]string{
	"spec.tolerations":        "DefaultTolerationSeconds admission",
	"spec.priority":           "Priority admission",
	"spec.serviceAccount":     "ServiceAccount admission",
	"spec.serviceAccountName": "ServiceAccount admission",
	"spec.preemptionPolicy":   "Priority admission",
}

// The finalizers kube-apiserver's StorageObjectInUseProtection admission
// adds.
var protection = map[string]string{"metadata.finalizers": "StorageObjectInUseProtection admission"}

// apfController: kube-apiserver's API priority and fairness configuration
// controller writes a FlowSchema's Dangling condition, when it gets to it.
const apfController = "kube-apiserver's APF controller writes status.conditions"

func conditions(typ string) string {
	return `{"status":{"conditions":[{"type":"` + typ + `","status":"True","lastTransitionTime":"` + sentTime + `","reason":"R","message":"m"}]}}`
}

var cases = []kindCase{
	{
		name: "pods", coll: nsPath("/api/v1", "pods"), obj: "p1",
		valid:     obj("v1", "Pod", "p1", `"spec":{"automountServiceAccountToken":false,"containers":[{"name":"c","image":"nginx"}]}`),
		invalid:   obj("v1", "Pod", "p2", `"spec":{"automountServiceAccountToken":false,"containers":[{"name":"c"}]}`),
		immutable: `{"spec":{"restartPolicy":"Never"}}`,
		spec:      `{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}`,
		status:    `{"status":{"phase":"Running","message":"hello"}}`,
		ignore:    podAdmission,
		extra: []step{
			{name: "list by spec.nodeName", method: "GET", path: nsPath("/api/v1", "pods") + "?fieldSelector=spec.nodeName%3Dparity-n1", names: true},
			{name: "list by status.phase", method: "GET", path: nsPath("/api/v1", "pods") + "?fieldSelector=status.phase%3DRunning", names: true},
			{name: "list by unknown field", method: "GET", path: nsPath("/api/v1", "pods") + "?fieldSelector=spec.bogus%3Dx", names: true},
			{name: "list all namespaces by unknown field", method: "GET", path: "/api/v1/pods?fieldSelector=status.bogus%3Dx", names: true},
			{name: "bind", method: "POST", path: nsPath("/api/v1", "pods") + "/p1/binding",
				body: `{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p1"},"target":{"apiVersion":"v1","kind":"Node","name":"parity-n1"}}`},
			{name: "bind again", method: "POST", path: nsPath("/api/v1", "pods") + "/p1/binding",
				body: `{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p1"},"target":{"apiVersion":"v1","kind":"Node","name":"parity-n2"}}`},
			{name: "bind other name", method: "POST", path: nsPath("/api/v1", "pods") + "/p1/binding",
				body: `{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p9"},"target":{"apiVersion":"v1","kind":"Node","name":"parity-n1"}}`},
			{name: "bind without target", method: "POST", path: nsPath("/api/v1", "pods") + "/p3/binding",
				body: `{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p3"},"target":{}}`},
			{name: "get bound", method: "GET", path: nsPath("/api/v1", "pods") + "/p1"},
			{name: "list bound by spec.nodeName", method: "GET", path: nsPath("/api/v1", "pods") + "?fieldSelector=spec.nodeName%3Dparity-n1", names: true},
			{name: "create p3", method: "POST", path: nsPath("/api/v1", "pods"),
				body: obj("v1", "Pod", "p3", `"spec":{"automountServiceAccountToken":false,"containers":[{"name":"c","image":"nginx"}]}`)},
			{name: "evict", method: "POST", path: nsPath("/api/v1", "pods") + "/p3/eviction",
				body: `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p3","namespace":"parity"}}`},
			{name: "get evicted", method: "GET", path: nsPath("/api/v1", "pods") + "/p3"},
			{name: "create with warnings", method: "POST", path: nsPath("/api/v1", "pods"),
				body: obj("v1", "Pod", "p5", `"spec":{"automountServiceAccountToken":false,"nodeSelector":{"beta.kubernetes.io/arch":"amd64"},"containers":[{"name":"c","image":"nginx"}]}`)},
			{name: "update with warnings", method: "PATCH", path: nsPath("/api/v1", "pods") + "/p5", body: `{"metadata":{"labels":{"a":"b"}}}`},
			{name: "add an ephemeral container", method: "PATCH", path: nsPath("/api/v1", "pods") + "/p5/ephemeralcontainers",
				body: `{"spec":{"ephemeralContainers":[{"name":"debug","image":"busybox","targetContainerName":"c"}]}}`},
			{name: "get /ephemeralcontainers", method: "GET", path: nsPath("/api/v1", "pods") + "/p5/ephemeralcontainers"},
			{name: "remove an ephemeral container", method: "PATCH", path: nsPath("/api/v1", "pods") + "/p5/ephemeralcontainers",
				body: `{"spec":{"ephemeralContainers":[]}}`},
			{name: "ephemeral container via main resource", method: "PATCH", path: nsPath("/api/v1", "pods") + "/p1",
				body: `{"spec":{"ephemeralContainers":[{"name":"debug","image":"busybox"}]}}`},
			{name: "resize", method: "PATCH", path: nsPath("/api/v1", "pods") + "/p5/resize",
				body: `{"spec":{"containers":[{"name":"c","image":"nginx","resources":{"requests":{"cpu":"100m"},"limits":{"cpu":"200m"}}}]}}`},
			{name: "resize other fields", method: "PATCH", path: nsPath("/api/v1", "pods") + "/p5/resize",
				body: `{"spec":{"containers":[{"name":"c","image":"nginx:3"}]}}`},
			{name: "get /resize", method: "GET", path: nsPath("/api/v1", "pods") + "/p5/resize"},
			{name: "evict missing", method: "POST", path: nsPath("/api/v1", "pods") + "/p4/eviction",
				body: `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p4","namespace":"parity"}}`},
		},
	},
	{
		name: "nodes", coll: "/api/v1/nodes", obj: "parity-n1",
		valid:     obj("v1", "Node", "parity-n1", `"spec":{"podCIDR":"10.1.0.0/24","podCIDRs":["10.1.0.0/24"]}`),
		invalid:   obj("v1", "Node", "parity-n2", `"spec":{"podCIDR":"bogus"}`),
		immutable: `{"spec":{"podCIDR":"10.2.0.0/24","podCIDRs":["10.2.0.0/24"]}}`,
		spec:      `{"spec":{"unschedulable":true}}`,
		status:    `{"status":{"capacity":{"cpu":"4"},"allocatable":{"cpu":"4"}}}`,
		ignore:    map[string]string{"spec.taints": "TaintNodesByCondition admission"},
		extra: []step{
			{name: "list by spec.unschedulable", method: "GET", path: "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue", names: true},
			{name: "list by unknown field", method: "GET", path: "/api/v1/nodes?fieldSelector=spec.bogus%3Dtrue", names: true},
		},
	},
	{
		name: "persistentvolumes", coll: "/api/v1/persistentvolumes", obj: "parity-pv1",
		valid:     obj("v1", "PersistentVolume", "parity-pv1", `"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],"hostPath":{"path":"/tmp/pv1"}}`),
		invalid:   obj("v1", "PersistentVolume", "parity-pv2", `"spec":{"accessModes":["ReadWriteOnce"],"hostPath":{"path":"/tmp/pv2"}}`),
		immutable: `{"spec":{"hostPath":{"path":"/tmp/other"}}}`,
		spec:      `{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}`,
		status:    `{"status":{"phase":"Available"}}`,
		ignore:    protection,
	},
	{
		name: "persistentvolumeclaims", coll: nsPath("/api/v1", "persistentvolumeclaims"), obj: "pvc1",
		valid:     obj("v1", "PersistentVolumeClaim", "pvc1", `"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}`),
		invalid:   obj("v1", "PersistentVolumeClaim", "pvc2", `"spec":{"resources":{"requests":{"storage":"1Gi"}}}`),
		immutable: `{"spec":{"accessModes":["ReadWriteMany"]}}`,
		status:    `{"status":{"phase":"Bound"}}`,
		ignore:    protection,
	},
	{
		name: "endpoints", coll: nsPath("/api/v1", "endpoints"), obj: "ep1",
		valid:   obj("v1", "Endpoints", "ep1", `"subsets":[{"addresses":[{"ip":"10.1.2.3"}],"ports":[{"port":80}]}]`),
		invalid: obj("v1", "Endpoints", "ep2", `"subsets":[{"addresses":[{"ip":"bogus"}],"ports":[{"port":80}]}]`),
	},
	{
		name: "podtemplates", coll: nsPath("/api/v1", "podtemplates"), obj: "pt1",
		valid:   obj("v1", "PodTemplate", "pt1", `"template":`+template("pt1", "")),
		invalid: obj("v1", "PodTemplate", "pt2", `"template":{"spec":{"containers":[{"name":"c"}]}}`),
		spec:    `{"template":{"metadata":{"labels":{"app":"pt1b"}}}}`,
	},
	{
		name: "replicationcontrollers", coll: nsPath("/api/v1", "replicationcontrollers"), obj: "rc1",
		valid:   obj("v1", "ReplicationController", "rc1", `"spec":{"replicas":1,"selector":{"app":"rc1"},"template":`+template("rc1", "")+`}`),
		invalid: obj("v1", "ReplicationController", "rc2", `"spec":{"replicas":-1,"selector":{"app":"rc2"},"template":`+template("rc2", "")+`}`),
		spec:    `{"spec":{"minReadySeconds":5}}`,
		status:  `{"status":{"replicas":1,"readyReplicas":1}}`,
		scale:   true,
	},
	{
		name: "deployments", coll: nsPath("/apis/apps/v1", "deployments"), obj: "d1",
		valid:     workload("apps/v1", "Deployment", "d1", ""),
		invalid:   obj("apps/v1", "Deployment", "d2", `"spec":{"selector":{"matchLabels":{"app":"other"}},"template":`+template("d2", "")+`}`),
		immutable: `{"spec":{"selector":{"matchLabels":{"app":"d1","x":"y"}}}}`,
		spec:      `{"spec":{"minReadySeconds":5}}`,
		status:    `{"status":{"replicas":1,"observedGeneration":1}}`,
		scale:     true,
		extra: []step{
			{name: "create with warnings", method: "POST", path: nsPath("/apis/apps/v1", "deployments"),
				body: obj("apps/v1", "Deployment", "d3", `"spec":{"selector":{"matchLabels":{"app":"d3"}},"template":{"metadata":{"labels":{"app":"d3"}},"spec":{"nodeSelector":{"beta.kubernetes.io/arch":"amd64"},"containers":[{"name":"c","image":"nginx"}]}}}`)},
		},
	},
	{
		name: "statefulsets", coll: nsPath("/apis/apps/v1", "statefulsets"), obj: "s1",
		valid:     workload("apps/v1", "StatefulSet", "s1", `"serviceName":"s1",`),
		invalid:   workload("apps/v1", "StatefulSet", "s2", `"podManagementPolicy":"Bogus",`),
		immutable: `{"spec":{"podManagementPolicy":"Parallel"}}`,
		spec:      `{"spec":{"minReadySeconds":5}}`,
		status:    `{"status":{"replicas":1,"availableReplicas":0}}`,
		scale:     true,
	},
	{
		name: "daemonsets", coll: nsPath("/apis/apps/v1", "daemonsets"), obj: "ds1",
		valid:     workload("apps/v1", "DaemonSet", "ds1", ""),
		invalid:   workload("apps/v1", "DaemonSet", "ds2", `"minReadySeconds":-1,`),
		immutable: `{"spec":{"selector":{"matchLabels":{"app":"ds1","x":"y"}}}}`,
		spec:      `{"spec":{"minReadySeconds":5}}`,
		status:    `{"status":{"currentNumberScheduled":1,"desiredNumberScheduled":1,"numberMisscheduled":0,"numberReady":1}}`,
	},
	{
		name: "replicasets", coll: nsPath("/apis/apps/v1", "replicasets"), obj: "rs1",
		valid:     workload("apps/v1", "ReplicaSet", "rs1", ""),
		invalid:   workload("apps/v1", "ReplicaSet", "rs2", `"replicas":-2,`),
		immutable: `{"spec":{"selector":{"matchLabels":{"app":"rs1","x":"y"}}}}`,
		spec:      `{"spec":{"minReadySeconds":5}}`,
		status:    `{"status":{"replicas":1,"fullyLabeledReplicas":1}}`,
		scale:     true,
		extra: []step{
			{name: "list by status.replicas", method: "GET", path: nsPath("/apis/apps/v1", "replicasets") + "?fieldSelector=status.replicas%3D1", names: true},
		},
	},
	{
		name: "controllerrevisions", coll: nsPath("/apis/apps/v1", "controllerrevisions"), obj: "cr1",
		valid:     obj("apps/v1", "ControllerRevision", "cr1", `"data":{"a":1},"revision":1`),
		invalid:   obj("apps/v1", "ControllerRevision", "cr2", `"data":{"a":1},"revision":-1`),
		immutable: `{"data":{"a":2}}`,
		spec:      `{"revision":2}`,
	},
	{
		name: "jobs", coll: nsPath("/apis/batch/v1", "jobs"), obj: "j1",
		valid:     obj("batch/v1", "Job", "j1", `"spec":{"template":{"spec":`+podSpec("Never")+`}}`),
		invalid:   obj("batch/v1", "Job", "j2", `"spec":{"template":{"spec":`+podSpec("Always")+`}}`),
		immutable: `{"spec":{"completions":2}}`,
		spec:      `{"spec":{"activeDeadlineSeconds":100}}`,
		status:    `{"status":{"startTime":"` + sentTime + `","active":1}}`,
	},
	{
		name: "cronjobs", coll: nsPath("/apis/batch/v1", "cronjobs"), obj: "cj1",
		valid:   obj("batch/v1", "CronJob", "cj1", `"spec":{"schedule":"*/5 * * * *","jobTemplate":{"spec":{"template":{"spec":`+podSpec("OnFailure")+`}}}}`),
		invalid: obj("batch/v1", "CronJob", "cj2", `"spec":{"schedule":"bogus","jobTemplate":{"spec":{"template":{"spec":`+podSpec("OnFailure")+`}}}}`),
		spec:    `{"spec":{"suspend":true}}`,
		status:  `{"status":{"lastScheduleTime":"` + sentTime + `"}}`,
	},
	{
		name: "horizontalpodautoscalers v2", coll: nsPath("/apis/autoscaling/v2", "horizontalpodautoscalers"), obj: "h2",
		valid: obj("autoscaling/v2", "HorizontalPodAutoscaler", "h2",
			`"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d1"},"maxReplicas":3,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":50}}}]}`),
		invalid: obj("autoscaling/v2", "HorizontalPodAutoscaler", "h2b", `"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d1"},"maxReplicas":0}`),
		spec:    `{"spec":{"maxReplicas":4}}`,
		status:  `{"status":{"currentReplicas":1,"desiredReplicas":2}}`,
		extra: []step{
			{name: "get as v1", method: "GET", path: nsPath("/apis/autoscaling/v1", "horizontalpodautoscalers") + "/h2"},
		},
	},
	{
		name: "horizontalpodautoscalers v1", coll: nsPath("/apis/autoscaling/v1", "horizontalpodautoscalers"), obj: "h1",
		valid:   obj("autoscaling/v1", "HorizontalPodAutoscaler", "h1", `"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"d1"},"maxReplicas":3,"targetCPUUtilizationPercentage":50}`),
		invalid: obj("autoscaling/v1", "HorizontalPodAutoscaler", "h1b", `"spec":{"scaleTargetRef":{"kind":"Deployment","name":"d1"},"minReplicas":5,"maxReplicas":3}`),
		spec:    `{"spec":{"maxReplicas":4}}`,
		status:  `{"status":{"currentReplicas":1,"desiredReplicas":2}}`,
		extra: []step{
			{name: "get as v2", method: "GET", path: nsPath("/apis/autoscaling/v2", "horizontalpodautoscalers") + "/h1"},
		},
	},
	{
		name: "ingresses", coll: nsPath("/apis/networking.k8s.io/v1", "ingresses"), obj: "ing1",
		valid:   obj("networking.k8s.io/v1", "Ingress", "ing1", `"spec":{"rules":[{"host":"a.example.com","http":{"paths":[{"path":"/","pathType":"Prefix","backend":{"service":{"name":"s","port":{"number":80}}}}]}}]}`),
		invalid: obj("networking.k8s.io/v1", "Ingress", "ing2", `"spec":{"rules":[{"host":"bad_host","http":{"paths":[{"path":"/","pathType":"Prefix","backend":{"service":{"name":"s","port":{"number":80}}}}]}}]}`),
		spec:    `{"spec":{"ingressClassName":"parity-ic"}}`,
		status:  `{"status":{"loadBalancer":{"ingress":[{"ip":"10.9.9.9"}]}}}`,
	},
	{
		name: "ingressclasses", coll: "/apis/networking.k8s.io/v1/ingressclasses", obj: "parity-ic",
		valid:     obj("networking.k8s.io/v1", "IngressClass", "parity-ic", `"spec":{"controller":"example.com/ic"}`),
		invalid:   obj("networking.k8s.io/v1", "IngressClass", "parity-ic2", `"spec":{"controller":"Bad Controller"}`),
		immutable: `{"spec":{"controller":"example.com/other"}}`,
	},
	{
		name: "networkpolicies", coll: nsPath("/apis/networking.k8s.io/v1", "networkpolicies"), obj: "np1",
		valid:   obj("networking.k8s.io/v1", "NetworkPolicy", "np1", `"spec":{"podSelector":{},"policyTypes":["Ingress"]}`),
		invalid: obj("networking.k8s.io/v1", "NetworkPolicy", "np2", `"spec":{"podSelector":{},"policyTypes":["Bogus"]}`),
		spec:    `{"spec":{"policyTypes":["Ingress","Egress"]}}`,
	},
	{
		name: "ipaddresses", coll: "/apis/networking.k8s.io/v1/ipaddresses", obj: "192.168.7.1",
		valid:     obj("networking.k8s.io/v1", "IPAddress", "192.168.7.1", `"spec":{"parentRef":{"group":"","resource":"services","namespace":"parity","name":"s"}}`),
		invalid:   obj("networking.k8s.io/v1", "IPAddress", "not-an-ip", `"spec":{"parentRef":{"group":"","resource":"services","namespace":"parity","name":"s"}}`),
		immutable: `{"spec":{"parentRef":{"name":"t"}}}`,
	},
	{
		name: "servicecidrs", coll: "/apis/networking.k8s.io/v1/servicecidrs", obj: "parity-cidr",
		valid:     obj("networking.k8s.io/v1", "ServiceCIDR", "parity-cidr", `"spec":{"cidrs":["10.200.0.0/24"]}`),
		invalid:   obj("networking.k8s.io/v1", "ServiceCIDR", "parity-cidr2", `"spec":{"cidrs":["bogus"]}`),
		immutable: `{"spec":{"cidrs":["10.201.0.0/24"]}}`,
		status:    conditions("Ready"),
	},
	{
		name: "poddisruptionbudgets", coll: nsPath("/apis/policy/v1", "poddisruptionbudgets"), obj: "pdb1",
		valid:   obj("policy/v1", "PodDisruptionBudget", "pdb1", `"spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"pdb"}}}`),
		invalid: obj("policy/v1", "PodDisruptionBudget", "pdb2", `"spec":{"minAvailable":1,"maxUnavailable":1}`),
		spec:    `{"spec":{"minAvailable":2}}`,
		status:  `{"status":{"currentHealthy":1,"desiredHealthy":1,"disruptionsAllowed":0,"expectedPods":1}}`,
		ignore:  podAdmission,
		// Evictions of a running pod the budget selects.
		extra: []step{
			{name: "create running pod", method: "POST", path: nsPath("/api/v1", "pods"),
				body: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pe1","labels":{"app":"pdb"}},"spec":{"automountServiceAccountToken":false,"containers":[{"name":"c","image":"nginx"}]}}`},
			{name: "mark running", method: "PATCH", path: nsPath("/api/v1", "pods") + "/pe1/status",
				body: `{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`},
			{name: "evict unprocessed budget", method: "POST", path: nsPath("/api/v1", "pods") + "/pe1/eviction",
				body: `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"pe1"}}`},
			{name: "budget allows none", method: "PATCH", path: nsPath("/apis/policy/v1", "poddisruptionbudgets") + "/pdb1/status",
				body: `{"status":{"observedGeneration":2,"currentHealthy":1,"desiredHealthy":2,"disruptionsAllowed":0,"expectedPods":1}}`},
			{name: "evict refused", method: "POST", path: nsPath("/api/v1", "pods") + "/pe1/eviction",
				body: `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"pe1"}}`},
			{name: "budget allows one", method: "PATCH", path: nsPath("/apis/policy/v1", "poddisruptionbudgets") + "/pdb1/status",
				body: `{"status":{"observedGeneration":2,"currentHealthy":2,"desiredHealthy":1,"disruptionsAllowed":1,"expectedPods":2}}`},
			{name: "evict allowed", method: "POST", path: nsPath("/api/v1", "pods") + "/pe1/eviction",
				body: `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"pe1"}}`},
			{name: "get evicted", method: "GET", path: nsPath("/api/v1", "pods") + "/pe1"},
		},
	},
	{
		name: "storageclasses", coll: "/apis/storage.k8s.io/v1/storageclasses", obj: "parity-sc",
		valid:     obj("storage.k8s.io/v1", "StorageClass", "parity-sc", `"provisioner":"example.com/p","parameters":{"a":"b"}`),
		invalid:   obj("storage.k8s.io/v1", "StorageClass", "parity-sc2", `"parameters":{"a":"b"}`),
		immutable: `{"provisioner":"example.com/q"}`,
		spec:      `{"allowVolumeExpansion":true}`,
	},
	{
		name: "volumeattachments", coll: "/apis/storage.k8s.io/v1/volumeattachments", obj: "parity-va",
		valid:     obj("storage.k8s.io/v1", "VolumeAttachment", "parity-va", `"spec":{"attacher":"example.com","nodeName":"parity-n1","source":{"persistentVolumeName":"parity-pv1"}}`),
		invalid:   obj("storage.k8s.io/v1", "VolumeAttachment", "parity-va2", `"spec":{"nodeName":"parity-n1","source":{"persistentVolumeName":"parity-pv1"}}`),
		immutable: `{"spec":{"nodeName":"parity-n2"}}`,
		status:    `{"status":{"attached":true}}`,
	},
	{
		name: "csidrivers", coll: "/apis/storage.k8s.io/v1/csidrivers", obj: "parity.example.com",
		valid:     obj("storage.k8s.io/v1", "CSIDriver", "parity.example.com", `"spec":{"attachRequired":true}`),
		invalid:   obj("storage.k8s.io/v1", "CSIDriver", "bad_name", `"spec":{}`),
		immutable: `{"spec":{"attachRequired":false}}`,
	},
	{
		name: "csinodes", coll: "/apis/storage.k8s.io/v1/csinodes", obj: "parity-n1",
		valid:     obj("storage.k8s.io/v1", "CSINode", "parity-n1", `"spec":{"drivers":[{"name":"parity.example.com","nodeID":"id1"}]}`),
		invalid:   obj("storage.k8s.io/v1", "CSINode", "parity-n2", `"spec":{"drivers":[{"name":"bad_name","nodeID":"id1"}]}`),
		immutable: `{"spec":{"drivers":[{"name":"parity.example.com","nodeID":"id2"}]}}`,
	},
	{
		name: "csistoragecapacities", coll: nsPath("/apis/storage.k8s.io/v1", "csistoragecapacities"), obj: "cap1",
		valid:     obj("storage.k8s.io/v1", "CSIStorageCapacity", "cap1", `"storageClassName":"parity-sc","capacity":"1Gi"`),
		invalid:   obj("storage.k8s.io/v1", "CSIStorageCapacity", "cap2", `"capacity":"1Gi"`),
		immutable: `{"storageClassName":"other"}`,
		spec:      `{"capacity":"2Gi"}`,
	},
	{
		name: "volumeattributesclasses", coll: "/apis/storage.k8s.io/v1/volumeattributesclasses", obj: "parity-vac",
		valid:     obj("storage.k8s.io/v1", "VolumeAttributesClass", "parity-vac", `"driverName":"example.com/d","parameters":{"a":"b"}`),
		invalid:   obj("storage.k8s.io/v1", "VolumeAttributesClass", "parity-vac2", `"parameters":{"a":"b"}`),
		immutable: `{"parameters":{"a":"c"}}`,
		ignore:    protection,
	},
	{
		name: "endpointslices", coll: nsPath("/apis/discovery.k8s.io/v1", "endpointslices"), obj: "es1",
		valid:     obj("discovery.k8s.io/v1", "EndpointSlice", "es1", `"addressType":"IPv4","endpoints":[{"addresses":["10.1.2.3"]}],"ports":[{"port":80}]`),
		invalid:   obj("discovery.k8s.io/v1", "EndpointSlice", "es2", `"addressType":"Bogus","endpoints":[]`),
		immutable: `{"addressType":"FQDN"}`,
	},
	{
		name: "priorityclasses", coll: "/apis/scheduling.k8s.io/v1/priorityclasses", obj: "parity-pc",
		valid:     obj("scheduling.k8s.io/v1", "PriorityClass", "parity-pc", `"value":1000`),
		invalid:   obj("scheduling.k8s.io/v1", "PriorityClass", "system-parity", `"value":1000`),
		immutable: `{"value":2000}`,
		spec:      `{"description":"d"}`,
	},
	{
		name: "runtimeclasses", coll: "/apis/node.k8s.io/v1/runtimeclasses", obj: "parity-rc",
		valid:     obj("node.k8s.io/v1", "RuntimeClass", "parity-rc", `"handler":"runc"`),
		invalid:   obj("node.k8s.io/v1", "RuntimeClass", "parity-rc2", `"handler":"Bad_Handler"`),
		immutable: `{"handler":"crun"}`,
	},
	{
		name: "certificatesigningrequests", coll: "/apis/certificates.k8s.io/v1/certificatesigningrequests", obj: "parity-csr",
		valid: obj("certificates.k8s.io/v1", "CertificateSigningRequest", "parity-csr",
			`"spec":{"request":"`+csrRequest+`","signerName":"example.com/s","usages":["digital signature"]}`),
		invalid:   obj("certificates.k8s.io/v1", "CertificateSigningRequest", "parity-csr2", `"spec":{"request":"`+csrRequest+`","usages":["digital signature"]}`),
		immutable: `{"spec":{"signerName":"example.com/t"}}`,
		status:    `{"status":{"conditions":[{"type":"Failed","status":"True","reason":"R","message":"m"}]}}`,
		// The credential id is the client certificate's fingerprint.
		ignore: map[string]string{"spec.extra": "the client certificate differs"},
		extra: []step{
			{name: "approve", method: "PATCH", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests/parity-csr/approval",
				body: `{"status":{"conditions":[{"type":"Approved","status":"True","reason":"R","message":"m"}]}}`},
			{name: "create another", method: "POST", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests",
				body: obj("certificates.k8s.io/v1", "CertificateSigningRequest", "parity-csr3", `"spec":{"request":"`+csrRequest+`","signerName":"example.com/s","usages":["digital signature"]}`)},
			{name: "approve another", method: "PATCH", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests/parity-csr3/approval",
				body: `{"status":{"conditions":[{"type":"Approved","status":"True","reason":"R","message":"m"}]}}`},
			{name: "get /approval", method: "GET", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests/parity-csr3/approval"},
			{name: "deny approved", method: "PATCH", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests/parity-csr3/approval",
				body: `{"status":{"conditions":[{"type":"Denied","status":"True","reason":"R","message":"m"}]}}`},
			{name: "delete /approval", method: "DELETE", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests/parity-csr3/approval"},
			{name: "list by spec.signerName", method: "GET", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests?fieldSelector=spec.signerName%3Dexample.com%2Fs", names: true},
		},
	},
	{
		name: "flowschemas", coll: "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", obj: "parity-fs",
		valid: obj("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "parity-fs",
			`"spec":{"priorityLevelConfiguration":{"name":"parity-plc"},"matchingPrecedence":5000,"rules":[{"subjects":[{"kind":"Group","group":{"name":"parity"}}],"resourceRules":[{"verbs":["get"],"apiGroups":[""],"resources":["pods"],"namespaces":["*"]}]}]}`),
		invalid: obj("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "parity-fs2", `"spec":{"priorityLevelConfiguration":{"name":"parity-plc"},"matchingPrecedence":20000}`),
		spec:    `{"spec":{"matchingPrecedence":5001}}`,
		status:  conditions("Dangling"),
		ignore: map[string]string{
			"update spec|status.conditions":              apfController,
			"status via main resource|status.conditions": apfController,
		},
	},
	{
		name: "prioritylevelconfigurations", coll: "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", obj: "parity-plc",
		valid:     obj("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration", "parity-plc", `"spec":{"type":"Limited","limited":{"nominalConcurrencyShares":5,"limitResponse":{"type":"Reject"}}}`),
		invalid:   obj("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration", "parity-plc2", `"spec":{"type":"Bogus"}`),
		immutable: `{"spec":{"type":"Exempt","limited":null,"exempt":{}}}`,
		spec:      `{"spec":{"limited":{"nominalConcurrencyShares":6}}}`,
		status:    conditions("ConcurrencyShared"),
	},
	{
		name: "deviceclasses", coll: "/apis/resource.k8s.io/v1/deviceclasses", obj: "parity-dc",
		valid:   obj("resource.k8s.io/v1", "DeviceClass", "parity-dc", `"spec":{"selectors":[{"cel":{"expression":"true"}}]}`),
		invalid: obj("resource.k8s.io/v1", "DeviceClass", "parity-dc2", `"spec":{"selectors":[{"cel":{"expression":"1 +"}}]}`),
		spec:    `{"spec":{"selectors":[{"cel":{"expression":"false"}}]}}`,
	},
	{
		name: "resourceslices", coll: "/apis/resource.k8s.io/v1/resourceslices", obj: "parity-rs",
		valid: obj("resource.k8s.io/v1", "ResourceSlice", "parity-rs",
			`"spec":{"driver":"parity.example.com","pool":{"name":"p","generation":1,"resourceSliceCount":1},"nodeName":"parity-n1","devices":[{"name":"d0"}]}`),
		invalid:   obj("resource.k8s.io/v1", "ResourceSlice", "parity-rs2", `"spec":{"pool":{"name":"p","generation":1,"resourceSliceCount":1},"nodeName":"parity-n1"}`),
		immutable: `{"spec":{"nodeName":"parity-n2"}}`,
		extra: []step{
			{name: "list by spec.driver", method: "GET", path: "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dparity.example.com", names: true},
		},
	},
	// Last: a LimitRange and a ResourceQuota in the namespace act on the
	// pods created after them in kube-apiserver (admission).
	{
		name: "limitranges", coll: nsPath("/api/v1", "limitranges"), obj: "lr1",
		valid:   obj("v1", "LimitRange", "lr1", `"spec":{"limits":[{"type":"Container","max":{"cpu":"2"}}]}`),
		invalid: obj("v1", "LimitRange", "lr2", `"spec":{"limits":[{"type":"Container","max":{"cpu":"1"},"min":{"cpu":"2"}}]}`),
		spec:    `{"spec":{"limits":[{"type":"Container","max":{"cpu":"3"}}]}}`,
	},
	{
		name: "resourcequotas", coll: nsPath("/api/v1", "resourcequotas"), obj: "rq1",
		valid:     obj("v1", "ResourceQuota", "rq1", `"spec":{"hard":{"pods":"10"},"scopes":["NotTerminating"]}`),
		invalid:   obj("v1", "ResourceQuota", "rq2", `"spec":{"hard":{"pods":"-1"}}`),
		immutable: `{"spec":{"scopes":["Terminating"]}}`,
		spec:      `{"spec":{"hard":{"pods":"11"}}}`,
		status:    `{"status":{"hard":{"pods":"10"},"used":{"pods":"1"}}}`,
	},
}

// caseKey names a step in the recording and in failures.
func caseKey(c, s string) string { return c + " / " + s }
