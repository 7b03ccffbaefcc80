#!/usr/bin/env bash
# Clone detection for `make test`: no copied block of six or more lines
# outside test tables and generated code.
#
# The detector is dupl (github.com/mibk/dupl), pinned in tools/go.mod and
# built here into bin/dupl-<version> when that binary is missing. dupl
# serializes each file's syntax tree and finds repeated sequences of
# complete syntax units (declarations, statements) with a suffix tree; it
# compares node kinds only, so a copy whose identifiers and literals were
# renamed still matches. Its threshold counts AST nodes, not lines, and each
# unit of a reported run must be at least that big on its own. This script
# runs it at CLONES_THRESHOLD nodes and then keeps only clone groups whose
# every copy spans at least CLONES_MIN_LINES lines of code (blank lines and
# comment-only lines not counted).
#
# Not counted (listed with CLONES_VERBOSE=1):
#   - generated code: files whose header says "Code generated ... DO NOT
#     EDIT.", *.pb.go, zz_generated*, and anything under vendor/ or
#     testdata/; these files are never given to dupl;
#   - test tables: groups whose copies are all in _test.go files and each
#     start a slice or map literal ("tests := []struct {", "for _, tc :=
#     range []struct {", "cases := map[string]struct {") or are rows of one
#     (a line beginning with "{");
#   - declaration shapes: groups whose copies each start a type, const or
#     var declaration (or a struct-typed field) and are not the same text:
#     dupl ignores names, types' names, tags and values, so any two structs
#     with the same number of fields match. A declaration copied verbatim
#     is still reported.
#
# Exit status: 0 with no findings, 1 with findings, 2 when the detector
# could not run. Every finding is printed, biggest first, as
#   clone: <lines> lines, <n> copies [product|hack|tests]
#     file:start-end
#     ...
# where the category is product if any copy is outside hack/, demo/,
# build/, test/ and _test.go files, else hack if any copy is under hack/,
# demo/ or build/ (programs a developer runs), else tests.
#
# Known clones: hack/clones-known.txt lists the groups found when the
# check came in that are still to be removed, one per line, as their
# copies' files (sorted, space-separated; a file copied within itself
# appears once per copy). A group whose files match a line is reported as
# known and does not fail; a line that matches no group any more fails, so
# the list only shrinks: delete the line when its copies are gone. A new
# copy in a file pair that is not listed fails.
#
# Knobs (environment): CLONES_THRESHOLD (nodes, default 15),
# CLONES_MIN_LINES (default 6), CLONES_VERBOSE=1, CLONES_KNOWN (default
# hack/clones-known.txt; empty: none), GO (default go).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
threshold=${CLONES_THRESHOLD:-15}
min_lines=${CLONES_MIN_LINES:-6}
verbose=${CLONES_VERBOSE:-0}
known=${CLONES_KNOWN-hack/clones-known.txt}

version=$(awk '$1 == "github.com/mibk/dupl" { print $2 }' tools/go.mod)
if [ -z "$version" ]; then
	echo "clones: github.com/mibk/dupl is not pinned in tools/go.mod" >&2
	exit 2
fi
dupl=$PWD/bin/dupl-$version
if [ ! -x "$dupl" ]; then
	echo "clones: building $dupl from tools/go.mod" >&2
	mkdir -p bin
	# -mod=readonly: fail rather than change tools/go.mod.
	(cd tools && "$GO" build -mod=readonly -o "$dupl.tmp.$$" github.com/mibk/dupl) || exit 2
	mv "$dupl.tmp.$$" "$dupl"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The Go files to look at: tracked and untracked-but-not-ignored ones in a
# git work tree, else every .go file outside bin/ and .git/.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard -- '*.go'
else
	find . \( -path ./bin -o -path ./.git \) -prune -o -name '*.go' -type f -print0 |
		sed -z 's|^\./||'
fi | sort -zu | while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue # deleted from the work tree but still tracked
	case "/$f" in
	*/vendor/* | */testdata/* | *.pb.go | */zz_generated*) continue ;;
	esac
	printf '%s\0' "$f"
done | xargs -0 -r awk '
	# Go convention (go help generate): a line "// Code generated ... DO
	# NOT EDIT." before the package clause marks a generated file.
	/^\/\/ Code generated .* DO NOT EDIT\.$/ { nextfile }
	/^package[ \t]/ { print FILENAME; nextfile }
' >"$tmp/files"

# dupl logs a file it cannot parse and goes on without it: fail instead.
if ! "$dupl" -files -t "$threshold" <"$tmp/files" >"$tmp/dupl" 2>"$tmp/err" || [ -s "$tmp/err" ]; then
	echo "clones: $dupl failed:" >&2
	cat "$tmp/err" >&2
	exit 2
fi

if [ -n "$known" ] && [ ! -f "$known" ]; then
	echo "clones: $known (CLONES_KNOWN) does not exist" >&2
	exit 2
fi
awk -v min_lines="$min_lines" -v verbose="$verbose" -v threshold="$threshold" -v knownfile="$known" \
	-v nfiles="$(wc -l <"$tmp/files")" '
function load(file,    i, line) {
	if (file in loaded) return
	i = 0
	while ((getline line < file) > 0) src[file, ++i] = line
	close(file)
	loaded[file] = 1
}
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
# A fragment: its lines of code; its first line of code, its normalized
# text, whether it declares a func, and how many lines of code follow the
# literal that its first line opens (after a table: a loop over it, say).
function fragment(file, from, to,    i, raw, line, n, indent, closed) {
	load(file)
	n = 0; first = ""; text = ""; hasfunc = 0; rest = 0; closed = 0
	if (from < 1) return 0 # dupl could not place it
	for (i = from; i <= to; i++) {
		raw = src[file, i]
		line = trim(raw)
		if (line == "" || line ~ /^\/\//) continue
		if (n++ == 0) {
			first = line
			indent = raw; sub(/[^ \t].*/, "", indent)
		} else if (closed) {
			if (line != "}") rest++
		} else if (substr(raw, 1, length(indent) + 1) == indent "}" && line !~ /^\}\{/) {
			closed = 1
		}
		if (line ~ /^func[ (]/) hasfunc = 1
		text = text line "\n"
	}
	return n
}
function category(file) {
	if (file ~ /_test\.go$/ || file ~ /^test\//) return "tests"
	if (file ~ /^(hack|demo|build)\//) return "hack"
	return "product"
}
function flush(    i, cat, c, kind, same, table, decl, rank) {
	if (nfrag == 0) return
	if (minlines >= min_lines) {
		same = 1; table = 1; decl = 1; cat = "tests"
		for (i = 1; i <= nfrag; i++) {
			if (ftext[i] != ftext[1]) same = 0
			# a row, or a table with fewer than min_lines lines after it
			if (ffile[i] !~ /_test\.go$/ || ffirst[i] !~ /^\{/ &&
			    (frest[i] >= min_lines || ffirst[i] !~ /(:=|=|range) *(\[[^]]*\]|map\[[^]]*\])[^ ]*( *struct)? *\{$/)) table = 0
			if (ffunc[i] || ffirst[i] !~ /^(type|const|var)[ (]/ && ffirst[i] !~ /^[A-Za-z_][A-Za-z0-9_]* +(\*|\[\])*struct *\{/) decl = 0
			c = category(ffile[i])
			if (c == "product" || c == "hack" && cat == "tests") cat = c
		}
		kind = table ? "test table" : decl && !same ? "declaration shape" : ""
		out = sprintf("%s lines, %d copies", minlines == maxlines ? minlines : minlines "-" maxlines, nfrag)
		for (i = 1; i <= nfrag; i++) out = out "\n  " fname[i]
		key = filesKey()
		if (kind != "") {
			exempt++
			if (verbose) print "not counted (" kind "): " out > "/dev/stderr"
		} else if (key in knownkeys) {
			knownfound++
			used[key] = 1
			if (verbose) print "known (" knownfile "): " out > "/dev/stderr"
		} else {
			found++
			count[cat]++
			rank = sprintf("%06d %06d", 999999 - minlines, found)
			report[rank] = "clone: " out
			sub(/copies/, "copies [" cat "]", report[rank])
		}
	}
	nfrag = 0; minlines = 1e9; maxlines = 0
}
# filesKey is the files of the group, sorted and space-separated: its
# line in the known list.
function filesKey(    i, j, v, k, sorted) {
	for (i = 1; i <= nfrag; i++) sorted[i] = ffile[i]
	for (i = 2; i <= nfrag; i++) { v = sorted[i]; for (j = i - 1; j > 0 && sorted[j] > v; j--) sorted[j + 1] = sorted[j]; sorted[j + 1] = v }
	k = sorted[1]
	for (i = 2; i <= nfrag; i++) k = k " " sorted[i]
	return k
}
BEGIN {
	minlines = 1e9
	if (knownfile != "") {
		while ((getline line < knownfile) > 0) {
			if (line ~ /^[ \t]*(#|$)/) continue
			knownkeys[line] = 1
		}
		close(knownfile)
	}
}
/^found [0-9]+ clones:$/ { flush(); next }
/^  / {
	split($1, a, ":"); split(a[2], b, ",")
	n = fragment(a[1], b[1] + 0, b[2] + 0)
	nfrag++
	ffile[nfrag] = a[1]; ffirst[nfrag] = first; ftext[nfrag] = text
	ffunc[nfrag] = hasfunc; frest[nfrag] = rest
	fname[nfrag] = a[1] ":" b[1] "-" b[2]
	if (n < minlines) minlines = n
	if (n > maxlines) maxlines = n
	next
}
END {
	flush()
	k = 0
	for (r in report) keys[++k] = r
	# insertion sort: a few hundred at most
	for (i = 2; i <= k; i++) { v = keys[i]; for (j = i - 1; j > 0 && keys[j] > v; j--) keys[j + 1] = keys[j]; keys[j + 1] = v }
	for (i = 1; i <= k; i++) print report[keys[i]]
	stale = 0
	for (key in knownkeys) if (!(key in used)) {
		stale++
		print "clones: " knownfile " lists a group that is gone (delete its line): " key
	}
	printf "clones: %d new clone groups of %d or more lines of code (product %d, hack %d, tests %d) in %d files (dupl -t %d); %d known (%s), %d stale known lines; %d test-table or declaration-shape groups not counted%s\n", \
		found, min_lines, count["product"], count["hack"], count["tests"], nfiles, threshold, knownfound + 0, knownfile, stale, exempt, \
		verbose ? "" : " (CLONES_VERBOSE=1 lists them)" > "/dev/stderr"
	exit (found > 0 || stale > 0 ? 1 : 0)
}' "$tmp/dupl"
