package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var peer net.Conn
	select {
	case peer = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted within 5s")
	}
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { dialed.Close(); peer.Close() })
	return dialed.(*net.TCPConn), peer.(*net.TCPConn)
}

func TestReaderReadsWhatArrivesThenTheEnd(t *testing.T) {
	local, peer := tcpPair(t)
	r := NewReader(local)
	if runtime.GOOS == "linux" && !r.Raw() {
		t.Fatal("a TCP connection is not read with raw system calls on Linux")
	}
	// The first read waits for the bytes: the peer writes after the read
	// started or before; either way Read returns them.
	go func() { _, _ = peer.Write([]byte("PUB a 1\r\nx\r\n")) }()
	buf := make([]byte, 64)
	var got []byte
	for len(got) < len("PUB a 1\r\nx\r\n") {
		_ = local.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "PUB a 1\r\nx\r\n" {
		t.Fatalf("read %q", got)
	}
	if n, err := r.Read(buf[:0]); n != 0 || err != nil {
		t.Fatalf("an empty read: %d, %v", n, err)
	}
	peer.Close()
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v, want 0, io.EOF", n, err)
	}
}

func TestReaderHonoursTheDeadline(t *testing.T) {
	local, _ := tcpPair(t)
	r := NewReader(local)
	_ = local.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	start := time.Now()
	_, err := r.Read(make([]byte, 16))
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("a read past its deadline: %v, want a net.Error that is a timeout", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the read returned after %s, its deadline was 20ms", waited)
	}
}

func TestReaderReturnsWhenTheConnectionIsClosed(t *testing.T) {
	local, _ := tcpPair(t)
	r := NewReader(local)
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 16))
		done <- err
	}()
	local.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a read of a closed connection: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read of a closed connection did not return within 5s")
	}
}

// WriteNow writes a prefix of its buffers at once, raw up to RawWriteLimit
// and with syscall.Syscall beyond, at most maxBuffers of them, and returns
// 0 rather than waiting once the socket's send buffer is full.
func TestWriterWritesAPrefixWithoutBlocking(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no raw writes here")
	}
	tests := []struct {
		name       string
		sizes      []int
		maxBuffers int
	}{
		{"one small buffer, raw", []int{100}, 4},
		{"lines and payloads, raw", []int{20, 1024, 2, 20, 1024, 2}, 8},
		{"empty buffers skipped", []int{0, 10, 0, 10}, 2},
		{"more than RawWriteLimit, through syscall.Syscall", []int{RawWriteLimit, 1000, 30}, 4},
		{"more buffers than the writer takes", []int{10, 20, 30}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local, peer := tcpPair(t)
			w := NewWriter(local, tt.maxBuffers)
			var bufs net.Buffers
			var all []byte
			taken := 0
			for i, size := range tt.sizes {
				b := bytes.Repeat([]byte{byte('a' + i)}, size)
				bufs = append(bufs, b)
				if size > 0 && taken < tt.maxBuffers {
					taken++
					all = append(all, b...)
				}
			}
			n := w.WriteNow(bufs)
			if n <= 0 || n > len(all) {
				t.Fatalf("wrote %d bytes of %d that it may write", n, len(all))
			}
			got := make([]byte, n)
			_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(peer, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, all[:n]) {
				t.Fatal("the peer read other bytes than the first ones written")
			}
		})
	}

	t.Run("a full send buffer", func(t *testing.T) {
		local, peer := tcpPair(t)
		_ = local.SetWriteBuffer(16 << 10)
		_ = peer.SetReadBuffer(16 << 10)
		w := NewWriter(local, 1)
		chunk := [][]byte{make([]byte, 32<<10)}
		total := 0
		for range 10_000 {
			n := w.WriteNow(chunk)
			if n == 0 {
				if total == 0 {
					t.Fatal("nothing was written to an empty socket")
				}
				return // full: it returned rather than waiting
			}
			total += n
		}
		t.Fatalf("wrote %d bytes to a peer that reads nothing without filling its buffers", total)
	})
}

func TestConsume(t *testing.T) {
	tests := []struct {
		n    int
		want []string
	}{
		{0, []string{"ab", "", "cde"}},
		{1, []string{"b", "", "cde"}},
		{2, []string{"cde"}},
		{4, []string{"e"}},
		{5, nil},
	}
	for _, tt := range tests {
		bufs := net.Buffers{[]byte("ab"), []byte(""), []byte("cde")}
		orig := bufs
		Consume(&bufs, tt.n)
		var got []string
		for _, b := range bufs {
			got = append(got, string(b))
		}
		if len(got) != len(tt.want) {
			t.Errorf("Consume(%d): %q, want %q", tt.n, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("Consume(%d): %q, want %q", tt.n, got, tt.want)
			}
		}
		for i := 0; i < len(orig)-len(bufs); i++ {
			if orig[i] != nil {
				t.Errorf("Consume(%d) left buffer %d referenced", tt.n, i)
			}
		}
	}
}

// A raw read copies at most RawReadLimit, whatever the buffer's size; the
// rest is read by the next calls, every byte once.
func TestAReadCopiesAtMostRawReadLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no raw reads here")
	}
	local, peer := tcpPair(t)
	_ = local.SetReadBuffer(4 << 20)
	sent := bytes.Repeat([]byte("0123456789abcdef"), (4<<20)/16)
	go func() { _, _ = peer.Write(sent) }()
	r := NewReader(local)
	buf := make([]byte, 8<<20)
	var got []byte
	for len(got) < len(sent) {
		_ = local.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		if n > RawReadLimit {
			t.Fatalf("one read copied %d bytes, more than RawReadLimit (%d)", n, RawReadLimit)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes read differ from those sent")
	}
}
