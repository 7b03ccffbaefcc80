package image_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY...
	args string
	line int
}

// stage is a FROM and the instructions after it.
type stage struct {
	from, name   string
	instructions []instruction
}

// parseDockerfile splits a Dockerfile into stages; comments (parser
// directives included) are dropped, also between continuation lines, as
// the engines drop them.
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	var pending strings.Builder
	start := 0
	for n, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if pending.Len() == 0 {
			start = n + 1
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			pending.WriteString(strings.TrimSpace(cont) + " ")
			continue
		}
		pending.WriteString(trimmed)
		cmd, args, _ := strings.Cut(pending.String(), " ")
		pending.Reset()
		ins := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if ins.cmd == "FROM" {
			words := strings.Fields(ins.args)
			words = slices.DeleteFunc(words, func(w string) bool { return strings.HasPrefix(w, "--") })
			s := stage{}
			switch {
			case len(words) == 1:
				s.from = words[0]
			case len(words) == 3 && strings.EqualFold(words[1], "AS"):
				s.from, s.name = words[0], words[2]
			default:
				return nil, fmt.Errorf("line %d: FROM %s: want an image and optionally AS name", start, ins.args)
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if ins.cmd == "ARG" { // an ARG before the first FROM
				continue
			}
			return nil, fmt.Errorf("line %d: %s before the first FROM", start, ins.cmd)
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, ins)
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("line %d: a continuation at the end of the file", start)
	}
	return stages, nil
}

// find is the index of the first instruction cmd whose args match re,
// or -1.
func (s stage) find(cmd string, re *regexp.Regexp) int {
	return slices.IndexFunc(s.instructions, func(i instruction) bool { return i.cmd == cmd && re.MatchString(i.args) })
}

// shellWords splits a LABEL's or a RUN's arguments as the shell would,
// double quotes only.
func shellWords(s string) []string {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
			}
			inWord = false
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

func readDockerfile(t *testing.T) []stage {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(text))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a final one", len(stages))
	}
	return stages
}

// makeBinaries is what the build stage must run: the target TestBinaries
// runs and checks, nothing else (a `go build` of its own would escape the
// checks), with VERSION from the build argument.
var makeBinaries = regexp.MustCompile(`^make binaries( (VERSION=(\$VERSION|\$\{VERSION\})|BIN_DIR=(\S+)))+$`)

// TestDockerfileBuildStage: the stage the final one copies from downloads
// the modules in a layer of their own, before the sources, and builds with
// `make binaries` alone, stamping VERSION.
func TestDockerfileBuildStage(t *testing.T) {
	stages := readDockerfile(t)
	final := stages[len(stages)-1]
	from, binDir := copiedBinaries(t, final)
	i := slices.IndexFunc(stages, func(s stage) bool { return s.name == from })
	if i < 0 || i == len(stages)-1 {
		t.Fatalf("the final stage copies from %q, which is no earlier stage", from)
	}
	build := stages[i]
	if !strings.HasPrefix(build.from, "golang:") {
		t.Errorf("the build stage is FROM %s, want golang:<version>", build.from)
	}
	var makes []instruction
	for _, ins := range build.instructions {
		if ins.cmd == "RUN" && strings.Contains(ins.args, "make") || ins.cmd == "RUN" && strings.Contains(ins.args, "go build") {
			makes = append(makes, ins)
		}
	}
	if len(makes) != 1 {
		t.Fatalf("the build stage builds in %d RUNs, want one, `make binaries`: %+v", len(makes), makes)
	}
	m := makeBinaries.FindStringSubmatch(makes[0].args)
	if m == nil || !strings.Contains(makes[0].args, "VERSION=") {
		t.Fatalf("line %d: RUN %s; want exactly `make binaries VERSION=$VERSION [BIN_DIR=dir]` (TestBinaries runs that target)", makes[0].line, makes[0].args)
	}
	run := slices.Index(build.instructions, makes[0])
	wantDir, workdir := "bin", "/"
	if dirs := regexp.MustCompile(`BIN_DIR=(\S+)`).FindStringSubmatch(makes[0].args); dirs != nil {
		wantDir = dirs[1]
	}
	for _, ins := range build.instructions[:run] {
		if ins.cmd == "WORKDIR" {
			workdir = filepath.Join(workdir, ins.args)
		}
	}
	if !filepath.IsAbs(wantDir) {
		wantDir = filepath.Join(workdir, wantDir)
	}
	if filepath.Clean(binDir) != filepath.Clean(wantDir) {
		t.Errorf("the final stage copies the binaries from %s, but make binaries writes them to %s", binDir, wantDir)
	}
	arg := build.find("ARG", regexp.MustCompile(`^VERSION(=|$)`))
	if arg < 0 || arg > run {
		t.Errorf("the build stage has no ARG VERSION before its RUN make: VERSION would be empty")
	}
	modules := build.find("COPY", regexp.MustCompile(`^go\.mod go\.sum \S+$`))
	download := build.find("RUN", regexp.MustCompile(`^go mod download$`))
	sources := build.find("COPY", regexp.MustCompile(`^\. \S+$`))
	if modules < 0 || download < 0 || sources < 0 || !(modules < download && download < sources && sources < run) {
		t.Errorf("the build stage must COPY go.mod go.sum, RUN go mod download, COPY . (the sources), then RUN make, in that order: at %d, %d, %d, %d", modules, download, sources, run)
	}
}

// copiedBinaries is the stage the final one copies both binaries from,
// and the directory they are in there.
func copiedBinaries(t *testing.T, final stage) (from, dir string) {
	t.Helper()
	for _, ins := range final.instructions {
		words := strings.Fields(ins.args)
		if ins.cmd != "COPY" || len(words) < 3 || !strings.HasPrefix(words[0], "--from=") {
			continue
		}
		srcs, dest := words[1:len(words)-1], words[len(words)-1]
		var names []string
		for _, src := range srcs {
			names = append(names, filepath.Base(src))
			dir = filepath.Dir(src)
		}
		slices.Sort(names)
		if slices.Equal(names, []string{"weighstation", "weighstation-sidecar"}) {
			if dest != "/" {
				t.Errorf("the binaries go to %s, want / (the chart runs /weighstation, the sidecar injection /weighstation-sidecar)", dest)
			}
			return strings.TrimPrefix(words[0], "--from="), dir
		}
	}
	t.Fatal("the final stage has no COPY --from=<build stage> of weighstation and weighstation-sidecar")
	return "", ""
}

// TestDockerfileFinalStage: the image is a minimal base with no shell or
// package manager, runs as a numeric non-root user (the kubelet checks
// runAsNonRoot against the image's numeric USER), starts /weighstation,
// and carries the OCI labels.
func TestDockerfileFinalStage(t *testing.T) {
	stages := readDockerfile(t)
	final := stages[len(stages)-1]
	if final.from != "scratch" && !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("the final stage is FROM %s, want gcr.io/distroless/static... or scratch", final.from)
	}
	var user string
	for _, ins := range final.instructions {
		if ins.cmd == "USER" {
			user = ins.args
		}
	}
	for i, id := range strings.Split(user, ":") {
		n, err := strconv.Atoi(id)
		if err != nil || n == 0 || i > 1 {
			t.Errorf("the final stage's USER is %q, want numeric non-root uid[:gid], e.g. 65532:65532", user)
			break
		}
	}
	if e := final.find("ENTRYPOINT", regexp.MustCompile(`^\["/weighstation"\]$`)); e < 0 {
		t.Error(`the final stage has no ENTRYPOINT ["/weighstation"]: the chart gives the subcommand (operator, broker) as args`)
	}
	labels := map[string]string{}
	for _, ins := range final.instructions {
		if ins.cmd != "LABEL" {
			continue
		}
		for _, kv := range shellWords(ins.args) {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = v
		}
	}
	for _, key := range []string{"title", "description", "source", "version", "revision"} {
		if labels["org.opencontainers.image."+key] == "" {
			t.Errorf("no label org.opencontainers.image.%s (labels: %v)", key, labels)
		}
	}
	if v := labels["org.opencontainers.image.version"]; v != "$VERSION" && v != "${VERSION}" {
		t.Errorf("org.opencontainers.image.version=%q, want the build argument $VERSION", v)
	}
	if final.find("ARG", regexp.MustCompile(`^VERSION(=|$)`)) < 0 {
		t.Error("the final stage has no ARG VERSION: its version label would be empty")
	}
}

func TestParseDockerfile(t *testing.T) {
	stages, err := parseDockerfile(`# syntax=docker/dockerfile:1
ARG GO=1.26
FROM --platform=$BUILDPLATFORM golang:$GO AS build
RUN a \
    # a comment inside a continuation
    b
FROM scratch
LABEL a="x y" \
      b=z
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].from != "golang:$GO" || stages[0].name != "build" || stages[1].from != "scratch" {
		t.Fatalf("stages %+v", stages)
	}
	if got := stages[0].instructions; len(got) != 1 || got[0].args != "a b" || got[0].line != 4 {
		t.Errorf("the RUN is %+v, want `a b` at line 4", got)
	}
	if got := shellWords(stages[1].instructions[0].args); !slices.Equal(got, []string{"a=x y", "b=z"}) {
		t.Errorf("LABEL words %q", got)
	}
	if _, err := parseDockerfile("RUN x\n"); err == nil {
		t.Error("a RUN before FROM was accepted")
	}
}
