#!/usr/bin/env bash
# Runs controller-runtime's own envtest-based test suites of pkg/client and
# pkg/cache against objwatch, as an existing cluster (USE_EXISTING_CLUSTER),
# each suite on a fresh server: an optional compatibility check, not part
# of go test ./... (the suites take minutes and need their module's own
# dependencies).
#
#   test/controllerruntime/run.sh [PACKAGE...]   # default: ./pkg/client ./pkg/cache
#
# The controller-runtime version is the one go.mod requires. Its module is
# copied out of the read-only module cache into a temporary directory
# (CRT_DIR to keep and reuse one), its dependencies are downloaded, and
# each package's test binary is built there. GINKGO_ARGS passes more
# flags to the suites, e.g. GINKGO_ARGS='-ginkgo.focus=Pod'.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./pkg/client ./pkg/cache)

src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/controller-runtime)
version=$(go list -m -f '{{.Version}}' sigs.k8s.io/controller-runtime)
work=${CRT_DIR:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${CRT_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
if [ ! -f "$work/crt/go.mod" ]; then
	cp -r "$src" "$work/crt"
	chmod -R u+w "$work/crt"
fi
echo "controller-runtime $version in $work/crt"
(cd "$work/crt" && go mod download)

go build -o "$work/objwatch" ./cmd/objwatch

server=
stop() {
	if [ -n "$server" ]; then
		kill "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
		server=
	fi
}
trap 'stop; [ -n "${CRT_DIR:-}" ] || rm -rf "$work"' EXIT

rc=0
for pkg in "${pkgs[@]}"; do
	name=$(basename "$pkg")
	(cd "$work/crt" && go test -c -o "$work/$name.test" "$pkg")
	data="$work/data-$name"
	rm -rf "$data"
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 16443)
	"$work/objwatch" serve --data-dir "$data" --listen "127.0.0.1:$port" >"$work/serve-$name.log" 2>&1 &
	server=$!
	for _ in $(seq 100); do
		[ -f "$data/kubeconfig" ] && KUBECONFIG="$data/kubeconfig" curl -sk "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	echo "== $pkg against objwatch on 127.0.0.1:$port (log: $work/serve-$name.log)"
	# The suites' tests read their testdata relative to the package.
	(cd "$work/crt/$pkg" && USE_EXISTING_CLUSTER=true KUBECONFIG="$data/kubeconfig" \
		"$work/$name.test" -test.timeout 20m ${GINKGO_ARGS:-}) || rc=1
	stop
done
exit $rc
