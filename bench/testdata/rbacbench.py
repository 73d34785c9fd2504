# Writes /tmp/rbacbench.yaml: 1,000 Roles and 10,000 RoleBindings in default, and the
# bindings that let alice run objwatch bench (docs/PERFORMANCE.md, RBAC).
import random
random.seed(1)
out=[]
for i in range(1000):
    out.append(f"""apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: role-{i}, namespace: default}}
rules:
- apiGroups: [""]
  resources: [secrets-{i}]
  verbs: [get, list]
""")
out.append("""apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bench-writer, namespace: default}
rules:
- apiGroups: [bench.objwatch.io]
  resources: [benchobjects]
  verbs: ["*"]
""")
for i in range(10000):
    out.append(f"""apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: binding-{i}, namespace: default}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: role-{random.randrange(1000)}}}
subjects:
- {{kind: User, name: user-{i}, apiGroup: rbac.authorization.k8s.io}}
- {{kind: Group, name: group-{i%100}, apiGroup: rbac.authorization.k8s.io}}
""")
out.append("""apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-writes, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: bench-writer}
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
""")
out.append("""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bench-crds}
rules:
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: ["*"]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [create, get]
- nonResourceURLs: ["/metrics", "/debug/pprof/*"]
  verbs: [get]
""")
out.append("""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-bench-crds}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bench-crds}
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
""")
open('/tmp/rbacbench.yaml','w').write("---\n".join(out))
