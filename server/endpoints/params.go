package endpoints

import (
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metascheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	listvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
)

// Query parameters are decoded as kube-apiserver decodes them: with
// apimachinery's parameter codec into meta's option types, then validated
// with apimachinery's option validation. So a boolean is false only for
// "0" and "false" in any case (the Python client sends "True"), the first
// of repeated values counts, a malformed number is 400 and an invalid
// combination of options is 422 Invalid, each with Kubernetes' message.

// decodeQuery decodes q into one of meta's option types.
func decodeQuery(q url.Values, into runtime.Object) error {
	if err := metascheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, into); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

// invalidOptions is the 422 of options that fail validation.
func invalidOptions(kind string, errs field.ErrorList) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
}

// queryIsWatch reports whether a collection GET asks for a watch: its
// first watch value, read as the codec reads a boolean. (kube-apiserver
// decodes all of ListOptions here and falls back to just this when other
// parameters do not parse; the answer is the same, and listOptions
// decodes the rest once.)
func queryIsWatch(q url.Values) bool {
	return len(q["watch"]) > 0 && isTrue(q["watch"][0])
}

// isTrue reads a boolean query value as the parameter codec does.
func isTrue(s string) bool {
	var b bool
	in := []string{s}
	if err := runtime.Convert_Slice_string_To_bool(&in, &b, nil); err != nil {
		return false
	}
	return b
}

// listOptions decodes and validates the options of a list, watch or
// deletecollection. A watch (the verb, which the /watch/ path also
// selects) gets Kubernetes' defaults: without resourceVersion or with "0",
// it sends the initial events, ended by a bookmark when bookmarks are
// allowed.
func listOptions(r *http.Request, verb string) (*internalversion.ListOptions, error) {
	o := &internalversion.ListOptions{}
	if err := decodeQuery(r.URL.Query(), o); err != nil {
		return nil, err
	}
	o.Watch = verb == "watch"
	if o.Watch {
		internalversion.SetListOptionsDefaults(o, true)
	}
	if errs := listvalidation.ValidateListOptions(o, true); len(errs) > 0 {
		return nil, invalidOptions("ListOptions", errs)
	}
	// As kube-apiserver: a negative limit lists everything, and a watch of
	// negative timeoutSeconds ends at once (200, no event); a list ignores
	// timeoutSeconds.
	o.Limit = max(o.Limit, 0)
	return o, nil
}

// getOptions decodes a GET's options.
func getOptions(r *http.Request) (*metav1.GetOptions, error) {
	o := &metav1.GetOptions{}
	return o, decodeQuery(r.URL.Query(), o)
}

// parseWriteOptions decodes the options of a create (POST), update (PUT)
// or patch (PATCH), which share dryRun, fieldManager and fieldValidation;
// a patch also has force, which only apply patches may set.
func parseWriteOptions(r *http.Request) (objects.WriteOptions, error) {
	q := r.URL.Query()
	var (
		dryRun                        []string
		fieldManager, fieldValidation string
		errs                          field.ErrorList
		kind                          string
		force                         bool
	)
	switch r.Method {
	case http.MethodPost:
		o := &metav1.CreateOptions{}
		if err := decodeQuery(q, o); err != nil {
			return objects.WriteOptions{}, err
		}
		dryRun, fieldManager, fieldValidation = o.DryRun, o.FieldManager, o.FieldValidation
		kind, errs = "CreateOptions", metavalidation.ValidateCreateOptions(o)
	case http.MethodPatch:
		o := &metav1.PatchOptions{}
		if err := decodeQuery(q, o); err != nil {
			return objects.WriteOptions{}, err
		}
		dryRun, fieldManager, fieldValidation = o.DryRun, o.FieldManager, o.FieldValidation
		force = o.Force != nil && *o.Force
		kind, errs = "PatchOptions", metavalidation.ValidatePatchOptions(o, types.PatchType(mediaType(r)))
	default:
		o := &metav1.UpdateOptions{}
		if err := decodeQuery(q, o); err != nil {
			return objects.WriteOptions{}, err
		}
		dryRun, fieldManager, fieldValidation = o.DryRun, o.FieldManager, o.FieldValidation
		kind, errs = "UpdateOptions", metavalidation.ValidateUpdateOptions(o)
	}
	if len(errs) > 0 {
		return objects.WriteOptions{}, invalidOptions(kind, errs)
	}
	if fieldManager == "" {
		fieldManager = managerFromUserAgent(r.UserAgent())
	}
	return objects.WriteOptions{DryRun: len(dryRun) > 0, FieldManager: fieldManager, FieldValidation: fieldValidation, Force: force}, nil
}

// managerFromUserAgent is the field manager of a write without
// fieldManager, as kube-apiserver names it: the User-Agent up to its first
// "/", printable characters only, cut to the longest manager name allowed.
func managerFromUserAgent(ua string) string {
	prefix, _, _ := strings.Cut(ua, "/")
	var b strings.Builder
	for _, c := range prefix {
		if !unicode.IsPrint(c) {
			continue
		}
		if b.Len()+utf8.RuneLen(c) > metavalidation.FieldManagerMaxLength {
			break
		}
		b.WriteRune(c)
	}
	return b.String()
}

// deleteOptions reads a DELETE's options: from its body if it has one,
// otherwise from the query, as Kubernetes does.
func (bs *bodies) deleteOptions(r *http.Request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := bs.readBody(r)
	if err != nil {
		return nil, err
	}
	switch mt := mediaType(r); {
	case len(body) > 0 && mt == cborType:
		if err := direct.Unmarshal(body, opts); err != nil {
			return nil, apistatus.BadRequest("the body of the request was not valid DeleteOptions: %v", err)
		}
	case len(body) > 0:
		// As kube-apiserver decodes it: by apimachinery's meta scheme,
		// in JSON, YAML or protobuf, a kind other than DeleteOptions
		// refused in the scheme's words.
		info, ok := runtime.SerializerInfoForMediaType(metascheme.Codecs.SupportedMediaTypes(), mt)
		if !ok {
			return nil, apistatus.UnsupportedMediaType(mt)
		}
		defaultGVK := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
		obj, _, err := metascheme.Codecs.DecoderToVersion(info.Serializer, defaultGVK.GroupVersion()).Decode(body, &defaultGVK, opts)
		if err != nil {
			return nil, apistatus.BadRequest("%v", err)
		}
		if obj != opts {
			return nil, apistatus.BadRequest("decoded object cannot be converted to DeleteOptions")
		}
	default:
		if err := decodeQuery(r.URL.Query(), opts); err != nil {
			return nil, err
		}
	}
	if errs := metavalidation.ValidateDeleteOptions(opts); len(errs) > 0 {
		return nil, invalidOptions("DeleteOptions", errs)
	}
	return opts, nil
}
