// Command tcprelay forwards TCP connections to a target and does nothing
// else: bench-sidecar puts one or two of them where the sidecars would be,
// to measure what the extra process hops cost on their own, apart from
// anything the sidecar does.
//
// Two ways to forward. splice (the default) is io.Copy between the two TCP
// connections, which Linux turns into splice(2): the bytes never enter user
// space, which no proxy that parses its traffic can match. rw reads into a
// 64 KiB buffer and writes it out, one user-space copy per hop: the floor
// for a proxy that must look at what it forwards, and the fair one for
// large messages.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
)

// rwBuffer is the read/write relay's buffer, per direction.
const rwBuffer = 64 << 10

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "where clients connect")
	target := flag.String("target", "", "where connections are forwarded")
	mode := flag.String("copy", "splice", "splice: io.Copy, which splices between the sockets on Linux; rw: read into a 64 KiB buffer and write it out (one user-space copy)")
	flag.Parse()
	var copyFn func(dst, src net.Conn)
	switch *mode {
	case "splice":
		copyFn = func(dst, src net.Conn) { _, _ = io.Copy(dst, src) }
	case "rw":
		copyFn = readWrite
	default:
		fmt.Fprintf(os.Stderr, "tcprelay: -copy must be splice or rw, not %q\n", *mode)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcprelay:", err)
		os.Exit(1)
	}
	for {
		client, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "tcprelay:", err)
			os.Exit(1)
		}
		go relay(client, *target, copyFn)
	}
}

func relay(client net.Conn, target string, copyFn func(dst, src net.Conn)) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcprelay:", err)
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { copyFn(server, client); done <- struct{}{} }()
	go func() { copyFn(client, server); done <- struct{}{} }()
	<-done
}

// readWrite copies src to dst through one buffer: plain Read and Write
// calls, so that neither io.Copy's ReaderFrom nor WriterTo can splice.
func readWrite(dst, src net.Conn) {
	buf := make([]byte, rwBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
