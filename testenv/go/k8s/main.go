// Command k8sbin is a multi-call binary: kube-apiserver and kube-controller-manager,
// dispatched on the basename of argv[0] (or argv[1]).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/pkg/controller/job"

	_ "time/tzdata"
)

func main() {
	name := filepath.Base(os.Args[0])
	rest := os.Args[1:]
	if name != "kube-apiserver" && name != "kube-controller-manager" {
		if len(rest) == 0 {
			fmt.Fprintln(os.Stderr, "usage: k8sbin kube-apiserver|kube-controller-manager [flags]")
			os.Exit(2)
		}
		name, rest = rest[0], rest[1:]
	}
	switch name {
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(rest)
		os.Exit(cli.Run(cmd))
	case "kube-controller-manager":
		tuneJobBackoff()
		cmd := kcm.NewControllerManagerCommand()
		cmd.SetArgs(rest)
		os.Exit(cli.Run(cmd))
	default:
		fmt.Fprintf(os.Stderr, "k8sbin: unknown command %q\n", name)
		os.Exit(2)
	}
}

// tuneJobBackoff lowers the Job controller's pod-failure backoff when the test
// environment asks for it, so failure-path tests do not wait 10s, 20s, 40s...
func tuneJobBackoff() {
	if v := os.Getenv("KOPIUR_TESTENV_JOB_BACKOFF"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			job.DefaultJobPodFailureBackOff = d
		}
	}
	if v := os.Getenv("KOPIUR_TESTENV_JOB_BACKOFF_MAX"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			job.MaxJobPodFailureBackOff = d
		}
	}
}
