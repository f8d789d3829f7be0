package main

import (
	"context"
	"fmt"
	"os"
	"time"

	remote "k8s.io/cri-client/pkg"
)

// criReset stops and removes every pod sandbox of the CRI runtime at endpoint, the way the
// kubelet would (StopPodSandbox runs the CNI DEL and stops the containers), so a test node's
// teardown leaves no network namespace, veth, IP allocation or container behind.
func criReset(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: k8sbin cri-reset unix:///path/to/containerd.sock")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := remote.NewRemoteRuntimeService(args[0], 10*time.Second, nil, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-reset: connecting to %s: %v\n", args[0], err)
		return 1
	}
	sandboxes, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-reset: listing pod sandboxes: %v\n", err)
		return 1
	}
	failed := 0
	for _, s := range sandboxes {
		name := s.GetMetadata().GetNamespace() + "/" + s.GetMetadata().GetName()
		if err := rs.StopPodSandbox(ctx, s.GetId()); err != nil {
			fmt.Fprintf(os.Stderr, "cri-reset: stopping %s: %v\n", name, err)
			failed++
			continue
		}
		if err := rs.RemovePodSandbox(ctx, s.GetId()); err != nil {
			fmt.Fprintf(os.Stderr, "cri-reset: removing %s: %v\n", name, err)
			failed++
			continue
		}
		fmt.Printf("removed pod sandbox %s\n", name)
	}
	if failed > 0 {
		return 1
	}
	return 0
}
