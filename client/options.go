package client

import (
	"net/url"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Query-parameter encodings of the metav1 option types, as the API server
// reads them.

func listQuery(o metav1.ListOptions) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("labelSelector", o.LabelSelector)
	set("fieldSelector", o.FieldSelector)
	set("resourceVersion", o.ResourceVersion)
	set("resourceVersionMatch", string(o.ResourceVersionMatch))
	set("continue", o.Continue)
	if o.Watch {
		q.Set("watch", "true")
	}
	if o.AllowWatchBookmarks {
		q.Set("allowWatchBookmarks", "true")
	}
	if o.TimeoutSeconds != nil {
		q.Set("timeoutSeconds", strconv.FormatInt(*o.TimeoutSeconds, 10))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.FormatInt(o.Limit, 10))
	}
	if o.SendInitialEvents != nil {
		q.Set("sendInitialEvents", strconv.FormatBool(*o.SendInitialEvents))
	}
	return q
}

func getQuery(o metav1.GetOptions) url.Values {
	q := url.Values{}
	if o.ResourceVersion != "" {
		q.Set("resourceVersion", o.ResourceVersion)
	}
	return q
}

func writeQuery(dryRun []string, fieldManager, fieldValidation string, force *bool) url.Values {
	q := url.Values{}
	for _, d := range dryRun {
		q.Add("dryRun", d)
	}
	if fieldManager != "" {
		q.Set("fieldManager", fieldManager)
	}
	if fieldValidation != "" {
		q.Set("fieldValidation", fieldValidation)
	}
	if force != nil {
		q.Set("force", strconv.FormatBool(*force))
	}
	return q
}
