// Command tcprelay forwards TCP connections to a target and does nothing
// else: bench-sidecar puts two of them where the sidecars would be, to
// measure what the extra process hops cost on their own, apart from
// anything the sidecar does.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "where clients connect")
	target := flag.String("target", "", "where connections are forwarded")
	flag.Parse()
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
		go relay(client, *target)
	}
}

func relay(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcprelay:", err)
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
}
