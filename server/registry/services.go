package registry

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Services are stored objects with a cluster IP: nothing proxies to them
// and no controller maintains their endpoints. The server allocates the
// cluster IP of a ClusterIP service (see the server's serviceips.go) once
// the object has been defaulted and validated here; a headless service
// (clusterIP: None) and an ExternalName service get none. NodePort and
// LoadBalancer services are refused (422): objwatch allocates no node
// ports and provisions no load balancers.

// serviceResource returns the definition of core/v1 services.
func serviceResource() *Resource {
	return &Resource{
		Version: "v1", Plural: "services", Singular: "service", Kind: "Service",
		ShortNames: []string{"svc"}, Categories: []string{"all"}, Namespaced: true, Status: true,
		Columns: []Column{
			{Name: "Type", Type: "string", JSONPath: ".spec.type", Description: "The type of the service."},
			{Name: "Cluster-IP", Type: "string", Description: "The cluster IP of the service.", Value: serviceClusterIP},
			{Name: "External-IP", Type: "string", Description: "The external IPs of the service.", Value: serviceExternalIP},
			{Name: "Port(s)", Type: "string", Description: "The ports of the service.", Value: servicePorts},
			ageColumn,
			{Name: "Selector", Type: "string", Priority: 1, Description: "The selector of the service.", Value: serviceSelector},
		},
		PatchSchema: &corev1.Service{},
		Strategy:    typed[corev1.Service]{validate: validateService, prepare: prepareService},
		FieldLabels: func(u *unstructured.Unstructured) fields.Set {
			ip, _, _ := unstructured.NestedString(u.Object, "spec", "clusterIP")
			t, _, _ := unstructured.NestedString(u.Object, "spec", "type")
			return fields.Set{"spec.clusterIP": ip, "spec.type": t}
		},
	}
}

// IsServiceResource reports whether res is core/v1 services.
func IsServiceResource(res *Resource) bool {
	return res.Group == "" && res.Plural == "services"
}

// NeedsClusterIP reports whether svc is to be allocated a cluster IP: it
// is not headless and not an ExternalName service.
func NeedsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

// prepareService applies Kubernetes' defaults and keeps what an update may
// leave out: the cluster IPs and IP families allocated before.
func prepareService(svc, old *corev1.Service) {
	spec := &svc.Spec
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if spec.Type != corev1.ServiceTypeExternalName && spec.InternalTrafficPolicy == nil {
		p := corev1.ServiceInternalTrafficPolicyCluster
		spec.InternalTrafficPolicy = &p
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if old != nil && spec.Type == old.Spec.Type && spec.ClusterIP == "" && len(spec.ClusterIPs) == 0 {
		spec.ClusterIP, spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
	}
	switch {
	case spec.ClusterIP != "" && len(spec.ClusterIPs) == 0:
		spec.ClusterIPs = []string{spec.ClusterIP}
	case spec.ClusterIP == "" && len(spec.ClusterIPs) > 0:
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	if old != nil && len(spec.IPFamilies) == 0 && spec.IPFamilyPolicy == nil && spec.Type == old.Spec.Type {
		spec.IPFamilies, spec.IPFamilyPolicy = old.Spec.IPFamilies, old.Spec.IPFamilyPolicy
	}
	if spec.Type != corev1.ServiceTypeExternalName {
		if len(spec.IPFamilies) == 0 {
			spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
		if spec.IPFamilyPolicy == nil {
			p := corev1.IPFamilyPolicySingleStack
			spec.IPFamilyPolicy = &p
		}
	}
}

// validateService checks a service as Kubernetes does where objwatch
// supports it, and refuses what objwatch does not do.
func validateService(svc, old *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	spec, sp := &svc.Spec, field.NewPath("spec")
	switch spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName:
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		errs = append(errs, field.Forbidden(sp.Child("type"), fmt.Sprintf("objwatch does not support %s services: it allocates no node ports and provisions no load balancers; use ClusterIP, a headless service (clusterIP: None) or ExternalName", spec.Type)))
	default:
		errs = append(errs, field.NotSupported(sp.Child("type"), spec.Type, []string{string(corev1.ServiceTypeClusterIP), string(corev1.ServiceTypeExternalName), string(corev1.ServiceTypeNodePort), string(corev1.ServiceTypeLoadBalancer)}))
	}
	if spec.Type == corev1.ServiceTypeExternalName {
		if spec.ClusterIP != "" {
			errs = append(errs, field.Forbidden(sp.Child("clusterIP"), "may not be set for ExternalName services"))
		}
		if spec.ExternalName == "" {
			errs = append(errs, field.Required(sp.Child("externalName"), ""))
		}
		for _, msg := range validation.IsDNS1123Subdomain(strings.TrimSuffix(spec.ExternalName, ".")) {
			errs = append(errs, field.Invalid(sp.Child("externalName"), spec.ExternalName, msg))
		}
	} else if spec.ClusterIP != corev1.ClusterIPNone && len(spec.Ports) == 0 {
		errs = append(errs, field.Required(sp.Child("ports"), ""))
	}
	if ip := spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		switch a, err := netip.ParseAddr(ip); {
		case err == nil && a.Is6():
			errs = append(errs, field.Invalid(sp.Child("clusterIPs").Index(0), []string{ip}, "IPv6 is not configured on this cluster"))
		case err != nil:
			errs = append(errs, field.Invalid(sp.Child("clusterIPs").Index(0), []string{ip}, `must be a valid IP address or "None"`))
		}
	}
	if len(spec.ClusterIPs) > 1 {
		errs = append(errs, field.Invalid(sp.Child("clusterIPs"), spec.ClusterIPs, "objwatch serves single-stack IPv4 services: at most one cluster IP"))
	} else if len(spec.ClusterIPs) == 1 && spec.ClusterIPs[0] != spec.ClusterIP {
		errs = append(errs, field.Invalid(sp.Child("clusterIPs").Index(0), spec.ClusterIPs[0], "must match `clusterIP`"))
	}
	for i, f := range spec.IPFamilies {
		if f != corev1.IPv4Protocol || i > 0 {
			errs = append(errs, field.Invalid(sp.Child("ipFamilies").Index(i), f, "objwatch serves single-stack IPv4 services"))
		}
	}
	if p := spec.IPFamilyPolicy; p != nil && *p != corev1.IPFamilyPolicySingleStack {
		errs = append(errs, field.Invalid(sp.Child("ipFamilyPolicy"), *p, "objwatch serves single-stack IPv4 services"))
	}
	switch spec.SessionAffinity {
	case corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP:
	default:
		errs = append(errs, field.NotSupported(sp.Child("sessionAffinity"), spec.SessionAffinity, []string{string(corev1.ServiceAffinityClientIP), string(corev1.ServiceAffinityNone)}))
	}
	errs = append(errs, validateServicePorts(spec.Ports, sp.Child("ports"))...)
	errs = append(errs, metavalidation.ValidateLabels(spec.Selector, sp.Child("selector"))...)
	if old != nil {
		if old.Spec.Type != spec.Type {
			errs = append(errs, field.Forbidden(sp.Child("type"), "objwatch does not change the type of a service: delete it and create it again"))
		}
		if old.Spec.ClusterIP != "" && spec.ClusterIP != old.Spec.ClusterIP {
			errs = append(errs, field.Invalid(sp.Child("clusterIPs").Index(0), spec.ClusterIPs, "may not change once set"))
		}
	}
	return errs
}

func validateServicePorts(ports []corev1.ServicePort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	seen := sets.New[string]()
	for i, p := range ports {
		pp := path.Index(i)
		if len(ports) > 1 && p.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), ""))
		} else if p.Name != "" {
			for _, msg := range validation.IsDNS1123Label(p.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), p.Name, msg))
			}
			if names.Has(p.Name) {
				errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
			}
			names.Insert(p.Name)
		}
		for _, msg := range validation.IsValidPortNum(int(p.Port)) {
			errs = append(errs, field.Invalid(pp.Child("port"), p.Port, msg))
		}
		switch p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), p.Protocol, []string{string(corev1.ProtocolSCTP), string(corev1.ProtocolTCP), string(corev1.ProtocolUDP)}))
		}
		if key := fmt.Sprintf("%d/%s", p.Port, p.Protocol); seen.Has(key) {
			errs = append(errs, field.Duplicate(pp, key))
		} else {
			seen.Insert(key)
		}
		if p.NodePort != 0 {
			errs = append(errs, field.Forbidden(pp.Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
		}
		switch t := p.TargetPort; t.Type {
		case intstr.Int:
			for _, msg := range validation.IsValidPortNum(int(t.IntVal)) {
				errs = append(errs, field.Invalid(pp.Child("targetPort"), t.IntVal, msg))
			}
		case intstr.String:
			for _, msg := range validation.IsValidPortName(t.StrVal) {
				errs = append(errs, field.Invalid(pp.Child("targetPort"), t.StrVal, msg))
			}
		}
	}
	return errs
}

// Printer cells as kubectl shows services.

func serviceClusterIP(obj map[string]any) any {
	if ip, _, _ := unstructured.NestedString(obj, "spec", "clusterIP"); ip != "" {
		return ip
	}
	return "<none>"
}

func serviceExternalIP(obj map[string]any) any {
	if t, _, _ := unstructured.NestedString(obj, "spec", "type"); t == string(corev1.ServiceTypeExternalName) {
		n, _, _ := unstructured.NestedString(obj, "spec", "externalName")
		return n
	}
	if ips, _, _ := unstructured.NestedStringSlice(obj, "spec", "externalIPs"); len(ips) > 0 {
		return strings.Join(ips, ",")
	}
	return "<none>"
}

func servicePorts(obj map[string]any) any {
	ports, _, _ := unstructured.NestedSlice(obj, "spec", "ports")
	var out []string
	for _, p := range ports {
		m, _ := p.(map[string]any)
		port, _, _ := unstructured.NestedInt64(m, "port")
		proto, _, _ := unstructured.NestedString(m, "protocol")
		out = append(out, fmt.Sprintf("%d/%s", port, proto))
	}
	if len(out) == 0 {
		return "<none>"
	}
	return strings.Join(out, ",")
}

func serviceSelector(obj map[string]any) any {
	sel, _, _ := unstructured.NestedStringMap(obj, "spec", "selector")
	if len(sel) == 0 {
		return "<none>"
	}
	return fields.Set(sel).String()
}
