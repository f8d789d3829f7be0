package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The gRPC surface over a real unix socket: create, snapshot with the fault switch, restore,
// and (as root) a read-only bind mount published and unpublished twice.
func TestServicesOverTheSocket(t *testing.T) {
	dir := t.TempDir()
	st, err := newStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{store: st, nodeID: "n1"}
	sock := filepath.Join(dir, "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(srv, &identity{})
	csi.RegisterControllerServer(srv, &controller{d: d})
	csi.RegisterNodeServer(srv, &node{d: d})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	ctl, nd := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	mount := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	v, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-a", VolumeCapabilities: mount,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Volume.CapacityBytes != 64<<20 || v.Volume.AccessibleTopology[0].Segments[topologyKey] != "n1" {
		t.Fatalf("volume %v", v.Volume)
	}
	id := v.Volume.VolumeId
	if err := os.WriteFile(filepath.Join(st.volumeDir(id), "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	fault := filepath.Join(st.dir, "fail-create-snapshot")
	if err := os.WriteFile(fault, []byte("injected\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s1", SourceVolumeId: id})
	if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "injected" {
		t.Fatalf("fault switch: %v", err)
	}
	if err := os.WriteFile(fault, []byte("InvalidArgument: bad parameter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s1", SourceVolumeId: id})
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || s.Message() != "bad parameter" {
		t.Fatalf("fault switch with a code: %v", err)
	}
	_ = os.Remove(fault)
	snap, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s1", SourceVolumeId: id})
	if err != nil || !snap.Snapshot.ReadyToUse || snap.Snapshot.SizeBytes != 64<<20 {
		t.Fatalf("snapshot %v %v", snap, err)
	}
	_, err = ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s2", SourceVolumeId: "vol-missing"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("missing source: %v", err)
	}
	list, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: id})
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Snapshot.SnapshotId != snap.Snapshot.SnapshotId {
		t.Fatalf("list %v %v", list, err)
	}
	_, err = ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-b", VolumeCapabilities: mount,
		CapacityRange:       &csi.CapacityRange{RequiredBytes: 64 << 20},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-nope"}}}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("missing snapshot source: %v", err)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: publish not tested")
		return
	}
	target := filepath.Join(dir, "pod", "mount")
	pub := &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mount[0], Readonly: true}
	for i := 0; i < 2; i++ {
		if _, err := nd.NodePublishVolume(ctx, pub); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read through the mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(target, "g"), nil, 0o644); err == nil {
		t.Fatal("a read-only publish must refuse writes")
	}
	for i := 0; i < 2; i++ {
		if _, err := nd.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := isMountPoint(target); m {
		t.Fatal("still mounted")
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("target left: %v", err)
	}
}
