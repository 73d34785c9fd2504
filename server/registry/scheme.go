package registry

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scheme knows the Go types of the built-in kinds, their lists and
// the meta types (DeleteOptions); OpenAPI documents and protobuf decoding
// use it. Every group's types are added here, and only here.
var Scheme = func() *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, eventsv1.AddToScheme, coordinationv1.AddToScheme, rbacv1.AddToScheme,
		authenticationv1.AddToScheme, authorizationv1.AddToScheme, apiextensionsv1.AddToScheme,
		admissionregistrationv1.AddToScheme,
		// The kinds of package kube.
		appsv1.AddToScheme, autoscalingv1.AddToScheme, autoscalingv2.AddToScheme, batchv1.AddToScheme,
		certificatesv1.AddToScheme, discoveryv1.AddToScheme, flowcontrolv1.AddToScheme,
		networkingv1.AddToScheme, nodev1.AddToScheme, policyv1.AddToScheme, resourcev1.AddToScheme,
		schedulingv1.AddToScheme, storagev1.AddToScheme, storagemigrationv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return scheme
}()
