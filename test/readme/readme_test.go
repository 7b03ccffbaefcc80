// Package readme_test checks that every command the README (and the docs/
// it links) tells a reader to run works as written: each `make` target is a
// target of the Makefile, each `weighstation <subcommand>` exists and each
// flag written after it is one of that subcommand's flags (from the
// binary's own -h), `weighstation-sidecar` and its flags likewise, each
// `helm --set key=value` key and each chart value named in inline code is a
// key of charts/weighstation/values.yaml, each `kubectl` resource of ours is
// a name the CRDs declare, and each relative link points at a file or
// directory of the repository (and each #anchor at a heading).
//
// Failures name the file and line.
package readme_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root: this package is test/readme.
const repoRoot = "../.."

// A span is a piece of command text from a document: one line of a code
// block (continuation lines joined) or one inline code span.
type span struct {
	file string // relative to the repository root
	line int
	text string
	code bool // from a fenced code block
}

func (s span) where() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// documents are README.md and every docs/*.md.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(repoRoot, d)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var fence = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_-]*)")

// inlineCode matches an inline code span, which may wrap across lines.
var inlineCode = regexp.MustCompile("`([^`]+)`")

// parse splits a document into its code-block lines and the rest (prose),
// with prose's inline code spans. Code blocks in data languages (yaml,
// json, go) hold no commands and are left out.
func parse(file, text string) (spans []span, prose []string) {
	lines := strings.Split(text, "\n")
	prose = make([]string, len(lines)) // by line, empty inside code blocks
	inBlock, skip := false, false
	var marker string
	pending, pendingLine := "", 0
	for i, l := range lines {
		if m := fence.FindStringSubmatch(l); m != nil && (!inBlock || strings.HasPrefix(strings.TrimSpace(l), marker)) {
			if !inBlock {
				inBlock, marker = true, m[1]
				switch strings.ToLower(m[2]) {
				case "yaml", "yml", "json", "go":
					skip = true
				default:
					skip = false
				}
			} else {
				inBlock = false
			}
			continue
		}
		if !inBlock {
			prose[i] = l
			continue
		}
		if skip {
			continue
		}
		code := stripComment(l)
		if pending == "" {
			pendingLine = i + 1
		}
		if strings.HasSuffix(strings.TrimSpace(code), "\\") {
			pending += strings.TrimSuffix(strings.TrimSpace(code), "\\") + " "
			continue
		}
		spans = append(spans, span{file: file, line: pendingLine, text: strings.Join(strings.Fields(pending+code), " "), code: true})
		pending = ""
	}
	// Inline code in prose: run over the joined prose so that a span
	// wrapped across lines is one span, and map its offset to a line.
	joined := strings.Join(prose, "\n")
	for _, m := range inlineCode.FindAllStringSubmatchIndex(joined, -1) {
		line := strings.Count(joined[:m[0]], "\n") + 1
		spans = append(spans, span{file: file, line: line, text: strings.Join(strings.Fields(joined[m[2]:m[3]]), " ")})
	}
	return spans, prose
}

// stripComment removes a shell comment: a # at the start or after a blank.
func stripComment(l string) string {
	for i := 0; i < len(l); i++ {
		if l[i] == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t') {
			return l[:i]
		}
	}
	return l
}

// A command is one simple command of a span: its program and arguments.
type command struct {
	span
	args []string // args[0] is the program as written
}

var separators = map[string]bool{"&&": true, "||": true, "|": true, ";": true, "&": true}
var prefixes = map[string]bool{"$": true, "sudo": true, "exec": true, "time": true, "env": true}
var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*$`)

// commands splits a span into simple commands: the words after a
// separator, a prompt, or leading VAR=value assignments.
func commands(s span) []command {
	text := s.text
	for sep := range separators {
		text = strings.ReplaceAll(text, sep, " "+sep+" ")
	}
	// ReplaceAll of "|" split "||" and of "&" split "&&": both are still
	// separators, only repeated.
	var out []command
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, command{span: s, args: cur})
		}
		cur = nil
	}
	for _, w := range strings.Fields(text) {
		switch {
		case separators[w]:
			flush()
		case len(cur) == 0 && (prefixes[w] || envAssign.MatchString(w)):
			// not the program yet
		default:
			cur = append(cur, w)
		}
	}
	flush()
	return out
}

// program is a command's program name: bin/weighstation is weighstation.
func program(arg string) string {
	return filepath.Base(strings.Trim(arg, "()"))
}

// allCommands gathers every document's commands, with its prose.
func allCommands(t *testing.T) (cmds []command, prose map[string][]string) {
	t.Helper()
	prose = map[string][]string{}
	for _, f := range documents(t) {
		spans, p := parse(f, read(t, f))
		prose[f] = p
		for _, s := range spans {
			cmds = append(cmds, commands(s)...)
		}
	}
	return cmds, prose
}

// --- make targets ---

var makeRule = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9_.-]*)\s*:([^=]|$)`)

func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	targets := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(read(t, "Makefile")))
	for sc.Scan() {
		if m := makeRule.FindStringSubmatch(sc.Text()); m != nil {
			targets[m[1]] = true
		}
	}
	return targets
}

var targetWord = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func TestMakeTargetsExist(t *testing.T) {
	targets := makeTargets(t)
	if !targets["test"] {
		t.Fatalf("the Makefile parser found no target test: %v", targets)
	}
	cmds, _ := allCommands(t)
	seen := 0
	for _, c := range cmds {
		if c.args[0] != "make" {
			continue
		}
		for _, a := range c.args[1:] {
			if strings.HasPrefix(a, "-") || envAssign.MatchString(a) {
				continue
			}
			if !targetWord.MatchString(a) {
				break // prose after the command
			}
			seen++
			if !targets[a] {
				t.Errorf("%s: `make %s`: the Makefile has no target %q", c.where(), a, a)
			}
		}
	}
	if seen == 0 {
		t.Fatal("found no `make` target in the documents: the parser is broken")
	}
}

// --- subcommands and flags ---

// binaries builds bin/weighstation, and cmd/weighstation-sidecar when the
// tree has it, with one go build into a temporary directory.
type binaries struct {
	dir        string
	hasSidecar bool
}

var (
	buildOnce sync.Once
	built     binaries
	buildErr  error
)

func build(t *testing.T) binaries {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "readme-test-")
		if err != nil {
			buildErr = err
			return
		}
		built.dir = dir
		pkgs := []string{"./cmd/weighstation"}
		if _, err := os.Stat(filepath.Join(repoRoot, "cmd", "weighstation-sidecar", "main.go")); err == nil {
			built.hasSidecar = true
			pkgs = append(pkgs, "./cmd/weighstation-sidecar")
		}
		cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build %v: %v\n%s", pkgs, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// usageFlag is a flag line of Go's flag package usage: "  -name type".
var usageFlag = regexp.MustCompile(`(?m)^\s{1,4}-{1,2}([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// help runs bin -h (with args before it) and returns its output; the exit
// status is not looked at, since -h exits 0 or 2 by the flag package's
// version.
func help(bin string, args ...string) string {
	out, _ := exec.Command(bin, append(args, "-h")...).CombinedOutput()
	return string(out)
}

func flagsOf(usage string) map[string]bool {
	flags := map[string]bool{"h": true, "help": true}
	for _, m := range usageFlag.FindAllStringSubmatch(usage, -1) {
		flags[m[1]] = true
	}
	return flags
}

// subcommandsOf reads the "commands:" section of weighstation's usage.
func subcommandsOf(usage string) map[string]bool {
	subs := map[string]bool{}
	in := false
	for _, l := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "commands:"):
			in = true
		case in && strings.TrimSpace(l) == "":
			if len(subs) > 0 {
				in = false
			}
		case in:
			if f := strings.Fields(l); len(f) > 0 {
				subs[f[0]] = true
			}
		}
	}
	return subs
}

func sortedKeys(m map[string]bool) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// placeholder is a word a reader substitutes: <name>, ..., FILE.
func placeholder(w string) bool {
	return strings.ContainsAny(w, "<>…") || strings.Contains(w, "...") || w == strings.ToUpper(w) && strings.ToLower(w) != w
}

// flagName is the flag a word names: -name, --name, -name=value.
func flagName(w string) (string, bool) {
	if !strings.HasPrefix(w, "-") || w == "-" || w == "--" || strings.HasPrefix(w, "-$") {
		return "", false
	}
	name := strings.TrimLeft(w, "-")
	name, _, _ = strings.Cut(name, "=")
	name = strings.TrimRight(name, ",.;:)")
	if name == "" || !targetWord.MatchString(name) {
		return "", false
	}
	return name, true
}

func TestSubcommandsAndFlagsExist(t *testing.T) {
	cmds, _ := allCommands(t)
	var uses []command
	for _, c := range cmds {
		if p := program(c.args[0]); p == "weighstation" || p == "weighstation-sidecar" {
			uses = append(uses, c)
		}
	}
	if len(uses) == 0 {
		t.Fatal("found no weighstation command in the documents: the parser is broken")
	}
	bins := build(t)
	main := filepath.Join(bins.dir, "weighstation")
	subs := subcommandsOf(help(main))
	if !subs["sidecar"] {
		t.Fatalf("weighstation -h lists no sidecar subcommand; its usage:\n%s", help(main))
	}
	subFlags := map[string]map[string]bool{}
	var sidecarFlags map[string]bool
	if bins.hasSidecar {
		sidecarFlags = flagsOf(help(filepath.Join(bins.dir, "weighstation-sidecar")))
	}
	checkFlags := func(c command, what string, flags map[string]bool, words []string) {
		for _, w := range words {
			name, ok := flagName(w)
			if !ok {
				continue
			}
			if !flags[name] {
				t.Errorf("%s: `%s`: %s has no flag -%s (its flags: %s)", c.where(), c.text, what, name, sortedKeys(flags))
			}
		}
	}
	for _, c := range uses {
		if program(c.args[0]) == "weighstation-sidecar" {
			if !bins.hasSidecar {
				t.Errorf("%s: `%s`: the README names the binary weighstation-sidecar, but this tree has no ./cmd/weighstation-sidecar (it lands with the binaries branch)", c.where(), c.text)
				continue
			}
			checkFlags(c, "weighstation-sidecar", sidecarFlags, c.args[1:])
			continue
		}
		if len(c.args) < 2 {
			continue // the binary named alone
		}
		sub := c.args[1]
		if strings.HasPrefix(sub, "-") {
			checkFlags(c, "weighstation", map[string]bool{"h": true, "help": true}, c.args[1:2])
			continue
		}
		if placeholder(sub) {
			continue
		}
		sub = strings.TrimRight(sub, ",.;:")
		if !subs[sub] {
			t.Errorf("%s: `%s`: weighstation has no subcommand %q (weighstation -h lists: %s)", c.where(), c.text, sub, sortedKeys(subs))
			continue
		}
		flags, ok := subFlags[sub]
		if !ok {
			flags = flagsOf(help(main, sub))
			subFlags[sub] = flags
		}
		checkFlags(c, "weighstation "+sub, flags, c.args[2:])
	}
}

// --- helm values ---

func chartValues(t *testing.T) map[string]any {
	t.Helper()
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, "charts/weighstation/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	return values
}

// hasValue walks a dotted path through the chart's values.
func hasValue(values map[string]any, path string) bool {
	var cur any = values
	for _, key := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[key]; !ok {
			return false
		}
	}
	return true
}

// valueRef is an inline chart value: a dotted lowercase-led path, with an
// optional =value.
var valueRef = regexp.MustCompile(`^([a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)+)(=\S*)?$`)

func TestHelmValuesExist(t *testing.T) {
	values := chartValues(t)
	cmds, _ := allCommands(t)
	checked := 0
	check := func(c command, key string) {
		checked++
		if !hasValue(values, key) {
			t.Errorf("%s: `%s`: charts/weighstation/values.yaml has no value %s", c.where(), c.text, key)
		}
	}
	for _, c := range cmds {
		if program(c.args[0]) == "helm" {
			for i, w := range c.args {
				var assign string
				switch {
				case (w == "--set" || w == "--set-string") && i+1 < len(c.args):
					assign = c.args[i+1]
				case strings.HasPrefix(w, "--set=") || strings.HasPrefix(w, "--set-string="):
					_, assign, _ = strings.Cut(w, "=")
				default:
					continue
				}
				for _, kv := range strings.Split(assign, ",") {
					key, _, _ := strings.Cut(kv, "=")
					if key != "" && !placeholder(key) {
						check(c, key)
					}
				}
			}
			continue
		}
		// An inline span that is a value path of the chart's top-level
		// keys (operator.goMemLimit, broker.enabled=false).
		if c.code || len(c.args) != 1 {
			continue
		}
		m := valueRef.FindStringSubmatch(c.args[0])
		if m == nil {
			continue
		}
		top, _, _ := strings.Cut(m[1], ".")
		if _, ok := values[top]; ok {
			check(c, m[1])
		}
	}
	if checked == 0 {
		t.Fatal("found no chart value in the documents: the parser is broken")
	}
}

// --- kubectl resources ---

// crdNames are the names kubectl accepts for our resources, from the CRDs.
func crdNames(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	names := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Plural     string   `json:"plural"`
					Singular   string   `json:"singular"`
					Kind       string   `json:"kind"`
					ShortNames []string `json:"shortNames"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(err)
		}
		n := crd.Spec.Names
		for _, name := range append([]string{n.Plural, n.Singular, strings.ToLower(n.Kind)}, n.ShortNames...) {
			names[name] = true
			names[name+"."+crd.Spec.Group] = true
		}
	}
	return names
}

var kubectlVerbs = map[string]bool{"get": true, "describe": true, "explain": true, "patch": true, "edit": true, "delete": true, "apply": false}

// ours says whether a kubectl resource word is meant to be one of ours.
func ours(resource string) bool {
	return strings.HasPrefix(resource, "w") || strings.Contains(resource, "topic") || strings.Contains(resource, "subscription")
}

func TestKubectlResourcesExist(t *testing.T) {
	names := crdNames(t)
	cmds, _ := allCommands(t)
	for _, c := range cmds {
		if program(c.args[0]) != "kubectl" {
			continue
		}
		for i := 1; i < len(c.args); i++ {
			w := c.args[i]
			if w == "-n" || w == "--namespace" || w == "-l" || w == "-o" {
				i++
				continue
			}
			if strings.HasPrefix(w, "-") {
				continue
			}
			if !kubectlVerbs[w] || i+1 >= len(c.args) {
				break
			}
			j := i + 1
			for j < len(c.args) && strings.HasPrefix(c.args[j], "-") {
				j++
			}
			if j >= len(c.args) {
				break
			}
			for _, r := range strings.Split(c.args[j], ",") {
				r, _, _ = strings.Cut(r, "/")
				if w == "explain" {
					r, _, _ = strings.Cut(r, ".")
				}
				if r == "" || placeholder(r) || !ours(r) {
					continue
				}
				if !names[r] {
					t.Errorf("%s: `%s`: kubectl knows no resource %q of ours (the CRDs name: %s)", c.where(), c.text, r, sortedKeys(names))
				}
			}
			break
		}
	}
}

// --- links ---

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// anchor is GitHub's anchor of a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && !strings.ContainsRune("—–…×→←▲▼│·’", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(prose []string) map[string]bool {
	out := map[string]bool{}
	for _, l := range prose {
		if strings.HasPrefix(l, "#") {
			out[anchor(strings.TrimLeft(l, "#"))] = true
		}
	}
	return out
}

func TestRelativeLinksExist(t *testing.T) {
	_, prose := allCommands(t)
	files := documents(t)
	links := 0
	for _, f := range files {
		for i, l := range prose[f] {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				doc := f
				if path != "" {
					rel := filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
					if _, err := os.Stat(filepath.Join(repoRoot, rel)); err != nil {
						t.Errorf("%s:%d: the link %s points at %s, which does not exist", f, i+1, target, rel)
						continue
					}
					doc = rel
				}
				if frag == "" || !strings.HasSuffix(doc, ".md") {
					continue
				}
				p, ok := prose[doc]
				if !ok {
					_, p = parse(doc, read(t, doc))
				}
				if !anchors(p)[frag] {
					t.Errorf("%s:%d: the link %s: %s has no heading with anchor #%s", f, i+1, target, doc, frag)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("found no relative link: the parser is broken")
	}
}

// TestCIRunsTheREADMEsTestCommand: .ci/run runs `make test`, the
// README's test command, and nothing else.
func TestCIRunsTheREADMEsTestCommand(t *testing.T) {
	var run []string
	for _, l := range strings.Split(read(t, ".ci/run"), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "set ") || strings.HasPrefix(l, "cd ") {
			continue
		}
		run = append(run, l)
	}
	if !slices.Equal(run, []string{"make test"}) {
		t.Errorf(".ci/run runs %q, want exactly make test", run)
	}
	if !strings.Contains(read(t, "README.md"), "make test") {
		t.Error("README.md does not name make test")
	}
}
