package main

import (
	"maps"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/client"
)

// The ConfigSet API: plain Go types, no code generation. The typed client
// and informers need only TypeMeta and ObjectMeta embedded; DeepCopy is
// for the reconciler, which must copy cached objects before changing them.
const (
	group     = "examples.objwatch.dev"
	version   = "v1alpha1"
	kind      = "ConfigSet"
	plural    = "configsets"
	finalizer = group + "/cleanup"
	// setLabel on a ConfigMap names the ConfigSet it belongs to.
	setLabel = group + "/configset"
	// conditionReady is the ConfigSet's one condition.
	conditionReady = "Ready"
)

var (
	configSets = client.Resource{GVR: schema.GroupVersionResource{Group: group, Version: version, Resource: plural}, Namespaced: true, Kind: kind}
	crds       = client.Resource{GVR: apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"), Kind: "CustomResourceDefinition"}
)

// ConfigSet keeps Spec.Replicas ConfigMaps, <name>-0 … <name>-<n-1>, in its
// namespace equal to Spec.Template.
type ConfigSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConfigSetSpec   `json:"spec"`
	Status ConfigSetStatus `json:"status,omitempty"`
}

type ConfigSetSpec struct {
	Replicas int32             `json:"replicas"`
	Template ConfigMapTemplate `json:"template"`
}

// ConfigMapTemplate is what every ConfigMap of the set has.
type ConfigMapTemplate struct {
	Labels map[string]string `json:"labels,omitempty"`
	Data   map[string]string `json:"data,omitempty"`
}

type ConfigSetStatus struct {
	// ObservedGeneration is the generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ReadyReplicas counts the ConfigMaps equal to the template.
	ReadyReplicas int32              `json:"readyReplicas,omitempty"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
}

// DeepCopy returns a copy of s that shares nothing with it.
func (s *ConfigSet) DeepCopy() *ConfigSet {
	if s == nil {
		return nil
	}
	out := *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Template.Labels = maps.Clone(s.Spec.Template.Labels)
	out.Spec.Template.Data = maps.Clone(s.Spec.Template.Data)
	if s.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(s.Status.Conditions))
		for i := range s.Status.Conditions {
			s.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	return &out
}

// DeepCopyObject makes ConfigSet a runtime.Object.
func (s *ConfigSet) DeepCopyObject() runtime.Object { return s.DeepCopy() }

// crd is the ConfigSet CustomResourceDefinition, with a status subresource
// so that spec changes (and only they) raise metadata.generation.
func crd() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strMap := apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}}
	minReplicas := 0.0
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: plural, Singular: "configset", Kind: kind, ListKind: kind + "List", ShortNames: []string{"cset"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
					{Name: "Ready", Type: "integer", JSONPath: ".status.readyReplicas"},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type:     "object",
							Required: []string{"replicas"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"replicas": {Type: "integer", Format: "int32", Minimum: &minReplicas},
								"template": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
									"labels": strMap, "data": strMap,
								}},
							},
						},
						"status": {Type: "object", XPreserveUnknownFields: ptr(true)},
					},
				}},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }
