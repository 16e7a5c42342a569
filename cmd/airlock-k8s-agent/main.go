// Command airlock-k8s-agent is the program that the kubernetes backend
// runs inside each sandbox Pod: its containers' pid 1, each process's
// shepherd, the file operations and the egress relay (package
// backend/kubernetes/agent). It is built static and shipped as an image of
// its own (test/k8s/images.sh builds it for the test cluster).
package main

import (
	"os"

	"github.com/airlock-sandbox/airlock/backend/kubernetes/agent"
)

func main() { os.Exit(agent.Main(os.Args)) }
