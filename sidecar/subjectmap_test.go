package sidecar

import (
	"strings"
	"testing"
)

// TestSubjectMapCopiesWhatItKeeps: subjects given as views of a buffer
// that is then overwritten are found afterwards by their old bytes, short
// (kept by value) and long (kept as copied strings) alike, at the edge of
// maxKeyedSubject.
func TestSubjectMapCopiesWhatItKeeps(t *testing.T) {
	for _, size := range []int{1, 38, maxKeyedSubject, maxKeyedSubject + 1, 300} {
		var m subjectMap[int]
		buf := []byte(strings.Repeat("a", size))
		m.set(bytesView(buf), 1)
		for i := range buf {
			buf[i] = 'b' // the buffer is reused for another subject
		}
		m.set(bytesView(buf), 2)
		if v, ok := m.get(strings.Repeat("a", size)); !ok || v != 1 {
			t.Fatalf("%d bytes: the first subject gives %d, %v after its buffer was reused; want 1", size, v, ok)
		}
		if v, ok := m.get(strings.Repeat("b", size)); !ok || v != 2 {
			t.Fatalf("%d bytes: the second subject gives %d, %v; want 2", size, v, ok)
		}
		if _, ok := m.get(strings.Repeat("a", size) + "x"); ok {
			t.Fatalf("%d bytes: a longer subject found", size)
		}
		if m.len() != 2 {
			t.Fatalf("%d bytes: len %d, want 2", size, m.len())
		}
		m.retain(func(v int) (int, bool) { return v * 10, v == 2 })
		if _, ok := m.get(strings.Repeat("a", size)); ok || m.len() != 1 {
			t.Fatalf("%d bytes: retain kept the dropped entry (len %d)", size, m.len())
		}
		if v, _ := m.get(strings.Repeat("b", size)); v != 20 {
			t.Fatalf("%d bytes: retain's new value %d, want 20", size, v)
		}
		if v, ok := m.take(strings.Repeat("b", size)); !ok || v != 20 {
			t.Fatalf("%d bytes: take gave %d, %v, want 20", size, v, ok)
		}
		if m.len() != 0 {
			t.Fatalf("%d bytes: len %d after take, want 0", size, m.len())
		}
		if _, ok := m.take(strings.Repeat("b", size)); ok {
			t.Fatalf("%d bytes: a second take found the entry", size)
		}
	}
}

// TestSubjectKeysDoNotCollide: the length is part of a short key, so a
// subject and the same bytes with NULs after them differ.
func TestSubjectKeysDoNotCollide(t *testing.T) {
	var m subjectMap[int]
	m.set("ab", 1)
	if _, ok := m.get("ab\x00"); ok {
		t.Fatal(`"ab\x00" found as "ab"`)
	}
	if _, ok := m.get("a"); ok {
		t.Fatal(`"a" found as "ab"`)
	}
}
