package endpoints

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"

	"github.com/objwatch/objwatch/server/fieldmanager"
	"github.com/objwatch/objwatch/server/registry"
)

// table renders objects as a metav1.Table with the resource's columns.
// includeObject follows Kubernetes: Metadata by default (rows carry a
// PartialObjectMetadata), Object or None on request; drop leaves
// metadata.managedFields out of what the rows carry.
func table(res *registry.Resource, version string, objs []*unstructured.Unstructured, includeObject string, drop bool) *metav1.Table {
	if res.ConvertToTable != nil {
		if t, err := convertedTable(res, objs); err == nil {
			t.TypeMeta = metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/" + version}
			for i := range t.Rows {
				t.Rows[i].Object = rowObject(objs[i], version, includeObject, drop)
			}
			return t
		}
	}
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/" + version}}
	// Name comes first, unless a built-in resource places it (events).
	leadingName := res.Custom || !slices.ContainsFunc(res.Columns, func(c registry.Column) bool { return c.Format == "name" })
	if leadingName {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{
			Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace.",
		})
	}
	for _, c := range res.Columns {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{
			Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description, Priority: c.Priority,
		})
	}
	// Like Kubernetes (serveDefaultColumnsIfEmpty), Age is the default
	// column only when the resource defines no printer columns of its own.
	if len(res.Columns) == 0 {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{
			Name: "Age", Type: "date", Description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
		})
	}
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		var cells []any
		if leadingName {
			cells = append(cells, o.GetName())
		}
		for _, c := range res.Columns {
			cells = append(cells, columnValue(o, c))
		}
		if len(res.Columns) == 0 {
			cells = append(cells, registry.Age(o.GetCreationTimestamp().Time))
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells, Object: rowObject(o, version, includeObject, drop)})
	}
	return t
}

// convertedTable renders objs with the resource's own table convertor
// (Kubernetes' for custom resources), one row per object in order.
func convertedTable(res *registry.Resource, objs []*unstructured.Unstructured) (*metav1.Table, error) {
	list := &unstructured.UnstructuredList{Items: make([]unstructured.Unstructured, len(objs))}
	for i, o := range objs {
		list.Items[i] = *o
	}
	t, err := res.ConvertToTable(list)
	if err != nil {
		return nil, err
	}
	if len(t.Rows) != len(objs) {
		return nil, fmt.Errorf("table of %d objects has %d rows", len(objs), len(t.Rows))
	}
	return t, nil
}

// rowObject is what a table row carries of o: as Kubernetes, its
// PartialObjectMetadata (in the Table's version) by default, the object or
// nothing on request.
func rowObject(o *unstructured.Unstructured, version, includeObject string, drop bool) runtime.RawExtension {
	switch includeObject {
	case "None":
		return runtime.RawExtension{}
	case "Object":
		if drop {
			o = fieldmanager.WithoutManagedFieldsObject(o)
		}
		return runtime.RawExtension{Object: o}
	}
	return runtime.RawExtension{Object: output{version: version, drop: drop}.partial(o)}
}

func objectMeta(o *unstructured.Unstructured) metav1.ObjectMeta {
	var m metav1.ObjectMeta
	if md, ok := o.Object["metadata"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(md, &m)
	}
	return m
}

// columnValue evaluates a printer column's JSONPath against o. Like
// Kubernetes, a missing value is nil and a date column shows an age.
func columnValue(o *unstructured.Unstructured, c registry.Column) any {
	if c.Value != nil {
		return c.Value(o.Object)
	}
	jp := jsonpath.New(c.Name).AllowMissingKeys(true)
	if err := jp.Parse("{" + c.JSONPath + "}"); err != nil {
		return nil
	}
	results, err := jp.FindResults(o.Object)
	if err != nil || len(results) == 0 || len(results[0]) == 0 {
		return nil
	}
	v := results[0][0].Interface()
	if c.Type == "date" {
		if s, ok := v.(string); ok {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				return registry.Age(t)
			}
		}
	}
	return v
}
