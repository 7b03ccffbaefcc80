// Package architecture_test checks the module's structure, from its type
// information (go/packages), so that it does not rot back:
//
//   - The constructors of the operator's and the sidecar's parts (the
//     reconcilers' setup, the xDS server, the sidecar server, the xDS
//     client) are called only in their own package (and its tests) and in
//     the two assembly packages, cmd/weighstation/operatorapp and
//     cmd/weighstation-sidecar/sidecarapp. A test that builds the parts
//     by hand tests a near-copy of the product, which drifts from what
//     ships (the system tests once skipped the CA, the token gate and the
//     bundle publisher that way); through the assembly packages it tests
//     what ships.
//   - Product code never imports a test or bench helper (test/..., hack/...,
//     demo/..., build/..., the helper packages listed in testHelpers): the
//     binaries would link them, and a helper's shortcuts (fixed keys,
//     embedded servers) would be one call away from production.
//   - The operator's packages (controllers/...) never import, even through
//     other packages, the sidecar's (sidecar/..., cmd/weighstation-sidecar/
//     ...): the operator and the sidecar meet over xDS only, so a change to
//     the sidecar's internals must not reach into the operator.
//
// The import rules read non-test files only; the constructor rule reads
// tests too. Every failure names the file and line.
package architecture_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/weighstation/weighstation"

// repoRoot is the module's root: this package is test/architecture.
const repoRoot = "../.."

// assemblies are the packages that put the parts together; their tests,
// too, may call the constructors.
var assemblies = []string{
	module + "/cmd/weighstation/operatorapp",
	module + "/cmd/weighstation-sidecar/sidecarapp",
}

// constructor is a package-level function that only its own package and
// the assemblies may call.
type constructor struct {
	pkg, name string
	// instead is what a test uses in its place.
	instead string
}

func (c constructor) String() string { return c.pkg[strings.LastIndex(c.pkg, "/")+1:] + "." + c.name }

var constructors = []constructor{
	{module + "/controllers", "SetupReconcilers", "operatorapp.New"},
	{module + "/controllers/xds", "NewServer", "operatorapp.New"},
	{module + "/sidecar", "New", "sidecarapp.New"},
	{module + "/sidecar/xdsclient", "New", "sidecarapp.NewOperatorLink (or sidecarapp.New)"},
}

// hostedOnTheXDSServer are the two test files that serve one component on
// the real xDS server (xds.NewServer) with a setting the assembly does not
// let a test choose; nothing else of the operator runs there, and each is
// the way out of its exception:
//   - the Reports stream behind the server's authentication, with a fake
//     clock (operatorapp.New runs the reports on the wall clock);
//   - streams through a CA that rotates in seconds (CALifetime 30 s), for
//     which operatorapp has no option yet.
//
// Files, relative to the module root; only xds.NewServer is allowed there.
var hostedOnTheXDSServer = []string{
	"controllers/reports/service_test.go",
	"controllers/webhook/rotation_streams_test.go",
}

// testHelpers are the module's packages that exist for tests and benches
// only, besides everything under test/ and hack/. Every package under
// internal/ is in this list or in productInternal, so that a new one is a
// decision (TestEveryInternalPackageIsClassified).
var testHelpers = []string{
	"internal/envtestsuite",        // envtest's apiserver, namespaces, Eventually
	"internal/natstest",            // embedded nats-servers
	"internal/poll",                // waiting for a condition, in tests and benches
	"internal/proctest",            // runs a command under test as a process
	"internal/subjectcases",        // the table of subject cases every layer asserts
	"internal/testcert",            // throwaway CAs and serving certificates
	"controllers/xds/reviewtest",   // tests only, against envtest
	"loadgen/latencyplot/plottest", // reads latencyplot's SVGs back, in tests
	"matcher/internal/rwtrie",      // a benchmark peer of matcher's trie
}

// productInternal are the internal packages that ship.
var productInternal = []string{
	"internal/broadcast", "internal/keep", "internal/lockcount", "internal/lockrank", "internal/logflags", "internal/tlsreload", "internal/tokenfile", "internal/version", "internal/wake",
}

// under reports whether pkg is the module's directory dir or below it.
func under(pkg, dir string) bool {
	dir = module + "/" + dir
	return pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

func inModule(pkg string) bool { return pkg == module || strings.HasPrefix(pkg, module+"/") }

func isTestHelper(pkg string) bool {
	// demo/ (make demo) and build/ (make image-oci's packer) are programs a
	// developer runs; the binaries never link them.
	if under(pkg, "test") || under(pkg, "hack") || under(pkg, "demo") || under(pkg, "build") {
		return true
	}
	return slices.ContainsFunc(testHelpers, func(h string) bool { return pkg == module+"/"+h })
}

func isProduct(pkg string) bool { return inModule(pkg) && !isTestHelper(pkg) }

func isSidecar(pkg string) bool {
	return under(pkg, "sidecar") || under(pkg, "cmd/weighstation-sidecar")
}

// importRule forbids the packages from binds to import what to matches;
// transitive follows the module's own imports, not only direct ones.
type importRule struct {
	name       string
	from, to   func(pkg string) bool
	transitive bool
}

var importRules = []importRule{
	{name: "product code imports no test or bench helper", from: isProduct, to: isTestHelper},
	{name: "the operator's packages import nothing of the sidecar", from: func(p string) bool { return under(p, "controllers") }, to: isSidecar, transitive: true},
}

// loadModule loads every package of the module, tests included, with
// types and syntax: once per test binary, since it takes a while.
var loadModule = sync.OnceValues(func() ([]*packages.Package, error) {
	return load(repoRoot, "./...")
})

func load(dir string, patterns ...string) ([]*packages.Package, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports |
			packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo,
		Dir:   dir,
		Tests: true,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, err
	}
	// A package that does not type-check cannot be checked: say so
	// rather than pass on partial information.
	var errs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %v: %s", patterns, strings.Join(errs, "\n"))
	}
	return pkgs, nil
}

func loaded(t *testing.T) []*packages.Package {
	t.Helper()
	start := time.Now()
	pkgs, err := loadModule()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("loaded %d packages (with their test variants) in %s", len(pkgs), d.Round(time.Millisecond))
	}
	return pkgs
}

// isTestMain is the generated main of a test binary ("p.test").
func isTestMain(p *packages.Package) bool { return strings.HasSuffix(p.ID, ".test") }

// isPlain is a package without its tests: the variant whose files are
// GoFiles alone (the others' IDs are "p [p.test]" and "p_test [p.test]").
func isPlain(p *packages.Package) bool { return p.ID == p.PkgPath && !isTestMain(p) }

// position is a file:line relative to the module root.
func position(fset *token.FileSet, pos token.Pos) string {
	p := fset.Position(pos)
	root, err := filepath.Abs(repoRoot)
	if err == nil {
		if rel, err := filepath.Rel(root, p.Filename); err == nil && !strings.HasPrefix(rel, "..") {
			p.Filename = rel
		}
	}
	return fmt.Sprintf("%s:%d", p.Filename, p.Line)
}

// callerAllowed reports whether package caller (a PkgPath: an external
// test package's ends in _test) may call c.
func callerAllowed(caller string, c constructor) bool {
	caller = strings.TrimSuffix(caller, "_test")
	return caller == c.pkg || slices.Contains(assemblies, caller)
}

// constructorUses returns every use of c (a call, or the function as a
// value) in pkgs that allowed refuses, as "file:line: ...", each once
// (a file is in several variants of its package).
func constructorUses(pkgs []*packages.Package, c constructor, allowed func(caller string, c constructor) bool) []string {
	seen := map[string]bool{}
	var found []string
	for _, p := range pkgs {
		if isTestMain(p) || p.TypesInfo == nil || allowed(p.PkgPath, c) {
			continue
		}
		for id, obj := range p.TypesInfo.Uses {
			fn, ok := obj.(*types.Func)
			if !ok || fn.Pkg() == nil || fn.Pkg().Path() != c.pkg || fn.Name() != c.name {
				continue
			}
			if sig, _ := fn.Type().(*types.Signature); sig == nil || sig.Recv() != nil {
				continue // a method of the same name
			}
			at := position(p.Fset, id.Pos())
			if c.pkg == module+"/controllers/xds" && c.name == "NewServer" && slices.Contains(hostedOnTheXDSServer, at[:strings.LastIndex(at, ":")]) {
				continue
			}
			msg := fmt.Sprintf("%s: %s used in package %s; use %s", at, c, p.PkgPath, c.instead)
			if !seen[msg] {
				seen[msg] = true
				found = append(found, msg)
			}
		}
	}
	slices.Sort(found)
	return found
}

// importEdge is one import of a non-test file.
type importEdge struct {
	path string
	at   string // file:line
}

// imports returns each plain package's imports of non-test files, by
// package path, and each one's first position.
func imports(pkgs []*packages.Package) map[string][]importEdge {
	graph := map[string][]importEdge{}
	for _, p := range pkgs {
		if !isPlain(p) {
			continue
		}
		seen := map[string]bool{}
		var edges []importEdge
		for _, f := range p.Syntax {
			for _, spec := range f.Imports {
				path, err := strconv.Unquote(spec.Path.Value)
				if err != nil || seen[path] {
					continue
				}
				seen[path] = true
				edges = append(edges, importEdge{path, position(p.Fset, spec.Pos())})
			}
		}
		graph[p.PkgPath] = edges
	}
	return graph
}

// importViolations returns where the packages rule binds import what it
// forbids: directly, at the import's file:line, or (transitive) through
// other packages of the module, at the first import of the chain.
func importViolations(graph map[string][]importEdge, rule importRule) []string {
	var found []string
	for from, edges := range graph {
		if !rule.from(from) {
			continue
		}
		// Breadth first, so that each forbidden package is named once,
		// with a shortest chain.
		chain := map[string][]string{from: nil}
		at := map[string]string{}
		var queue []string
		for _, e := range edges {
			chain[e.path], at[e.path] = []string{from, e.path}, e.at
			if rule.to(e.path) {
				found = append(found, fmt.Sprintf("%s: %s imports %s", e.at, from, e.path))
			} else if rule.transitive && inModule(e.path) {
				queue = append(queue, e.path)
			}
		}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			for _, e := range graph[cur] {
				if _, ok := chain[e.path]; ok || !inModule(e.path) {
					continue
				}
				next := append(slices.Clone(chain[cur]), e.path)
				chain[e.path] = next
				if rule.to(e.path) {
					found = append(found, fmt.Sprintf("%s: %s imports %s through %s", at[next[1]], from, e.path, strings.Join(next, " → ")))
				} else {
					queue = append(queue, e.path)
				}
			}
		}
	}
	slices.Sort(found)
	return found
}

func TestConstructorsOnlyInTheirPackageAndTheAssemblies(t *testing.T) {
	pkgs := loaded(t)
	for _, c := range constructors {
		t.Run(c.String(), func(t *testing.T) {
			// A renamed or moved constructor would pass unseen.
			defined := slices.ContainsFunc(pkgs, func(p *packages.Package) bool {
				if !isPlain(p) || p.PkgPath != c.pkg || p.Types == nil {
					return false
				}
				_, ok := p.Types.Scope().Lookup(c.name).(*types.Func)
				return ok
			})
			if !defined {
				t.Fatalf("%s is not a function of %s any more: update the table", c.name, c.pkg)
			}
			for _, v := range constructorUses(pkgs, c, callerAllowed) {
				t.Error(v)
			}
		})
	}
}

func TestImportRules(t *testing.T) {
	graph := imports(loaded(t))
	for _, rule := range importRules {
		t.Run(rule.name, func(t *testing.T) {
			for _, v := range importViolations(graph, rule) {
				t.Error(v)
			}
		})
	}
}

// TestEveryInternalPackageIsClassified: the product rule is only as good
// as the list of helpers, so a new internal package must join one list.
func TestEveryInternalPackageIsClassified(t *testing.T) {
	for _, p := range loaded(t) {
		if !isPlain(p) || !under(p.PkgPath, "internal") {
			continue
		}
		rel := strings.TrimPrefix(p.PkgPath, module+"/")
		if !slices.Contains(testHelpers, rel) && !slices.Contains(productInternal, rel) {
			t.Errorf("%s is neither in testHelpers nor in productInternal: is it used by tests only?", rel)
		}
	}
}

// TestTheCheckerFindsViolations runs the checks over testdata/violator, a
// package that calls constructors and imports what the rules forbid: each
// line marked "// flagged: X" must be reported for X, and nothing else.
func TestTheCheckerFindsViolations(t *testing.T) {
	pkgs, err := load(".", "./testdata/violator")
	if err != nil {
		t.Fatal(err)
	}
	const violator = module + "/test/architecture/testdata/violator"
	file := filepath.Join("test", "architecture", "testdata", "violator", "violator.go")
	want := flaggedLines(t, filepath.Join("testdata", "violator", "violator.go"))

	var got []string
	for _, c := range constructors {
		got = append(got, constructorUses(pkgs, c, callerAllowed)...)
		// The same uses, from an allowed package, are not reported.
		if v := constructorUses(pkgs, c, func(string, constructor) bool { return true }); len(v) > 0 {
			t.Errorf("reported although allowed: %v", v)
		}
	}
	graph := imports(pkgs)
	for _, rule := range importRules {
		// The violator lives under test/, which no rule binds: bind it.
		rule.from = func(p string) bool { return p == violator }
		got = append(got, importViolations(graph, rule)...)
	}
	matched := map[string]bool{}
	for _, g := range got {
		at, _, _ := strings.Cut(g, ": ")
		line, _ := strings.CutPrefix(at, file+":")
		ok := false
		for _, what := range want[line] {
			if strings.Contains(g, what) {
				ok, matched[line+" "+what] = true, true
			}
		}
		if !ok {
			t.Errorf("reported, not marked: %s", g)
		}
	}
	for line, whats := range want {
		for _, what := range whats {
			if !matched[line+" "+what] {
				t.Errorf("%s:%s: %s is marked but was not reported (reported: %q)", file, line, what, got)
			}
		}
	}
	if len(want) < 4 {
		t.Errorf("testdata marks %d lines; want calls, a function value and imports", len(want))
	}
}

// flaggedLines reads the "// flagged: X, Y" markers of a file, by line.
func flaggedLines(t *testing.T, name string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			text, ok := strings.CutPrefix(c.Text, "// flagged: ")
			if !ok {
				continue
			}
			line := strconv.Itoa(fset.Position(c.Pos()).Line)
			for w := range strings.SplitSeq(text, ",") {
				want[line] = append(want[line], strings.TrimSpace(w))
			}
		}
	}
	return want
}

// TestImportsAreFollowedThroughOtherPackages: the transitive rule finds a
// forbidden package behind packages it does not bind, names the shortest
// chain once, and stays inside the module.
func TestImportsAreFollowedThroughOtherPackages(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	graph := map[string][]importEdge{
		m("controllers/a"): {{m("meshconfig"), "a.go:3"}, {m("matcher"), "a.go:4"}, {"example.com/x", "a.go:5"}},
		m("controllers/b"): {{m("sidecar"), "b.go:3"}},
		m("meshconfig"):    {{m("matcher"), "meshconfig.go:3"}, {m("sidecar/upstream"), "meshconfig.go:4"}},
		m("matcher"):       {{m("sidecar/upstream"), "matcher.go:3"}},
		"example.com/x":    {{m("sidecar"), "x.go:3"}},
	}
	rule := importRules[1]
	got := importViolations(graph, rule)
	want := []string{
		"a.go:3: " + m("controllers/a") + " imports " + m("sidecar/upstream") + " through " +
			strings.Join([]string{m("controllers/a"), m("meshconfig"), m("sidecar/upstream")}, " → "),
		"b.go:3: " + m("controllers/b") + " imports " + m("sidecar"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rule.transitive = false
	if got := importViolations(graph, rule); len(got) != 1 {
		t.Errorf("direct imports only: got %q, want b.go's alone", got)
	}
}
