package kube

import (
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"k8s.io/kubernetes/pkg/registry/apps/controllerrevision"
	"k8s.io/kubernetes/pkg/registry/apps/daemonset"
	"k8s.io/kubernetes/pkg/registry/apps/deployment"
	"k8s.io/kubernetes/pkg/registry/apps/replicaset"
	"k8s.io/kubernetes/pkg/registry/apps/statefulset"
	"k8s.io/kubernetes/pkg/registry/autoscaling/horizontalpodautoscaler"
	"k8s.io/kubernetes/pkg/registry/batch/cronjob"
	"k8s.io/kubernetes/pkg/registry/batch/job"
	"k8s.io/kubernetes/pkg/registry/certificates/certificates"
	"k8s.io/kubernetes/pkg/registry/certificates/clustertrustbundle"
	"k8s.io/kubernetes/pkg/registry/core/endpoint"
	"k8s.io/kubernetes/pkg/registry/core/limitrange"
	"k8s.io/kubernetes/pkg/registry/core/node"
	"k8s.io/kubernetes/pkg/registry/core/persistentvolume"
	"k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim"
	"k8s.io/kubernetes/pkg/registry/core/pod"
	"k8s.io/kubernetes/pkg/registry/core/podtemplate"
	"k8s.io/kubernetes/pkg/registry/core/replicationcontroller"
	"k8s.io/kubernetes/pkg/registry/core/resourcequota"
	"k8s.io/kubernetes/pkg/registry/discovery/endpointslice"
	"k8s.io/kubernetes/pkg/registry/flowcontrol/flowschema"
	"k8s.io/kubernetes/pkg/registry/flowcontrol/prioritylevelconfiguration"
	"k8s.io/kubernetes/pkg/registry/networking/ingress"
	"k8s.io/kubernetes/pkg/registry/networking/ingressclass"
	"k8s.io/kubernetes/pkg/registry/networking/ipaddress"
	"k8s.io/kubernetes/pkg/registry/networking/networkpolicy"
	"k8s.io/kubernetes/pkg/registry/networking/servicecidr"
	noderuntimeclass "k8s.io/kubernetes/pkg/registry/node/runtimeclass"
	"k8s.io/kubernetes/pkg/registry/policy/poddisruptionbudget"
	"k8s.io/kubernetes/pkg/registry/resource/deviceclass"
	"k8s.io/kubernetes/pkg/registry/resource/devicetaintrule"
	"k8s.io/kubernetes/pkg/registry/resource/resourceslice"
	"k8s.io/kubernetes/pkg/registry/scheduling/priorityclass"
	"k8s.io/kubernetes/pkg/registry/storage/csidriver"
	"k8s.io/kubernetes/pkg/registry/storage/csinode"
	"k8s.io/kubernetes/pkg/registry/storage/csistoragecapacity"
	"k8s.io/kubernetes/pkg/registry/storage/storageclass"
	"k8s.io/kubernetes/pkg/registry/storage/volumeattachment"
	"k8s.io/kubernetes/pkg/registry/storage/volumeattributesclass"
	"k8s.io/kubernetes/pkg/registry/storagemigration/storagemigration"
)

// kind is one built-in resource whose rules come from k8s.io/kubernetes:
// what discovery says of it and which of Kubernetes' registry strategies,
// field selector attributes and scale rules apply.
type kind struct {
	group    string
	versions []string // served versions, storage version first
	plural   string
	singular string
	kind     string
	short    []string
	all      bool // in the "all" category (kubectl get all)
	cluster  bool // cluster-scoped
	strategy rest.RESTCreateUpdateStrategy
	status   rest.RESTUpdateStrategy // nil: no /status
	// attrs gives the kind's field selector labels (Kubernetes' GetAttrs);
	// nil: only metadata.name and metadata.namespace.
	attrs func(runtime.Object) (labels.Set, fields.Set, error)
	// scale, if set, gives the kind a /scale subresource.
	scale *scaleRule
	// subresources are more subresources served like /status, with their
	// strategies (a CertificateSigningRequest's approval).
	subresources map[string]rest.RESTUpdateStrategy
}

// kinds are the resources kube-apiserver v1.37.2 serves by default that
// objwatch's registry does not define itself (namespaces, configmaps,
// secrets, services, service accounts, events, leases, RBAC, admission
// configuration and the reviews are in package registry).
var kinds = []kind{
	// core/v1
	{versions: v1, plural: "pods", singular: "pod", kind: "Pod", short: []string{"po"}, all: true,
		strategy: pod.Strategy, status: pod.StatusStrategy, attrs: pod.GetAttrs,
		subresources: map[string]rest.RESTUpdateStrategy{"ephemeralcontainers": pod.EphemeralContainersStrategy, "resize": pod.ResizeStrategy}},
	{versions: v1, plural: "nodes", singular: "node", kind: "Node", short: []string{"no"}, cluster: true,
		strategy: node.Strategy, status: node.StatusStrategy, attrs: node.GetAttrs},
	{versions: v1, plural: "persistentvolumes", singular: "persistentvolume", kind: "PersistentVolume", short: []string{"pv"}, cluster: true,
		strategy: persistentvolume.Strategy, status: persistentvolume.StatusStrategy, attrs: persistentvolume.GetAttrs},
	{versions: v1, plural: "persistentvolumeclaims", singular: "persistentvolumeclaim", kind: "PersistentVolumeClaim", short: []string{"pvc"},
		strategy: persistentvolumeclaim.Strategy, status: persistentvolumeclaim.StatusStrategy, attrs: persistentvolumeclaim.GetAttrs},
	{versions: v1, plural: "endpoints", singular: "endpoints", kind: "Endpoints", short: []string{"ep"},
		strategy: endpoint.Strategy},
	{versions: v1, plural: "limitranges", singular: "limitrange", kind: "LimitRange", short: []string{"limits"},
		strategy: limitrange.Strategy},
	{versions: v1, plural: "resourcequotas", singular: "resourcequota", kind: "ResourceQuota", short: []string{"quota"},
		strategy: resourcequota.Strategy, status: resourcequota.StatusStrategy},
	{versions: v1, plural: "podtemplates", singular: "podtemplate", kind: "PodTemplate",
		strategy: podtemplate.Strategy},
	{versions: v1, plural: "replicationcontrollers", singular: "replicationcontroller", kind: "ReplicationController", short: []string{"rc"}, all: true,
		strategy: replicationcontroller.Strategy, status: replicationcontroller.StatusStrategy, attrs: replicationcontroller.GetAttrs,
		scale: mapSelectorScale},

	// apps/v1
	{group: "apps", versions: v1, plural: "deployments", singular: "deployment", kind: "Deployment", short: []string{"deploy"}, all: true,
		strategy: deployment.Strategy, status: deployment.StatusStrategy, scale: labelSelectorScale},
	{group: "apps", versions: v1, plural: "statefulsets", singular: "statefulset", kind: "StatefulSet", short: []string{"sts"}, all: true,
		strategy: statefulset.Strategy, status: statefulset.StatusStrategy, scale: labelSelectorScale},
	{group: "apps", versions: v1, plural: "daemonsets", singular: "daemonset", kind: "DaemonSet", short: []string{"ds"}, all: true,
		strategy: daemonset.Strategy, status: daemonset.StatusStrategy},
	{group: "apps", versions: v1, plural: "replicasets", singular: "replicaset", kind: "ReplicaSet", short: []string{"rs"}, all: true,
		strategy: replicaset.Strategy, status: replicaset.StatusStrategy, attrs: replicaset.GetAttrs, scale: labelSelectorScale},
	{group: "apps", versions: v1, plural: "controllerrevisions", singular: "controllerrevision", kind: "ControllerRevision",
		strategy: controllerrevision.Strategy},

	// batch/v1
	{group: "batch", versions: v1, plural: "jobs", singular: "job", kind: "Job", all: true,
		strategy: job.Strategy, status: job.StatusStrategy, attrs: job.GetAttrs},
	{group: "batch", versions: v1, plural: "cronjobs", singular: "cronjob", kind: "CronJob", short: []string{"cj"}, all: true,
		strategy: cronjob.Strategy, status: cronjob.StatusStrategy},

	// autoscaling: v2 is the storage version, v1 is served too.
	{group: "autoscaling", versions: []string{"v2", "v1"}, plural: "horizontalpodautoscalers", singular: "horizontalpodautoscaler", kind: "HorizontalPodAutoscaler",
		short: []string{"hpa"}, all: true, strategy: horizontalpodautoscaler.Strategy, status: horizontalpodautoscaler.StatusStrategy},

	// networking.k8s.io/v1
	{group: "networking.k8s.io", versions: v1, plural: "ingresses", singular: "ingress", kind: "Ingress", short: []string{"ing"},
		strategy: ingress.Strategy, status: ingress.StatusStrategy},
	{group: "networking.k8s.io", versions: v1, plural: "ingressclasses", singular: "ingressclass", kind: "IngressClass", cluster: true,
		strategy: ingressclass.Strategy},
	{group: "networking.k8s.io", versions: v1, plural: "networkpolicies", singular: "networkpolicy", kind: "NetworkPolicy", short: []string{"netpol"},
		strategy: networkpolicy.Strategy},
	{group: "networking.k8s.io", versions: v1, plural: "ipaddresses", singular: "ipaddress", kind: "IPAddress", short: []string{"ip"}, cluster: true,
		strategy: ipaddress.Strategy},
	{group: "networking.k8s.io", versions: v1, plural: "servicecidrs", singular: "servicecidr", kind: "ServiceCIDR", cluster: true,
		strategy: servicecidr.Strategy, status: servicecidr.StatusStrategy},

	// policy/v1
	{group: "policy", versions: v1, plural: "poddisruptionbudgets", singular: "poddisruptionbudget", kind: "PodDisruptionBudget", short: []string{"pdb"},
		strategy: poddisruptionbudget.Strategy, status: poddisruptionbudget.StatusStrategy},

	// storage.k8s.io/v1
	{group: "storage.k8s.io", versions: v1, plural: "storageclasses", singular: "storageclass", kind: "StorageClass", short: []string{"sc"}, cluster: true,
		strategy: storageclass.Strategy},
	{group: "storage.k8s.io", versions: v1, plural: "volumeattachments", singular: "volumeattachment", kind: "VolumeAttachment", cluster: true,
		strategy: volumeattachment.Strategy, status: volumeattachment.StatusStrategy},
	{group: "storage.k8s.io", versions: v1, plural: "csidrivers", singular: "csidriver", kind: "CSIDriver", cluster: true,
		strategy: csidriver.Strategy},
	{group: "storage.k8s.io", versions: v1, plural: "csinodes", singular: "csinode", kind: "CSINode", cluster: true,
		strategy: csinode.Strategy, status: csinode.StatusStrategy},
	{group: "storage.k8s.io", versions: v1, plural: "csistoragecapacities", singular: "csistoragecapacity", kind: "CSIStorageCapacity",
		strategy: csistoragecapacity.Strategy},
	{group: "storage.k8s.io", versions: v1, plural: "volumeattributesclasses", singular: "volumeattributesclass", kind: "VolumeAttributesClass", short: []string{"vac"}, cluster: true,
		strategy: volumeattributesclass.Strategy},

	// discovery.k8s.io/v1
	{group: "discovery.k8s.io", versions: v1, plural: "endpointslices", singular: "endpointslice", kind: "EndpointSlice",
		strategy: endpointslice.Strategy},

	// scheduling.k8s.io/v1
	{group: "scheduling.k8s.io", versions: v1, plural: "priorityclasses", singular: "priorityclass", kind: "PriorityClass", short: []string{"pc"}, cluster: true,
		strategy: priorityclass.Strategy},

	// node.k8s.io/v1
	{group: "node.k8s.io", versions: v1, plural: "runtimeclasses", singular: "runtimeclass", kind: "RuntimeClass", cluster: true,
		strategy: noderuntimeclass.Strategy},

	// certificates.k8s.io/v1
	{group: "certificates.k8s.io", versions: v1, plural: "certificatesigningrequests", singular: "certificatesigningrequest", kind: "CertificateSigningRequest",
		short: []string{"csr"}, cluster: true, strategy: certificates.Strategy, status: certificates.StatusStrategy, attrs: certificates.GetAttrs,
		subresources: map[string]rest.RESTUpdateStrategy{"approval": certificates.ApprovalStrategy}},
	{group: "certificates.k8s.io", versions: v1, plural: "clustertrustbundles", singular: "clustertrustbundle", kind: "ClusterTrustBundle", cluster: true,
		strategy: clustertrustbundle.Strategy},

	// flowcontrol.apiserver.k8s.io/v1
	{group: "flowcontrol.apiserver.k8s.io", versions: v1, plural: "flowschemas", singular: "flowschema", kind: "FlowSchema", cluster: true,
		strategy: flowschema.Strategy, status: flowschema.StatusStrategy},
	{group: "flowcontrol.apiserver.k8s.io", versions: v1, plural: "prioritylevelconfigurations", singular: "prioritylevelconfiguration", kind: "PriorityLevelConfiguration", cluster: true,
		strategy: prioritylevelconfiguration.Strategy, status: prioritylevelconfiguration.StatusStrategy},

	// resource.k8s.io/v1
	{group: "resource.k8s.io", versions: v1, plural: "deviceclasses", singular: "deviceclass", kind: "DeviceClass", cluster: true,
		strategy: deviceclass.Strategy},
	{group: "resource.k8s.io", versions: v1, plural: "resourceslices", singular: "resourceslice", kind: "ResourceSlice", cluster: true,
		strategy: resourceslice.Strategy, attrs: resourceslice.GetAttrs},
	{group: "resource.k8s.io", versions: v1, plural: "devicetaintrules", singular: "devicetaintrule", kind: "DeviceTaintRule", cluster: true,
		strategy: devicetaintrule.Strategy, status: devicetaintrule.StatusStrategy},

	// storagemigration.k8s.io/v1
	{group: "storagemigration.k8s.io", versions: v1, plural: "storageversionmigrations", singular: "storageversionmigration", kind: "StorageVersionMigration", cluster: true,
		strategy: storagemigration.Strategy, status: storagemigration.StatusStrategy},
}

var v1 = []string{"v1"}
