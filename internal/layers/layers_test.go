package layers_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/wasmhost/wasmhost"

// allowed lists, for each package of the module (by path from the module
// root; a trailing "/..." covers a tree), the packages of the module its
// non-test files may import. It is the graph of docs/architecture.md,
// from the leaves up:
//
//	abi, internal/* helpers, plugins/*       import nothing of ours
//	config (plain data)                      internal/mcpname
//	host (plugin runtime), metakey           abi, internal wasm and JSON helpers
//	pool (transports, snapshots)             internal/churn, internal/inflight, internal/telemetry
//	view (projections)                       abi, internal/churn, pool
//	reconcile                                config, pool, view, abi
//	session (endpoints)                      pool, view
//	conformance                              abi, host, pool, view
//	daemon, cmd/wasmhost (the edge)          anything below them
//
// An import not listed fails the test: either it reaches sideways or up,
// and the code should move, or the design changed, and this table and
// docs/architecture.md change with it.
var allowed = map[string][]string{
	"abi":                   nil,
	"config":                {"internal/mcpname"},
	"metakey":               {"abi", "internal/jsonvalid"},
	"host":                  {"abi", "internal/jsonvalid", "internal/wasmbin", "internal/wasmmeter", "internal/wasmpack"},
	"pool":                  {"internal/churn", "internal/inflight", "internal/telemetry"},
	"view":                  {"abi", "internal/churn", "pool"},
	"view/viewtest":         {"view"},
	"reconcile":             {"abi", "config", "internal/churn", "pool", "view"},
	"session":               {"internal/clip", "internal/inflight", "internal/mcpname", "internal/telemetry", "pool", "view"},
	"conformance":           {"abi", "host", "pool", "view"},
	"daemon":                {"abi", "config", "host", "internal/...", "plugins/policy-default", "pool", "reconcile", "session", "view"},
	"cmd/wasmhost":          {"abi", "config", "conformance", "daemon", "host", "internal/...", "plugins/policy-default", "testplugins/policy-default-as", "pool", "reconcile", "session", "view"}, // the AssemblyScript scaffold is that plugin's source
	"internal/wasmmeter":    {"internal/wasmbin"},
	"internal/wasmpack/...": {"internal/wasmbin", "internal/wasmpack"},
	"internal/peakmem/...":  {"internal/peakmem"},
	"internal/telemetry":    {"internal/clip"},
	"internal/redact":       {"config"},
	"internal/bench":        {"abi", "config", "internal/churn", "pool", "reconcile", "view"},
	"internal/...":          nil, // the other internal packages are leaves
	"plugins/...":           nil,
	"testplugins/...":       {"abi"},
	"deploy/...":            nil,
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

// TestImportsPointOneWay reads the module's import graph with go list and
// checks every edge against allowed and debt.
func TestImportsPointOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}", module+"/...").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	var bad []string
	usedDebt := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pkgPath, imports, _ := strings.Cut(sc.Text(), "|")
		pkg := strings.TrimPrefix(strings.TrimPrefix(pkgPath, module), "/")
		if pkg == "" || strings.HasPrefix(pkg, "internal/layers") {
			continue
		}
		key, ok := rule(pkg)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: a package the layering does not place (add it to allowed and docs/architecture.md)", pkg))
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
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
