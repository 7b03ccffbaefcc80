package sidecar

// interned remembers the strings of subjects seen recently, so that a
// subject published or delivered again costs no allocation: most traffic
// repeats a few subjects. It is bounded: when full it starts over. Not safe
// for concurrent use; each reader goroutine has its own.
type interned struct {
	strings map[string]string
	max     int
}

// maxInterned bounds one reader's remembered subjects (about 100 KiB for
// subjects of 40 bytes).
const maxInterned = 1024

func newInterned() *interned {
	return &interned{strings: make(map[string]string), max: maxInterned}
}

// of returns b as a string, allocating only when b was not seen since the
// table last started over.
func (in *interned) of(b []byte) string {
	if s, ok := in.strings[string(b)]; ok { // no allocation: the compiler looks up without converting
		return s
	}
	if len(in.strings) >= in.max {
		clear(in.strings)
	}
	s := string(b)
	in.strings[s] = s
	return s
}
