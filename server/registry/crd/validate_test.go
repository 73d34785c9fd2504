package crd

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestSetDefaults(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "BigWidget"},
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true}},
	}}
	SetDefaults(crd)
	if crd.Spec.Names.Singular != "bigwidget" || crd.Spec.Names.ListKind != "BigWidgetList" ||
		crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy != apiextensionsv1.NoneConverter {
		t.Errorf("SetDefaults() names %+v, conversion %+v", crd.Spec.Names, crd.Spec.Conversion)
	}
}

func TestValidateDefinition(t *testing.T) {
	webhook := func(c *apiextensionsv1.CustomResourceDefinition) {
		url := "https://example.com/convert"
		c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url},
				ConversionReviewVersions: []string{"v1"},
			},
		}
	}
	tests := []struct {
		name   string
		mutate func(*apiextensionsv1.CustomResourceDefinition)
		want   []fieldErr
	}{
		{"valid", func(*apiextensionsv1.CustomResourceDefinition) {}, nil},
		{"no storage version", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[1].Storage = false },
			[]fieldErr{{field.ErrorTypeInvalid, "spec.versions"}, {field.ErrorTypeInvalid, "status.storedVersions"}}},
		{"two storage versions", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Storage = true },
			[]fieldErr{{field.ErrorTypeInvalid, "spec.versions"}, {field.ErrorTypeInvalid, "status.storedVersions"}}},
		// Kubernetes accepts a CRD that serves no version.
		{"no served version", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Served = false
			c.Spec.Versions[1].Served = false
		}, nil},
		{"name not plural.group", func(c *apiextensionsv1.CustomResourceDefinition) { c.Name = "widget.example.com" },
			[]fieldErr{{field.ErrorTypeInvalid, "metadata.name"}}},
		{"bad plural", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Names.Plural = "Widgets"
			c.Name = "Widgets.example.com"
		}, []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}, {field.ErrorTypeInvalid, "spec.names.plural"}}},
		{"bad kind and short name", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Names.Kind = "wid get"
			c.Spec.Names.ShortNames = []string{"W D"}
		}, []fieldErr{{field.ErrorTypeInvalid, "spec.names.kind"}, {field.ErrorTypeInvalid, "spec.names.shortNames[0]"}}},
		{"bad scope", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = "Galaxy" },
			[]fieldErr{{field.ErrorTypeNotSupported, "spec.scope"}}},
		{"non-structural schema", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = apiextensionsv1.JSONSchemaProps{}
		}, []fieldErr{{field.ErrorTypeRequired, "spec.versions[0].schema.openAPIV3Schema.properties[spec].type"}}},
		{"webhook conversion", webhook, nil},
		{"webhook conversion, http", func(c *apiextensionsv1.CustomResourceDefinition) {
			webhook(c)
			u := "http://example.com/convert"
			c.Spec.Conversion.Webhook.ClientConfig.URL = &u
		}, []fieldErr{{field.ErrorTypeInvalid, "spec.conversion.webhookClientConfig.url"}}},
		{"webhook conversion, unknown review version", func(c *apiextensionsv1.CustomResourceDefinition) {
			webhook(c)
			c.Spec.Conversion.Webhook.ConversionReviewVersions = []string{"v2beta"}
		}, []fieldErr{{field.ErrorTypeInvalid, "spec.conversion.conversionReviewVersions"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCRD(t)
			tt.mutate(c)
			PrepareDefinitionForCreate(c)
			errs := ValidateDefinition(context.Background(), c)
			if diff := cmp.Diff(tt.want, fieldErrs(errs)); diff != "" {
				t.Errorf("ValidateDefinition() = %v, diff (-want +got):\n%s", errs, diff)
			}
		})
	}
}

// TestValidateDefinitionWebhookMessage: the messages are kube-apiserver's
// (v1.37.2) for the same CRDs.
func TestValidateDefinitionWebhookMessage(t *testing.T) {
	for _, tc := range []struct {
		conv *apiextensionsv1.CustomResourceConversion
		want string
	}{
		{&apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter},
			"spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook"},
		{&apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig: &apiextensionsv1.WebhookClientConfig{}, ConversionReviewVersions: []string{"v2beta"}}},
			"spec.conversion.conversionReviewVersions: Invalid value: [\"v2beta\"]: must include at least one of v1, v1beta1"},
	} {
		c := testCRD(t)
		c.Spec.Conversion = tc.conv
		PrepareDefinitionForCreate(c)
		errs := ValidateDefinition(context.Background(), c)
		found := false
		for _, e := range errs {
			found = found || e.Error() == tc.want
		}
		if !found {
			t.Errorf("ValidateDefinition() = %v, want %s", errs, tc.want)
		}
	}
}

func TestValidateDefinitionUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*apiextensionsv1.CustomResourceDefinition)
		want   []fieldErr
		gen    int64
	}{
		{"labels only", func(c *apiextensionsv1.CustomResourceDefinition) { c.Labels = map[string]string{"a": "b"} }, nil, 1},
		{"new version", func(c *apiextensionsv1.CustomResourceDefinition) {
			v := *c.Spec.Versions[1].DeepCopy()
			v.Name = "v2"
			c.Spec.Versions = append(c.Spec.Versions, v)
			c.Spec.Versions[1].Storage = false
		}, nil, 2},
		{"scope mutable before established", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = apiextensionsv1.ClusterScoped },
			nil, 2},
		{"scope immutable once established", func(c *apiextensionsv1.CustomResourceDefinition) {
			if !AcceptNames(c, nil) {
				panic("AcceptNames() = false")
			}
			c.Spec.Scope = apiextensionsv1.ClusterScoped
		}, []fieldErr{{field.ErrorTypeInvalid, "spec.scope"}}, 2},
		{"group immutable", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Group = "other.com"
		}, []fieldErr{{field.ErrorTypeInvalid, "spec.group"}}, 2},
		{"webhook conversion", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Conversion.Strategy = apiextensionsv1.WebhookConverter
		}, []fieldErr{
			{field.ErrorTypeRequired, "spec.conversion.webhookClientConfig"},
			{field.ErrorTypeRequired, "spec.conversion.conversionReviewVersions"},
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := testCRD(t)
			PrepareDefinitionForCreate(old)
			old.ResourceVersion = "5"
			c := old.DeepCopy()
			tt.mutate(c)
			// Status changes go through the status subresource: apply them to old.
			old.Status = *c.Status.DeepCopy()
			PrepareDefinitionForUpdate(c, old)
			errs := ValidateDefinitionUpdate(context.Background(), c, old)
			if diff := cmp.Diff(tt.want, fieldErrs(errs)); diff != "" {
				t.Errorf("ValidateDefinitionUpdate() = %v, diff (-want +got):\n%s", errs, diff)
			}
			if c.Generation != tt.gen {
				t.Errorf("PrepareDefinitionForUpdate() generation = %d, want %d", c.Generation, tt.gen)
			}
			if tt.name == "new version" && strings.Join(c.Status.StoredVersions, ",") != "v1,v2" {
				t.Errorf("PrepareDefinitionForUpdate() storedVersions = %v, want [v1 v2]", c.Status.StoredVersions)
			}
		})
	}
}

func TestPrepareDefinitionForCreate(t *testing.T) {
	c := testCRD(t)
	c.Generation = 9
	c.Status.AcceptedNames.Kind = "Other"
	c.Status.StoredVersions = []string{"v0"}
	PrepareDefinitionForCreate(c)
	if c.Generation != 1 || c.Status.AcceptedNames.Kind != "" || strings.Join(c.Status.StoredVersions, ",") != "v1" {
		t.Errorf("PrepareDefinitionForCreate() generation %d, status %+v", c.Generation, c.Status)
	}
}
