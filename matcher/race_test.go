//go:build race

package matcher_test

// raceEnabled: the race detector makes every memory access dearer, so the
// longest tests run fewer operations under it (norace_test.go).
const raceEnabled = true
