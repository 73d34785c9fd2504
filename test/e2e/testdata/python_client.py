"""The Python Kubernetes client against objwatch, driven by python_test.go.

Lists configmaps in a namespace, watches from the list's resourceVersion
(with bookmarks) while the Go side writes, then, when told to, watches from
that resourceVersion again after the server compacted it, which must end in
a 410. Every step is reported as one line on stdout.
"""
import json
import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


def say(*words):
    print(*words, flush=True)


def main(kubeconfig, namespace):
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()

    cms = v1.list_namespaced_config_map(namespace)
    rv = cms.metadata.resource_version
    say("LISTED", rv, ",".join(sorted(cm.metadata.name for cm in cms.items)))

    say("WATCHING")
    w = watch.Watch()
    modified = bookmarks = 0
    for ev in w.stream(v1.list_namespaced_config_map, namespace, resource_version=rv,
                       allow_watch_bookmarks=True, timeout_seconds=60):
        if ev["type"] == "BOOKMARK":
            bookmarks += 1
            say("BOOKMARK", ev["raw_object"]["metadata"]["resourceVersion"])
        else:
            obj = ev["object"]
            say("EVENT", ev["type"], obj.metadata.name, obj.metadata.resource_version, json.dumps(obj.data, sort_keys=True))
            if ev["type"] == "MODIFIED":
                modified += 1
        if modified and bookmarks:
            w.stop()
    say("WATCHED")

    sys.stdin.readline()  # the Go side compacted the history
    try:
        for ev in watch.Watch().stream(v1.list_namespaced_config_map, namespace, resource_version=rv,
                                       timeout_seconds=20):
            say("UNEXPECTED", ev["type"])
        say("NOERROR")
    except ApiException as e:
        say("GONE", e.status)
    say("DONE")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
