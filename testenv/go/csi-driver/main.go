// Command kopiur-csi-hostpath is the test environment's CSI driver (hostpath.csi.kopiur.dev):
// a real, single-node driver that keeps every volume as a directory under its state directory,
// snapshots and clones by copying directories (ownership, modes and timestamps kept), and
// bind-mounts volumes into pods for the kubelet. It also serves the kubelet's plugin-registration
// API itself, so no node-driver-registrar is needed.
//
// Layout of --state-dir:
//
//	volumes/<id>/        a volume's data      volumes/<id>.json    its metadata
//	snapshots/<id>/      a snapshot's data    snapshots/<id>.json  its metadata
//	fail-create-snapshot if present, CreateSnapshot fails with codes.Unavailable and the
//	                     file's contents as the message (a fault switch for tests); contents
//	                     starting "InvalidArgument: " (or FailedPrecondition, ResourceExhausted,
//	                     Internal) fail with that code and the rest as the message
//
// Never shipped: see docs/testenv.md ("CSI stack").
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	driverName    = "hostpath.csi.kopiur.dev"
	driverVersion = "0.1.0"
	// topologyKey is the one topology segment: volumes live on the node that made them.
	topologyKey = "topology.hostpath.csi.kopiur.dev/node"
)

func main() {
	endpoint := flag.String("endpoint", "", "unix socket path the CSI services listen on")
	stateDir := flag.String("state-dir", "", "directory holding volumes, snapshots and their metadata")
	nodeID := flag.String("node-id", "", "the node name (NodeGetInfo, the topology segment)")
	regDir := flag.String("registration-dir", "", "the kubelet's plugins_registry directory; when set, the kubelet registration socket is served there")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if *endpoint == "" || *stateDir == "" || *nodeID == "" {
		fmt.Fprintln(os.Stderr, "usage: kopiur-csi-hostpath --endpoint=PATH --state-dir=DIR --node-id=NODE [--registration-dir=DIR]")
		os.Exit(2)
	}
	st, err := newStore(*stateDir)
	if err != nil {
		log.Fatalf("state dir: %v", err)
	}
	d := &driver{store: st, nodeID: *nodeID}

	csiLis, err := listen(*endpoint)
	if err != nil {
		log.Fatalf("listening on %s: %v", *endpoint, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(srv, &identity{})
	csi.RegisterControllerServer(srv, &controller{d: d})
	csi.RegisterNodeServer(srv, &node{d: d})
	go func() {
		if err := srv.Serve(csiLis); err != nil {
			log.Fatalf("CSI server: %v", err)
		}
	}()
	log.Printf("%s %s serving CSI on %s (state %s, node %s)", driverName, driverVersion, *endpoint, *stateDir, *nodeID)

	// The registration socket only after the CSI socket serves: the kubelet calls
	// NodeGetInfo as soon as it has registered the plugin.
	var reg *grpc.Server
	regSock := ""
	if *regDir != "" {
		regSock = filepath.Join(*regDir, driverName+"-reg.sock")
		regLis, err := listen(regSock)
		if err != nil {
			log.Fatalf("listening on %s: %v", regSock, err)
		}
		reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(reg, &registration{endpoint: *endpoint})
		go func() {
			if err := reg.Serve(regLis); err != nil {
				log.Fatalf("registration server: %v", err)
			}
		}()
		log.Printf("serving kubelet plugin registration on %s", regSock)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	log.Printf("%v: stopping", s)
	for _, g := range []*grpc.Server{reg, srv} {
		if g == nil {
			continue
		}
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			g.Stop()
		}
	}
	for _, p := range []string{regSock, *endpoint} {
		if p != "" {
			_ = os.Remove(p)
		}
	}
}

// listen opens a unix socket at path, replacing a stale socket file left by an earlier run.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// logCalls logs every call but the frequent probes, with its outcome.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	t := time.Now()
	resp, err := h(ctx, req)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	quiet := method == "Probe" || method == "GetPluginInfo" || method == "GetPluginCapabilities" ||
		method == "ControllerGetCapabilities" || method == "NodeGetCapabilities"
	if err != nil {
		log.Printf("%s(%v) failed after %v: %v", method, req, time.Since(t).Round(time.Millisecond), status.Convert(err).Message())
	} else if !quiet {
		log.Printf("%s(%v) ok in %v", method, req, time.Since(t).Round(time.Millisecond))
	}
	return resp, err
}

type driver struct {
	store  *store
	nodeID string
}

func (d *driver) topology() *csi.Topology {
	return &csi.Topology{Segments: map[string]string{topologyKey: d.nodeID}}
}

// registration answers the kubelet's plugin watcher (what node-driver-registrar does).
type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              driverName,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("registered with the kubelet")
	} else {
		log.Printf("the kubelet did NOT register the plugin: %s", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
