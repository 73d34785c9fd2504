"""A Python client of objwatch's watch extensions, driven by python_watchext_test.go.

Reads /version's watchExtensions, lists configmaps in a namespace (keeping
each object's JSON), then watches them from the list's resourceVersion with
a field mask and delta events through the client's raw API
(_preload_content=False), applying each delta event's JSON Patch (RFC 6902:
add, remove, replace) to its copy. Every step is reported as one line on
stdout; the Go side compares the objects with what it wrote.
"""
import copy
import json
import sys

from kubernetes import client, config


def say(*words):
    print(*words, flush=True)


def unescape(token):
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc, patch):
    """Applies an RFC 6902 patch of add, remove and replace to a copy of doc."""
    doc = copy.deepcopy(doc)
    for op in patch:
        path = op["path"]
        if path == "":
            doc = copy.deepcopy(op["value"])
            continue
        tokens = [unescape(t) for t in path.split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            if op["op"] == "add":
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            elif op["op"] == "remove":
                del parent[int(last)]
            else:
                parent[int(last)] = op["value"]
        else:
            if op["op"] == "remove":
                del parent[last]
            elif op["op"] == "replace" and last not in parent:
                raise KeyError(path)
            else:
                parent[last] = op["value"]
    return doc


def lines(resp):
    """Yields the newline-delimited frames of a streamed watch response."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def main(kubeconfig, namespace):
    config.load_kube_config(config_file=kubeconfig)
    api = client.ApiClient()

    def get(path, query, stream=False):
        return api.call_api(path, "GET", query_params=query, header_params={"Accept": "application/json"},
                            auth_settings=["BearerToken"], _preload_content=False,
                            _return_http_data_only=True, _request_timeout=None if stream else 30)

    version = json.loads(get("/version", []).data)
    extensions = [e for e in version.get("watchExtensions", "").split(",") if e]
    say("EXTENSIONS", ",".join(extensions) or "-")
    if "fieldMask" not in extensions or "watchDeltas" not in extensions:
        say("DONE")
        return

    path = "/api/v1/namespaces/%s/configmaps" % namespace
    listed = json.loads(get(path, []).data)
    copies = {o["metadata"]["name"]: o for o in listed["items"]}
    rv = listed["metadata"]["resourceVersion"]
    say("LISTED", rv)

    resp = get(path, [("watch", "true"), ("resourceVersion", rv), ("allowWatchBookmarks", "true"),
                      ("timeoutSeconds", "60"), ("fieldMask", "/data/watched"), ("watchDeltas", "true")], stream=True)
    say("WATCHING")
    for ev in lines(resp):
        obj = ev["object"]
        if ev["type"] == "BOOKMARK":
            continue
        name = obj["metadata"]["name"]
        how = "FULL"
        if ev["type"] == "MODIFIED" and "patch" in ev:
            how = "PATCH"
            obj = apply_patch(copies[name], ev["patch"])
            if obj["metadata"]["resourceVersion"] != ev["object"]["metadata"]["resourceVersion"]:
                say("BADPATCH", name)
        if ev["type"] == "DELETED":
            copies.pop(name, None)
        else:
            copies[name] = obj
        say("EVENT", ev["type"], name, obj["metadata"]["resourceVersion"], how, json.dumps(obj.get("data"), sort_keys=True))
        if name == "end":
            break
    resp.release_conn()
    say("DONE")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
