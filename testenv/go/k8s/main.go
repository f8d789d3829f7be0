// Command k8sbin is a multi-call binary: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy and kubectl, dispatched on the basename of argv[0] (or argv[1]).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/pkg/controller/job"

	_ "time/tzdata"
)

var commands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}

func known(name string) bool {
	for _, c := range commands {
		if c == name {
			return true
		}
	}
	return false
}

func main() {
	name := filepath.Base(os.Args[0])
	rest := os.Args[1:]
	if name == "cri-reset" || (len(rest) > 0 && rest[0] == "cri-reset") {
		if name != "cri-reset" {
			rest = rest[1:]
		}
		os.Exit(criReset(rest))
	}
	if !known(name) {
		if len(rest) == 0 {
			fmt.Fprintln(os.Stderr, "usage: k8sbin kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl [flags]")
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
	case "kube-scheduler":
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(rest)
		os.Exit(cli.Run(cmd))
	case "kubelet":
		cmd := kubelet.NewKubeletCommand(context.Background())
		cmd.SetArgs(rest)
		os.Exit(cli.Run(cmd))
	case "kube-proxy":
		cmd := proxy.NewProxyCommand()
		cmd.SetArgs(rest)
		os.Exit(cli.Run(cmd))
	case "kubectl":
		cmd := kubectl.NewDefaultKubectlCommand()
		cmd.SetArgs(rest)
		if err := cli.RunNoErrOutput(cmd); err != nil {
			kubectlutil.CheckErr(err)
		}
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
