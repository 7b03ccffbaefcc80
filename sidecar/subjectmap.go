package sidecar

import (
	"strings"
	"unsafe"
)

// Tables keyed by a subject (the requests a connection is timing, the
// requests the application may answer) see a new reply inbox per request.
// A subjectMap keeps a subject of up to maxKeyedSubject bytes in its key by
// value, so that an entry costs no string: a request and its reply then
// allocate nothing. nats.go's reply inboxes are 38 bytes
// ("_INBOX.<22-character NUID>.<8-character token>"); longer subjects are
// kept as strings, one allocation each.
const maxKeyedSubject = 64

// entryBytes is what one entry of a subject of n bytes costs a
// subjectMap, about (the key, a value of up to 32 bytes, the map's own
// share), so that tables keyed by what clients send are bounded by bytes,
// not only by entries: subjects may be 1,024 bytes long.
func entryBytes(n int) int64 {
	if n <= maxKeyedSubject {
		return 128
	}
	return 64 + int64(n)
}

type subjectKey struct {
	n uint8
	b [maxKeyedSubject]byte
}

func keyOf(subject string) (subjectKey, bool) {
	var k subjectKey
	if len(subject) > maxKeyedSubject {
		return k, false
	}
	k.n = uint8(len(subject))
	copy(k.b[:], subject)
	return k, true
}

// subjectMap is a map from subjects to V. The subjects it is given may be
// views of reused buffers (bytesView): it copies what it keeps. Not safe
// for concurrent use.
type subjectMap[V any] struct {
	short map[subjectKey]V
	long  map[string]V
}

func (m *subjectMap[V]) get(subject string) (V, bool) {
	if k, ok := keyOf(subject); ok {
		v, found := m.short[k]
		return v, found
	}
	v, found := m.long[subject]
	return v, found
}

func (m *subjectMap[V]) set(subject string, v V) {
	if k, ok := keyOf(subject); ok {
		if m.short == nil {
			m.short = map[subjectKey]V{}
		}
		m.short[k] = v
		return
	}
	if m.long == nil {
		m.long = map[string]V{}
	}
	m.long[strings.Clone(subject)] = v
}

// take returns subject's value and removes it, with one key and one
// lookup.
func (m *subjectMap[V]) take(subject string) (V, bool) {
	if k, ok := keyOf(subject); ok {
		v, found := m.short[k]
		if found {
			delete(m.short, k)
		}
		return v, found
	}
	v, found := m.long[subject]
	if found {
		delete(m.long, subject)
	}
	return v, found
}

func (m *subjectMap[V]) len() int { return len(m.short) + len(m.long) }

// retain calls keep for every entry: it returns the entry's new value, or
// false to remove it. It returns the entryBytes of what it removed.
func (m *subjectMap[V]) retain(keep func(V) (V, bool)) (removed int64) {
	for k, v := range m.short {
		if nv, ok := keep(v); ok {
			m.short[k] = nv
		} else {
			delete(m.short, k)
			removed += entryBytes(int(k.n))
		}
	}
	for k, v := range m.long {
		if nv, ok := keep(v); ok {
			m.long[k] = nv
		} else {
			delete(m.long, k)
			removed += entryBytes(len(k))
		}
	}
	return removed
}

// bytesView is b as a string without a copy. The string is valid only
// while b's bytes are: whatever keeps it past that must copy it
// (strings.Clone), as subjectMap and the error coalescer do.
func bytesView(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
