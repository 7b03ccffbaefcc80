//go:build !race

package matcher_test

const raceEnabled = false
