package kube_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// cells masks ages and collapses the padding between columns, which
// moves with the ages' widths.
func cells(s string) string {
	lines := strings.Split(ages.ReplaceAllString(s, "AGE"), "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// ages matches the AGE and DURATION cells kubectl prints (3s, 2m5s, 1h).
var ages = regexp.MustCompile(`\b\d+[smhd](\d+[smh])?\b`)

// TestKubectlBuiltInKinds runs the kubectl commands a newcomer tries first
// on the built-in workload kinds and checks kubectl's output as it prints
// it. The expectations are kube-apiserver v1.37.2's answers to the same
// commands, run by hand against the reference kit with no controllers and
// a default service account (envtest turns ServiceAccount admission off;
// without either, kube refuses the pods): nothing becomes ready, no pod
// gets an IP. The tables come from Kubernetes' own printers; ages are
// masked.
func TestKubectlBuiltInKinds(t *testing.T) {
	env := testenv.Start(t)
	k := servertest.NewOAKubectl(t, env)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"create", "deployment", "web", "--image=nginx", "--replicas=2"}, "deployment.apps/web created\n"},
		{[]string{"get", "deploy", "web"}, `
NAME   READY   UP-TO-DATE   AVAILABLE   AGE
web    0/2     0            0           AGE
`},
		{[]string{"scale", "deployment", "web", "--replicas=3"}, "deployment.apps/web scaled\n"},
		{[]string{"get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"}, "3 2"},
		{[]string{"get", "deploy", "web", "-o", "wide"}, `
NAME   READY   UP-TO-DATE   AVAILABLE   AGE   CONTAINERS   IMAGES   SELECTOR
web    0/3     0            0           AGE   nginx        nginx    app=web
`},
		{[]string{"scale", "deployment", "web", "--current-replicas=2", "--replicas=5"}, "error: Expected replicas to be 2, was 3\n"},
		{[]string{"create", "job", "pi", "--image=perl"}, "job.batch/pi created\n"},
		{[]string{"get", "jobs"}, `
NAME   STATUS    COMPLETIONS   DURATION   AGE
pi     Running   0/1                      AGE
`},
		{[]string{"create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *"}, "cronjob.batch/tick created\n"},
		{[]string{"create", "cronjob", "bad", "--image=busybox", "--schedule=every minute"}, `error: failed to create cronjob: CronJob.batch "bad" is invalid: spec.schedule: Invalid value: "every minute": expected exactly 5 fields, found 2: [every minute]`},
		{[]string{"run", "p1", "--image=nginx"}, "pod/p1 created\n"},
		{[]string{"run", "p2", "--image=nginx", `--overrides={"spec":{"nodeName":"n1"}}`}, "pod/p2 created\n"},
		{[]string{"get", "pods", "-o", "wide"}, `
NAME   READY   STATUS    RESTARTS   AGE   IP       NODE     NOMINATED NODE   READINESS GATES
p1     0/1     Pending   0          AGE   <none>   <none>   <none>           <none>
p2     0/1     Pending   0          AGE   <none>   n1       <none>           <none>
`},
		{[]string{"get", "pods", "--field-selector", "spec.nodeName=n1", "-o", "name"}, "pod/p2\n"},
		{[]string{"get", "all"}, `
NAME     READY   STATUS    RESTARTS   AGE
pod/p1   0/1     Pending   0          AGE
pod/p2   0/1     Pending   0          AGE

NAME                 TYPE        CLUSTER-IP   EXTERNAL-IP   PORT(S)   AGE
service/kubernetes   ClusterIP   10.0.0.1     <none>        443/TCP   AGE

NAME                  READY   UP-TO-DATE   AVAILABLE   AGE
deployment.apps/web   0/3     0            0           AGE

NAME                 SCHEDULE      TIMEZONE   SUSPEND   ACTIVE   LAST SCHEDULE   AGE
cronjob.batch/tick   */5 * * * *   <none>     False     0        <none>          AGE

NAME           STATUS    COMPLETIONS   DURATION   AGE
job.batch/pi   Running   0/1                      AGE
`},
	}
	for _, s := range steps {
		out, stderr, err := k.Run(s.args...)
		got, want := cells(out+stderr), cells(strings.TrimPrefix(s.want, "\n"))
		if strings.HasPrefix(want, "error: ") {
			if err == nil || !strings.HasPrefix(got, want) {
				t.Errorf("kubectl %s:\n got (err %v)\n%s\nwant a failure starting\n%s", strings.Join(s.args, " "), err, got, want)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("kubectl %s (err %v):\n got\n%s\nwant\n%s", strings.Join(s.args, " "), err, got, want)
		}
	}
}
