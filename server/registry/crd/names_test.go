package crd

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func TestAcceptNames(t *testing.T) {
	other := func(group, plural, kind string, short ...string) *apiextensionsv1.CustomResourceDefinition {
		c := &apiextensionsv1.CustomResourceDefinition{}
		c.Name = "other-" + plural + "." + group
		c.Spec.Group = group
		c.Status.AcceptedNames = apiextensionsv1.CustomResourceDefinitionNames{
			Plural: plural, Singular: plural[:len(plural)-1], Kind: kind, ListKind: kind + "List", ShortNames: short,
		}
		return c
	}
	cond := func(typ apiextensionsv1.CustomResourceDefinitionConditionType, status apiextensionsv1.ConditionStatus, reason, msg string) apiextensionsv1.CustomResourceDefinitionCondition {
		return apiextensionsv1.CustomResourceDefinitionCondition{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	accepted := cond(apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionTrue, "NoConflicts", "no conflicts found")
	established := cond(apiextensionsv1.Established, apiextensionsv1.ConditionTrue, "InitialNamesAccepted", "the initial names have been accepted")
	notEstablished := cond(apiextensionsv1.Established, apiextensionsv1.ConditionFalse, "NotAccepted", "not all names are accepted")

	tests := []struct {
		name   string
		others []*apiextensionsv1.CustomResourceDefinition
		want   []apiextensionsv1.CustomResourceDefinitionCondition
		kind   string
	}{
		{"no conflicts", nil, []apiextensionsv1.CustomResourceDefinitionCondition{accepted, established}, "Widget"},
		{"same names in another group", []*apiextensionsv1.CustomResourceDefinition{other("other.com", "widgets", "Widget", "wd")},
			[]apiextensionsv1.CustomResourceDefinitionCondition{accepted, established}, "Widget"},
		{"plural taken", []*apiextensionsv1.CustomResourceDefinition{other("example.com", "widgets", "Thing")},
			[]apiextensionsv1.CustomResourceDefinitionCondition{
				cond(apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionFalse, "SingularConflict", `"widget" is already in use`), notEstablished,
			}, "Widget"},
		{"short name taken", []*apiextensionsv1.CustomResourceDefinition{other("example.com", "things", "Thing", "wd")},
			[]apiextensionsv1.CustomResourceDefinitionCondition{
				cond(apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionFalse, "ShortNamesConflict", `"wd" is already in use`), notEstablished,
			}, "Widget"},
		{"kind taken", []*apiextensionsv1.CustomResourceDefinition{other("example.com", "things", "Widget")},
			[]apiextensionsv1.CustomResourceDefinitionCondition{
				cond(apiextensionsv1.NamesAccepted, apiextensionsv1.ConditionFalse, "ListKindConflict", `"WidgetList" is already in use`), notEstablished,
			}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCRD(t)
			PrepareDefinitionForCreate(c)
			if !AcceptNames(c, tt.others) {
				t.Fatalf("AcceptNames() = false, want true")
			}
			if diff := cmp.Diff(tt.want, c.Status.Conditions, cmpopts.IgnoreFields(apiextensionsv1.CustomResourceDefinitionCondition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("AcceptNames() conditions diff (-want +got):\n%s", diff)
			}
			if c.Status.AcceptedNames.Kind != tt.kind {
				t.Errorf("AcceptNames() accepted kind = %q, want %q", c.Status.AcceptedNames.Kind, tt.kind)
			}
			if AcceptNames(c, tt.others) {
				t.Errorf("AcceptNames() again = true, want false")
			}
		})
	}

	t.Run("stays established", func(t *testing.T) {
		c := testCRD(t)
		PrepareDefinitionForCreate(c)
		AcceptNames(c, nil)
		c.Spec.Names.ShortNames = []string{"wd", "th"}
		if !AcceptNames(c, []*apiextensionsv1.CustomResourceDefinition{other("example.com", "things", "Thing", "th")}) {
			t.Fatalf("AcceptNames() = false, want true")
		}
		if !apihelpers.IsCRDConditionTrue(c, apiextensionsv1.Established) || apihelpers.IsCRDConditionTrue(c, apiextensionsv1.NamesAccepted) {
			t.Errorf("AcceptNames() conditions = %+v, want established, names not accepted", c.Status.Conditions)
		}
		if diff := cmp.Diff([]string{"wd"}, c.Status.AcceptedNames.ShortNames); diff != "" {
			t.Errorf("AcceptNames() short names diff (-want +got):\n%s", diff)
		}
		d, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"wd"}, d.Names().ShortNames); diff != "" {
			t.Errorf("New().Names() short names diff (-want +got):\n%s", diff)
		}
	})
}
