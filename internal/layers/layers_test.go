package layers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/wasmhost/wasmhost"

// allowed lists, for each package of the module (by path from the module
// root; a trailing "/..." covers a tree), the packages of the module its
// non-test files may import, on the host's GOOS or on wasip1 (the Go
// plugins' files). It is the graph of docs/architecture.md, from the
// leaves up:
//
//	abi, internal/* helpers                  import nothing of ours
//	plugins/*, testplugins/* (wasip1)        abi, the contract they speak
//	testplugins/hostile-go/*                 also metakey (they answer as the default policy)
//	                                         and sandboxprobe (its report, shared with host's tests)
//	config (plain data)                      internal/mcpname
//	host (plugin runtime), metakey           abi, internal wasm and JSON helpers
//	pool (transports, snapshots)             internal/inflight, internal/opcount, internal/telemetry
//	view (projections)                       abi, internal/opcount, pool
//	reconcile                                config, pool, view, abi
//	session (endpoints)                      pool, view
//	conformance                              abi, host, pool, view
//	daemon, cmd/wasmhost (the edge)          anything below them
//
// An import not listed fails the test: either it reaches sideways or up,
// and the code should move, or the design changed, and this table and
// docs/architecture.md change with it.
var allowed = map[string][]string{
	"abi":                        nil,
	"config":                     {"internal/mcpname"},
	"metakey":                    {"abi", "internal/jsonvalid"},
	"host":                       {"abi", "internal/jsonvalid", "internal/wasmbin", "internal/wasmmeter", "internal/wasmpack"},
	"pool":                       {"internal/clip", "internal/inflight", "internal/opcount", "internal/telemetry"},
	"view":                       {"abi", "internal/opcount", "pool"},
	"view/viewtest":              {"view"},
	"reconcile":                  {"abi", "config", "internal/opcount", "pool", "view"},
	"session":                    {"internal/clip", "internal/inflight", "internal/mcpname", "internal/telemetry", "pool", "view"},
	"conformance":                {"abi", "host", "pool", "view"},
	"daemon":                     {"abi", "config", "host", "internal/...", "plugins/policy-default", "pool", "reconcile", "session", "view"},
	"cmd/wasmhost":               {"abi", "config", "conformance", "daemon", "host", "internal/...", "plugins/policy-default", "testplugins/policy-default-as", "pool", "reconcile", "session", "view"}, // the AssemblyScript scaffold is that plugin's source
	"internal/wasmmeter":         {"internal/wasmbin"},
	"internal/wasmpack/...":      {"internal/wasmbin", "internal/wasmpack"},
	"internal/peakmem/...":       {"internal/peakmem", "internal/procstat"},
	"internal/telemetry":         {"internal/clip"},
	"internal/redact":            {"config"},
	"internal/bench":             {"abi", "config", "internal/opcount", "pool", "reconcile", "view"},
	"internal/...":               nil, // the other internal packages are leaves
	"plugins/...":                {"abi"},
	"testplugins/...":            {"abi"},
	"testplugins/hostile-go/...": {"abi", "metakey", "testplugins/hostile-go/sandboxprobe"},
	"deploy/...":                 nil,
}

// debt lists imports that break the layering and are still to be removed.
// The test fails when one of them goes, so that the list only shrinks.
// It is empty: issue #26 removed the last (pool imported config and view).
var debt = map[string][]string{}

// matches reports whether pattern (a package, or a tree "dir/...") covers
// pkg.
func matches(pattern, pkg string) bool {
	tree, isTree := strings.CutSuffix(pattern, "/...")
	return pattern == pkg || isTree && (pkg == tree || strings.HasPrefix(pkg, tree+"/"))
}

// rule returns the entry of allowed that covers pkg: its own, or the
// longest tree above it.
func rule(pkg string) (key string, ok bool) {
	if _, ok := allowed[pkg]; ok {
		return pkg, true
	}
	best := ""
	for k := range allowed {
		if strings.HasSuffix(k, "/...") && matches(k, pkg) && len(k) > len(best) {
			best = k
		}
	}
	return best, best != ""
}

func covers(list []string, imp string) bool {
	return slices.ContainsFunc(list, func(a string) bool { return matches(a, imp) })
}

// A listed is one package as go list -json describes it.
type listed struct {
	ImportPath string
	Imports    []string
	Error      *struct{ Err string }
}

// list runs go list -e -json on the module with env added to the
// environment, and returns its packages.
func list(t *testing.T, env ...string) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Error", module+"/...")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(env, " "), err, stderr.Bytes())
	}
	var pkgs []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list %s: decoding its output: %v", strings.Join(env, " "), err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// wasip1 is the environment the Go plugins build in. go list leaves out,
// on the host's GOOS, the packages that build only there (the plugins'
// main packages under plugins/ and testplugins/).
var wasip1 = []string{"GOOS=wasip1", "GOARCH=wasm"}

// imports returns the module's import graph, each package's imports
// deduplicated: the union of go list's graph on the host's GOOS and on
// wasip1, so that the wasip1-only packages are checked too. A package that
// fails to load on the host fails the test; on wasip1, only one that does
// not load on the host either (the daemon does not build there, and need
// not).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	var bad []string
	for _, p := range list(t) {
		if p.Error != nil {
			bad = append(bad, fmt.Sprintf("%s: %s", p.ImportPath, p.Error.Err))
		}
		graph[p.ImportPath] = p.Imports
	}
	for _, p := range list(t, wasip1...) {
		if _, native := graph[p.ImportPath]; native {
			graph[p.ImportPath] = append(graph[p.ImportPath], p.Imports...)
		} else if p.Error != nil {
			bad = append(bad, fmt.Sprintf("%s (GOOS=wasip1): %s", p.ImportPath, p.Error.Err))
		} else {
			graph[p.ImportPath] = p.Imports
		}
	}
	if len(bad) > 0 {
		t.Fatalf("go list could not load:\n  %s", strings.Join(bad, "\n  "))
	}
	for pkg, imps := range graph {
		slices.Sort(imps)
		graph[pkg] = slices.Compact(imps)
	}
	return graph
}

// TestImportsPointOneWay reads the module's import graph with go list, on
// the host's GOOS and on wasip1, and checks every edge against allowed and
// debt.
func TestImportsPointOneWay(t *testing.T) {
	graph := imports(t)
	if len(graph) < 10 {
		t.Fatalf("go list found only %d packages", len(graph))
	}
	var bad []string
	usedDebt := map[string]bool{}
	for _, pkgPath := range slices.Sorted(maps.Keys(graph)) {
		pkg := strings.TrimPrefix(strings.TrimPrefix(pkgPath, module), "/")
		if pkg == "" || strings.HasPrefix(pkg, "internal/layers") {
			continue
		}
		key, ok := rule(pkg)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: a package the layering does not place (add it to allowed and docs/architecture.md)", pkg))
			continue
		}
		for _, imp := range graph[pkgPath] {
			own, isOwn := strings.CutPrefix(imp, module+"/")
			if !isOwn || strings.HasPrefix(own, pkg+"/") { // not ours, or pkg's own subpackage
				continue
			}
			switch {
			case covers(allowed[key], own):
			case slices.Contains(debt[pkg], own):
				usedDebt[pkg+" -> "+own] = true
			default:
				bad = append(bad, fmt.Sprintf("%s imports %s", pkg, own))
			}
		}
	}
	for pkg, imps := range debt {
		for _, imp := range imps {
			if !usedDebt[pkg+" -> "+imp] {
				bad = append(bad, fmt.Sprintf("%s no longer imports %s: remove it from debt", pkg, imp))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("the import graph breaks the layering of docs/architecture.md:\n  %s", strings.Join(bad, "\n  "))
	}
}
