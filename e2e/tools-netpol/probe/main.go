// Command probe is the NetworkPolicy scenario's test program, packed alone into
// a tiny image the node runs (no shell, no libc: CGO_ENABLED=0).
//
//	probe connect <host:port> <token>   dial once, send "<token>\n", print the
//	                                    server's reply; exit 0 only when the
//	                                    server answered "ok <token>"
//	probe dial <host:port>              open a TCP connection and close it:
//	                                    for servers that speak TLS (the API
//	                                    server behind the kubernetes Service)
//	probe serve <port>                  accept connections, print "arrived
//	                                    <token> from <peer>" for each and
//	                                    answer "ok <token>"
//
// A refused or timed-out dial exits 1 with the error, so the scenario can tell
// "blocked" from "reached" by the exit status of `kubectl exec`.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Long enough for a slow first packet on a busy node, short enough that a
// dropped SYN fails the attempt well inside the scenario's deadline.
const dialTimeout = 3 * time.Second

func main() {
	if len(os.Args) < 2 {
		fail("usage: probe connect <host:port> <token> | probe dial <host:port> | probe serve <port>")
	}
	switch os.Args[1] {
	case "connect":
		if len(os.Args) != 4 {
			fail("usage: probe connect <host:port> <token>")
		}
		connect(os.Args[2], os.Args[3])
	case "dial":
		if len(os.Args) != 3 {
			fail("usage: probe dial <host:port>")
		}
		dial(os.Args[2])
	case "serve":
		if len(os.Args) != 3 {
			fail("usage: probe serve <port>")
		}
		serve(os.Args[2])
	default:
		fail("unknown command " + os.Args[1])
	}
}

func connect(address, token string) {
	connection, err := net.DialTimeout("tcp", address, dialTimeout)
	if err != nil {
		fail(fmt.Sprintf("failed to connect to %s: %v", address, err))
	}
	defer connection.Close()
	_ = connection.SetDeadline(time.Now().Add(dialTimeout))
	if _, err := fmt.Fprintf(connection, "%s\n", token); err != nil {
		fail(fmt.Sprintf("failed to send to %s: %v", address, err))
	}
	reply, err := bufio.NewReader(connection).ReadString('\n')
	if err != nil {
		fail(fmt.Sprintf("failed to read the reply of %s: %v", address, err))
	}
	reply = strings.TrimSpace(reply)
	fmt.Println(reply)
	if reply != "ok "+token {
		fail(fmt.Sprintf("unexpected reply from %s: %q", address, reply))
	}
}

func dial(address string) {
	connection, err := net.DialTimeout("tcp", address, dialTimeout)
	if err != nil {
		fail(fmt.Sprintf("failed to connect to %s: %v", address, err))
	}
	fmt.Printf("connected to %s from %s\n", address, connection.LocalAddr())
	connection.Close()
}

func serve(port string) {
	listener, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fail(fmt.Sprintf("failed to listen on port %s: %v", port, err))
	}
	fmt.Printf("listening on %s\n", listener.Addr())
	for {
		connection, err := listener.Accept()
		if err != nil {
			fail(fmt.Sprintf("failed to accept: %v", err))
		}
		go answer(connection)
	}
}

func answer(connection net.Conn) {
	defer connection.Close()
	_ = connection.SetDeadline(time.Now().Add(dialTimeout))
	token, err := bufio.NewReader(connection).ReadString('\n')
	if err != nil {
		fmt.Printf("unreadable connection from %s: %v\n", connection.RemoteAddr(), err)
		return
	}
	token = strings.TrimSpace(token)
	fmt.Printf("arrived %s from %s\n", token, connection.RemoteAddr())
	fmt.Fprintf(connection, "ok %s\n", token)
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "probe: "+message)
	os.Exit(1)
}
