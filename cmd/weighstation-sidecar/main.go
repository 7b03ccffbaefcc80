// Command weighstation-sidecar is the sidecar beside each application: the
// flags and behaviour of `weighstation sidecar`, in a binary of its own that
// links no Kubernetes package, so that the operator's libraries (and their
// package inits) cost no pod any memory. `weighstation-sidecar -h` lists
// its flags; -version prints its version.
package main

import (
	"fmt"
	"os"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
)

func main() {
	if err := sidecarapp.Run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "weighstation-sidecar: %v\n", err)
		os.Exit(1)
	}
}
