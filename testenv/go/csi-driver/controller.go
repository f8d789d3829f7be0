package main

import (
	"context"
	"errors"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type identity struct {
	csi.UnimplementedIdentityServer
}

func (identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: driverVersion}, nil
}

func (identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []csi.PluginCapability_Service_Type{
		csi.PluginCapability_Service_CONTROLLER_SERVICE,
		csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
	}
	out := &csi.GetPluginCapabilitiesResponse{}
	for _, c := range caps {
		out.Capabilities = append(out.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: c}},
		})
	}
	return out, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

type controller struct {
	csi.UnimplementedControllerServer
	d *driver
}

// defaultCapacity is what a request without a capacity range gets.
const defaultCapacity = 1 << 30

// storeErr maps the store's errors to gRPC codes.
func storeErr(err error) error {
	switch {
	case errors.Is(err, errNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, errExists):
		return status.Error(codes.AlreadyExists, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// checkCapabilities accepts mounted (filesystem) volumes only: volumes are directories.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	for _, c := range caps {
		if c.GetBlock() != nil {
			return status.Error(codes.InvalidArgument, "block volumes are not supported (volumes are directories)")
		}
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "access type missing (only mount is supported)")
		}
	}
	return nil
}

func (c *controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	capacity := req.GetCapacityRange().GetRequiredBytes()
	if capacity == 0 {
		capacity = req.GetCapacityRange().GetLimitBytes()
	}
	if capacity == 0 {
		capacity = defaultCapacity
	}
	var fromSnap, fromVol string
	src := req.GetVolumeContentSource()
	if s := src.GetSnapshot(); s != nil {
		fromSnap = s.GetSnapshotId()
		m, err := c.d.store.snapshot(fromSnap)
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "source snapshot %s not found", fromSnap)
		}
		if m.Size > capacity {
			return nil, status.Errorf(codes.OutOfRange, "snapshot %s needs %d bytes, the request has %d", fromSnap, m.Size, capacity)
		}
	}
	if v := src.GetVolume(); v != nil {
		fromVol = v.GetVolumeId()
		m, err := c.d.store.volume(fromVol)
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "source volume %s not found", fromVol)
		}
		if m.Capacity > capacity {
			return nil, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, the clone request %d", fromVol, m.Capacity, capacity)
		}
	}
	m, err := c.d.store.createVolume(req.GetName(), capacity, fromSnap, fromVol)
	if err != nil {
		return nil, storeErr(err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           m.ID,
		CapacityBytes:      m.Capacity,
		ContentSource:      src,
		AccessibleTopology: []*csi.Topology{c.d.topology()},
	}}, nil
}

func (c *controller) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if err := c.d.store.deleteVolume(req.GetVolumeId()); err != nil {
		return nil, storeErr(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (c *controller) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if _, err := c.d.store.volume(req.GetVolumeId()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	}
	out := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range caps {
		out.Capabilities = append(out.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return out, nil
}

func snapshotProto(m *snapshotMeta) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     m.ID,
		SourceVolumeId: m.SourceVolume,
		SizeBytes:      m.Size,
		CreationTime:   timestamppb.New(m.Created),
		ReadyToUse:     true,
	}
}

func (c *controller) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if code, msg, fail := c.d.store.failCreateSnapshot(); fail {
		return nil, status.Error(code, msg)
	}
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "source volume id missing")
	}
	m, err := c.d.store.createSnapshot(req.GetName(), req.GetSourceVolumeId())
	if err != nil {
		if errors.Is(err, errNotFound) {
			return nil, status.Errorf(codes.NotFound, "source volume %s not found", req.GetSourceVolumeId())
		}
		return nil, storeErr(err)
	}
	return &csi.CreateSnapshotResponse{Snapshot: snapshotProto(m)}, nil
}

func (c *controller) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot id missing")
	}
	if err := c.d.store.deleteSnapshot(req.GetSnapshotId()); err != nil {
		return nil, storeErr(err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots filters by snapshot id or source volume id; the token is an offset.
func (c *controller) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	all, err := c.d.store.snapshots()
	if err != nil {
		return nil, storeErr(err)
	}
	var hits []*snapshotMeta
	for _, m := range all {
		if id := req.GetSnapshotId(); id != "" && m.ID != id {
			continue
		}
		if src := req.GetSourceVolumeId(); src != "" && m.SourceVolume != src {
			continue
		}
		hits = append(hits, m)
	}
	start := 0
	if t := req.GetStartingToken(); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(hits) {
			return nil, status.Errorf(codes.Aborted, "invalid starting token %q", t)
		}
		start = n
	}
	end := len(hits)
	if max := int(req.GetMaxEntries()); max > 0 && start+max < end {
		end = start + max
	}
	out := &csi.ListSnapshotsResponse{}
	for _, m := range hits[start:end] {
		out.Entries = append(out.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshotProto(m)})
	}
	if end < len(hits) {
		out.NextToken = strconv.Itoa(end)
	}
	return out, nil
}
