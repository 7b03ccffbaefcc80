// Command weighstation is the operator, the broker and the load generator
// in one binary, and the sidecar for standalone use. Subcommands:
//
//	weighstation operator   the Kubernetes operator
//	weighstation sidecar    the NATS-protocol proxy beside each application
//	weighstation broker     the embedded NATS broker
//	weighstation bench      the open-loop load generator
//	weighstation version    the version
//
// In pods the sidecar runs as its own binary, cmd/weighstation-sidecar,
// which runs the same code (cmd/weighstation-sidecar/sidecarapp) without the Kubernetes
// libraries this one links for the operator: their package inits cost a
// sidecar inside this binary about three times the idle memory.
package main

import (
	"fmt"
	"os"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/cmd/weighstation/operatorapp"
	"github.com/weighstation/weighstation/internal/version"
)

const usage = `usage: weighstation <command> [flags]

commands:
  operator   run the Kubernetes operator
  sidecar    run the sidecar beside an application
  broker     run the embedded NATS broker
  bench      generate open-loop load against a sidecar or a broker
  version    print the version

In a pod, prefer the weighstation-sidecar binary (the same flags as
weighstation sidecar, without the Kubernetes libraries: a third of the
memory).

weighstation <command> -h lists a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "operator":
		err = operatorapp.Run(os.Args[2:])
	case "sidecar":
		err = sidecarapp.Run(os.Args[2:])
	case "broker":
		err = runBroker(os.Args[2:])
	case "bench":
		err = runBench(os.Args[2:])
	case "version", "-version", "--version":
		fmt.Println(version.String())
		return
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "weighstation: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "weighstation %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
