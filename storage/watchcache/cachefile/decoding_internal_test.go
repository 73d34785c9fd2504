package cachefile

import (
	"go/version"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func build(goVersion string, deps ...*debug.Module) *debug.BuildInfo {
	return &debug.BuildInfo{GoVersion: goVersion, Main: debug.Module{Path: "example.com/main", Version: "(devel)"}, Deps: deps}
}

// TestDecodingNamesModulesNotTheExecutable: the fingerprint of a build
// is its Go release and the versions of the modules named, the same for
// two binaries that differ in nothing else (whatever their executables),
// and different when a named module's version, its replacement or the Go
// release differs. The executable is named only where versions cannot
// name the code: no build information, a modified work tree, a module
// replaced by a directory.
func TestDecodingNamesModulesNotTheExecutable(t *testing.T) {
	mods := []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/kubernetes"}
	api := &debug.Module{Path: "k8s.io/api", Version: "v0.37.2"}
	machinery := &debug.Module{Path: "k8s.io/apimachinery", Version: "v0.37.2"}
	other := &debug.Module{Path: "example.com/other", Version: "v1.0.0"}
	exeCalls := 0
	exe := func() string { exeCalls++; return "/bin/objwatch 1234 5678" }

	base := decoding(build("go1.26.8", api, machinery), exe, mods)
	if want := "format 1 go1.26 k8s.io/api@v0.37.2 k8s.io/apimachinery@v0.37.2 k8s.io/kubernetes@none"; base != want {
		t.Errorf("decoding = %q, want %q", base, want)
	}
	for name, bi := range map[string]*debug.BuildInfo{
		"another Go patch release":    build("go1.26.9", api, machinery),
		"a module not named changed":  build("go1.26.8", api, machinery, other),
		"the main module's version":   {GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/main", Version: "v9.9.9"}, Deps: []*debug.Module{api, machinery}},
		"the same modules, reordered": build("go1.26.8", machinery, api),
	} {
		if got := decoding(bi, exe, mods); got != base {
			t.Errorf("%s: decoding = %q, want the same as %q", name, got, base)
		}
	}
	if exeCalls != 0 {
		t.Errorf("the executable was looked at %d times for builds whose modules have versions", exeCalls)
	}
	for name, bi := range map[string]*debug.BuildInfo{
		"another Go release":         build("go1.27.0", api, machinery),
		"a named module's version":   build("go1.26.8", api, &debug.Module{Path: "k8s.io/apimachinery", Version: "v0.37.3"}),
		"a named module replaced":    build("go1.26.8", api, &debug.Module{Path: "k8s.io/apimachinery", Version: "v0.37.2", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.37.2-fork"}}),
		"a named module added":       build("go1.26.8", api, machinery, &debug.Module{Path: "k8s.io/kubernetes", Version: "v1.37.2"}),
		"a development Go toolchain": build("devel go1.27-abcdef", api, machinery),
	} {
		if got := decoding(bi, exe, mods); got == base {
			t.Errorf("%s: decoding = %q, the same as the base build's", name, got)
		}
	}

	local := decoding(build("go1.26.8", api, &debug.Module{Path: "k8s.io/apimachinery", Version: "v0.37.2", Replace: &debug.Module{Path: "../apimachinery"}}), exe, mods)
	if !strings.HasSuffix(local, " exe /bin/objwatch 1234 5678") {
		t.Errorf("a module replaced by a directory: decoding = %q, want the executable named", local)
	}
	dirty := build("go1.26.8", api, machinery)
	dirty.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}
	if got := decoding(dirty, exe, mods); got != base+" exe /bin/objwatch 1234 5678" {
		t.Errorf("a build from a modified work tree: decoding = %q, want the executable named", got)
	}
	clean := build("go1.26.8", api, machinery)
	clean.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}
	if got := decoding(clean, exe, mods); got != base {
		t.Errorf("a build from a clean work tree: decoding = %q, want %q", got, base)
	}
	if got := decoding(nil, exe, mods); got != "format 1 exe /bin/objwatch 1234 5678" {
		t.Errorf("no build information: decoding = %q, want the format and the executable", got)
	}
}

// TestDecodingOfThisBinary: the running binary's fingerprint names its
// Go release and neither its executable's path nor its time. (A test
// binary's build information lists no modules: each is "none" here.)
func TestDecodingOfThisBinary(t *testing.T) {
	got := Decoding("k8s.io/apimachinery")
	if want := "format 1 " + version.Lang(runtime.Version()) + " k8s.io/apimachinery@"; !strings.HasPrefix(got, want) {
		t.Errorf("Decoding = %q, want it to start %q", got, want)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, exe) || strings.Contains(got, " exe ") {
		t.Errorf("Decoding = %q names the executable %s", got, exe)
	}
	if again := Decoding("k8s.io/apimachinery"); again != got {
		t.Errorf("Decoding = %q, then %q", got, again)
	}
}
