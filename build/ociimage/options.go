package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// options is what the flags ask for, checked.
type options struct {
	out        string
	tag        name.Tag
	files      []fileSpec // sorted by destination
	passwd     bool
	user       string
	entrypoint []string
	labels     map[string]string
	env        []string
	workdir    string
	arch       string
	// mtime is every file's and directory's time, and the image's
	// creation time.
	mtime time.Time
}

// parseFlags reads and checks the flags; its errors name the flag.
// SOURCE_DATE_EPOCH, when set, is the time of every entry.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tags       listFlag
		files      listFlag
		entrypoint listFlag
		labels     listFlag
		env        listFlag
	)
	out := fs.String("out", "", "the image tarball to write (required)")
	fs.Var(&tags, "tag", "the image's reference, with registry and tag (required, once): the name the node's runtime gives the image on import")
	fs.Var(&files, "file", "SRC:DEST[:MODE]: put the regular file SRC at the absolute path DEST, with the octal MODE "+
		"(default 0755 if SRC is executable, else 0644); repeatable")
	passwd := fs.Bool("passwd", false, "add /etc/passwd with root, nobody and nonroot (65532:65532), as distroless has")
	user := fs.String("user", "", "UID or UID:GID the container runs as, numeric (the kubelet checks runAsNonRoot against it)")
	fs.Var(&entrypoint, "entrypoint", "the entrypoint: a comma-separated list, or repeated, one argument each")
	fs.Var(&labels, "label", "KEY=VALUE: an image label; repeatable")
	fs.Var(&env, "env", "KEY=VALUE: an environment variable of the container; repeatable")
	workdir := fs.String("workdir", "", "the working directory, absolute (default: the runtime's, /)")
	arch := fs.String("arch", runtime.GOARCH, "the image's architecture (GOARCH); the OS is linux")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q: every input is a flag (-file SRC:DEST)", fs.Args())
	}
	opts := options{out: *out, passwd: *passwd, user: *user, workdir: *workdir, arch: *arch}
	var err error
	if opts.out == "" {
		return options{}, errors.New("-out: missing: name the image tarball to write")
	}
	if opts.tag, err = parseTag(tags); err != nil {
		return options{}, err
	}
	if opts.files, err = parseFileSpecs(files, opts.passwd); err != nil {
		return options{}, err
	}
	if len(opts.files) == 0 && !opts.passwd {
		return options{}, errors.New("-file: missing: an image of no file runs nothing")
	}
	if err := checkUser(opts.user); err != nil {
		return options{}, err
	}
	for _, list := range entrypoint {
		opts.entrypoint = append(opts.entrypoint, strings.Split(list, ",")...)
	}
	for _, arg := range opts.entrypoint {
		if arg == "" {
			return options{}, fmt.Errorf("-entrypoint %q: an empty argument", strings.Join(entrypoint, ","))
		}
	}
	if opts.labels, err = parseKeyValues("label", labels); err != nil {
		return options{}, err
	}
	// The environment keeps the order given; parseKeyValues checks it.
	if _, err := parseKeyValues("env", env); err != nil {
		return options{}, err
	}
	opts.env = env
	if opts.workdir != "" && !path.IsAbs(opts.workdir) {
		return options{}, fmt.Errorf("-workdir %q: not an absolute path", opts.workdir)
	}
	if opts.arch == "" {
		return options{}, errors.New("-arch: empty: give a GOARCH (amd64, arm64...)")
	}
	if opts.mtime, err = sourceDateEpoch(); err != nil {
		return options{}, err
	}
	return opts, nil
}

// listFlag is a repeatable flag's values, in order.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// parseTag is the one -tag, a full reference: the registry and the tag
// spelled out, since the kubelet looks the image up by the name it is
// imported under (no docker.io, no :latest added).
func parseTag(tags []string) (name.Tag, error) {
	switch len(tags) {
	case 0:
		return name.Tag{}, errors.New("-tag: missing: give the image's reference, e.g. ghcr.io/weighstation/weighstation:v1.2.3")
	case 1:
	default:
		// tarball.Write orders several tags of one image at random: one
		// keeps the tarball reproducible.
		return name.Tag{}, fmt.Errorf("-tag given %d times (%s): give one; `ctr images tag` adds more on the node", len(tags), strings.Join(tags, ", "))
	}
	tag, err := name.NewTag(tags[0], name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("-tag %q: %v: want registry/repository:tag, e.g. ghcr.io/weighstation/weighstation:v1.2.3", tags[0], err)
	}
	return tag, nil
}

// checkUser accepts an empty user (the runtime's default, root), UID or
// UID:GID, numeric.
func checkUser(user string) error {
	if user == "" {
		return nil
	}
	ids := strings.Split(user, ":")
	ok := len(ids) <= 2
	for _, id := range ids {
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("-user %q: want a numeric UID or UID:GID (e.g. 65532:65532), which the kubelet can check against runAsNonRoot", user)
	}
	return nil
}

// parseKeyValues reads the KEY=VALUE values of the flag name into a map;
// an empty key or a key given twice is an error.
func parseKeyValues(flagName string, kvs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-%s %q: want KEY=VALUE", flagName, kv)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("-%s: %s given twice", flagName, k)
		}
		m[k] = v
	}
	return m, nil
}

// sourceDateEpoch is the time of every entry: $SOURCE_DATE_EPOCH (seconds
// since 1970, the reproducible-builds convention), else 1970-01-01.
func sourceDateEpoch() (time.Time, error) {
	s := strings.TrimSpace(os.Getenv("SOURCE_DATE_EPOCH"))
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}
