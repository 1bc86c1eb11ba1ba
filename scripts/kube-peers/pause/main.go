// pause holds a pod's namespaces open, as Kubernetes' own pause does: it sleeps
// until SIGINT or SIGTERM and reaps the children the namespace's processes leave.
// scripts/kube-peers.sh builds it statically and packs it, alone, into the OCI image
// the test node uses both as the sandbox image and as its pods' container image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
