// Command pause is the sandbox ("pause") container that containerd starts
// first in every pod of scripts/kube-cluster.sh's cluster, in place of
// registry.k8s.io/pause, which cannot be pulled here (no registry is
// reachable). Like the real one it holds the pod's namespaces open: it
// sleeps until SIGTERM or SIGINT and then exits 0, and as PID 1 of a pod
// that shares its process namespace it reaps the orphans that are handed to
// it. Built static (CGO_ENABLED=0) into an image FROM scratch.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (fedpq, deploy/kubernetes/controlplane/pause)")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: %v: exiting\n", s)
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
