package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// volumeMeta is kept in volumes/<id>.json beside the volume's directory.
type volumeMeta struct {
	ID       string    `json:"id"`
	Name     string    `json:"name"`
	Capacity int64     `json:"capacityBytes"`
	Created  time.Time `json:"created"`
	// At most one of these: the content the volume was made from.
	SourceSnapshot string `json:"sourceSnapshot,omitempty"`
	SourceVolume   string `json:"sourceVolume,omitempty"`
}

// snapshotMeta is kept in snapshots/<id>.json beside the snapshot's directory.
type snapshotMeta struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	SourceVolume string    `json:"sourceVolume"`
	Size         int64     `json:"sizeBytes"`
	Created      time.Time `json:"created"`
}

var errNotFound = errors.New("not found")

// store owns the state directory. One lock serialises every change (copies included): the
// test environment creates a handful of objects at a time.
type store struct {
	dir string
	mu  sync.Mutex
}

func newStore(dir string) (*store, error) {
	for _, d := range []string{"volumes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return &store{dir: dir}, nil
}

// The ids are derived from the CSI names, so a repeated Create (a sidecar's retry) finds the
// object it made before.
func volumeID(name string) string   { return "vol-" + shortHash(name) }
func snapshotID(name string) string { return "snap-" + shortHash(name) }

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:20]
}

// validID refuses ids that could name something outside the state directory.
func validID(id, prefix string) bool {
	return strings.HasPrefix(id, prefix) && !strings.ContainsAny(id, "/\\.") && len(id) < 64
}

func (s *store) volumeDir(id string) string   { return filepath.Join(s.dir, "volumes", id) }
func (s *store) snapshotDir(id string) string { return filepath.Join(s.dir, "snapshots", id) }

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// writeJSON writes through a temporary file and a rename, so a reader never sees half a file.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (s *store) volume(id string) (*volumeMeta, error) {
	if !validID(id, "vol-") {
		return nil, errNotFound
	}
	var m volumeMeta
	if err := readJSON(s.volumeDir(id)+".json", &m); err != nil {
		return nil, err
	}
	return &m, nil
}

func (s *store) snapshot(id string) (*snapshotMeta, error) {
	if !validID(id, "snap-") {
		return nil, errNotFound
	}
	var m snapshotMeta
	if err := readJSON(s.snapshotDir(id)+".json", &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// copyTree copies src to dst (which must not exist) as `cp -a` does: ownership, modes,
// timestamps, symlinks and hard links kept. It copies into dst.tmp first and renames, so dst
// exists only complete.
func copyTree(src, dst string) error {
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	out, err := exec.Command("cp", "-a", "--", src, tmp).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("cp -a %s %s: %v: %s", src, tmp, err, strings.TrimSpace(string(out)))
	}
	return os.Rename(tmp, dst)
}

// createVolume makes volume `name` (empty, or a copy of a snapshot or of another volume).
// It returns the existing volume when one of that name exists with the same request, and an
// error wrapping errExists when it differs.
func (s *store) createVolume(name string, capacity int64, fromSnapshot, fromVolume string) (*volumeMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := volumeID(name)
	if m, err := s.volume(id); err == nil {
		if m.Capacity != capacity || m.SourceSnapshot != fromSnapshot || m.SourceVolume != fromVolume {
			return nil, fmt.Errorf("%w: volume %q exists as %s with capacity %d, snapshot source %q, volume source %q",
				errExists, name, id, m.Capacity, m.SourceSnapshot, m.SourceVolume)
		}
		if _, err := os.Stat(s.volumeDir(id)); err == nil {
			return m, nil
		}
	} else if err != errNotFound {
		return nil, err
	}
	dir := s.volumeDir(id)
	switch {
	case fromSnapshot != "":
		if _, err := s.snapshot(fromSnapshot); err != nil {
			return nil, fmt.Errorf("source snapshot %s: %w", fromSnapshot, err)
		}
		if err := copyIfMissing(s.snapshotDir(fromSnapshot), dir); err != nil {
			return nil, err
		}
	case fromVolume != "":
		if _, err := s.volume(fromVolume); err != nil {
			return nil, fmt.Errorf("source volume %s: %w", fromVolume, err)
		}
		if err := copyIfMissing(s.volumeDir(fromVolume), dir); err != nil {
			return nil, err
		}
	default:
		// Like the root of a fresh filesystem: root-owned 0755. The kubelet hands it to the
		// pod's fsGroup (the CSIDriver's fsGroupPolicy is File).
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
	}
	m := &volumeMeta{ID: id, Name: name, Capacity: capacity, Created: time.Now().UTC(),
		SourceSnapshot: fromSnapshot, SourceVolume: fromVolume}
	if err := writeJSON(dir+".json", m); err != nil {
		return nil, err
	}
	return m, nil
}

func copyIfMissing(src, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	return copyTree(src, dst)
}

var errExists = errors.New("already exists")

// deleteVolume removes the volume's directory and metadata; a missing volume is not an error.
func (s *store) deleteVolume(id string) error {
	if !validID(id, "vol-") {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.RemoveAll(s.volumeDir(id)); err != nil {
		return err
	}
	if err := os.Remove(s.volumeDir(id) + ".json"); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// createSnapshot copies volume `source` into snapshot `name`. The snapshot's size is the
// source volume's capacity (what a restore must at least request).
func (s *store) createSnapshot(name, source string) (*snapshotMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := snapshotID(name)
	if m, err := s.snapshot(id); err == nil {
		if m.SourceVolume != source {
			return nil, fmt.Errorf("%w: snapshot %q exists as %s of volume %s, not of %s", errExists, name, id, m.SourceVolume, source)
		}
		return m, nil
	} else if err != errNotFound {
		return nil, err
	}
	src, err := s.volume(source)
	if err != nil {
		return nil, fmt.Errorf("source volume %s: %w", source, err)
	}
	dir := s.snapshotDir(id)
	if err := os.RemoveAll(dir); err != nil { // a copy whose metadata was never written
		return nil, err
	}
	if err := copyTree(s.volumeDir(source), dir); err != nil {
		return nil, err
	}
	m := &snapshotMeta{ID: id, Name: name, SourceVolume: source, Size: src.Capacity, Created: time.Now().UTC()}
	if err := writeJSON(dir+".json", m); err != nil {
		return nil, err
	}
	return m, nil
}

func (s *store) deleteSnapshot(id string) error {
	if !validID(id, "snap-") {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.RemoveAll(s.snapshotDir(id)); err != nil {
		return err
	}
	if err := os.Remove(s.snapshotDir(id) + ".json"); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// snapshots lists every snapshot, ordered by id.
func (s *store) snapshots() ([]*snapshotMeta, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "snapshots"))
	if err != nil {
		return nil, err
	}
	var out []*snapshotMeta
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		if m, err := s.snapshot(id); err == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// failCreateSnapshot is the fault switch: the contents of <state>/fail-create-snapshot when
// the file exists.
// failCreateSnapshot reads the CreateSnapshot fault switch: the file's contents are the
// message, failing with codes.Unavailable (transient), or with the code it starts with
// ("InvalidArgument: ..." for a permanent error).
func (s *store) failCreateSnapshot() (codes.Code, string, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, "fail-create-snapshot"))
	if err != nil {
		return codes.OK, "", false
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = "CreateSnapshot failed by the fault switch " + filepath.Join(s.dir, "fail-create-snapshot")
	}
	for _, c := range []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted, codes.Internal} {
		if rest, ok := strings.CutPrefix(msg, c.String()+": "); ok {
			return c, rest, true
		}
	}
	return codes.Unavailable, msg, true
}
