package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// fileSpec is one -file: a regular file of this machine and where the
// image has it.
type fileSpec struct {
	src  string
	dest string // absolute, clean
	mode fs.FileMode
}

// parseFileSpecs reads the -file values, SRC:DEST[:MODE], and sorts them
// by destination. A source must be a regular file; a destination must be
// absolute, under / and given once (passwd: /etc/passwd is -passwd's).
func parseFileSpecs(values []string, passwd bool) ([]fileSpec, error) {
	var specs []fileSpec
	seen := map[string]bool{}
	if passwd {
		seen[passwdPath] = true
	}
	for _, v := range values {
		spec, err := parseFileSpec(v)
		if err != nil {
			return nil, fmt.Errorf("-file %q: %w", v, err)
		}
		if seen[spec.dest] {
			if passwd && spec.dest == passwdPath {
				return nil, fmt.Errorf("-file %q: -passwd writes %s already", v, passwdPath)
			}
			return nil, fmt.Errorf("-file %q: %s is the destination of another -file", v, spec.dest)
		}
		seen[spec.dest] = true
		specs = append(specs, spec)
	}
	for dest := range seen { // a file where another needs a directory
		for dir := path.Dir(dest); dir != "/"; dir = path.Dir(dir) {
			if seen[dir] {
				return nil, fmt.Errorf("-file: %s is a file, and %s needs it to be a directory", dir, dest)
			}
		}
	}
	slices.SortFunc(specs, func(a, b fileSpec) int { return strings.Compare(a.dest, b.dest) })
	return specs, nil
}

func parseFileSpec(v string) (fileSpec, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return fileSpec{}, fmt.Errorf("want SRC:DEST or SRC:DEST:MODE (paths without colons)")
	}
	spec := fileSpec{src: parts[0], dest: parts[1]}
	if !path.IsAbs(spec.dest) {
		return fileSpec{}, fmt.Errorf("destination %s: not an absolute path (e.g. /%s)", spec.dest, strings.TrimPrefix(spec.dest, "./"))
	}
	spec.dest = path.Clean(spec.dest)
	if spec.dest == "/" {
		return fileSpec{}, fmt.Errorf("destination /: the root is a directory; name the file")
	}
	info, err := os.Stat(spec.src)
	if err != nil {
		return fileSpec{}, fmt.Errorf("source: %w", err)
	}
	if !info.Mode().IsRegular() {
		return fileSpec{}, fmt.Errorf("source %s: not a regular file (%s)", spec.src, info.Mode().Type())
	}
	spec.mode = 0o644
	if info.Mode().Perm()&0o111 != 0 {
		spec.mode = 0o755
	}
	if len(parts) == 3 {
		mode, err := strconv.ParseUint(parts[2], 8, 32)
		if err != nil || mode > 0o777 {
			return fileSpec{}, fmt.Errorf("mode %q: want octal permissions up to 0777, e.g. 0755", parts[2])
		}
		spec.mode = fs.FileMode(mode)
	}
	return spec, nil
}
