package natstest

import (
	"testing"

	"github.com/weighstation/weighstation/sidecar/upstream"
)

// DialUpstream makes a sidecar's broker connection to url with the
// defaults, changed by configure, and closes it when the test ends.
func DialUpstream(t testing.TB, url string, configure ...func(*upstream.Options)) *upstream.Client {
	t.Helper()
	opts := upstream.DefaultOptions
	opts.URL = url
	for _, f := range configure {
		f(&opts)
	}
	up, err := upstream.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	return up
}
