package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestIDsAreStableAndSafe(t *testing.T) {
	if volumeID("pvc-1") != volumeID("pvc-1") || volumeID("pvc-1") == volumeID("pvc-2") {
		t.Fatal("volume ids must be derived from the name")
	}
	if !validID(volumeID("x"), "vol-") || validID("vol-../x", "vol-") || validID(snapshotID("x"), "vol-") {
		t.Fatal("id validation")
	}
}

func TestMountinfoParsing(t *testing.T) {
	mi := "36 35 98:0 /mnt1 /mnt/with\\040space rw - ext3 /dev/root rw\n37 35 98:0 / /var/lib/k/pods/x/mount rw - ext4 /dev/sda rw\n"
	if !mountinfoHas(mi, "/mnt/with space") || !mountinfoHas(mi, "/var/lib/k/pods/x/mount/") || mountinfoHas(mi, "/var/lib/k") {
		t.Fatal("mountinfo lookup")
	}
}

// A snapshot and a restore keep contents, modes, ownership and timestamps, and are idempotent.
func TestSnapshotRestoreCloneKeepAttributes(t *testing.T) {
	s, err := newStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.createVolume("src", 1<<20, "", "")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(s.volumeDir(v.ID), "data.txt")
	if err := os.WriteFile(f, []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(f, old, old); err != nil {
		t.Fatal(err)
	}
	chown := os.Geteuid() == 0
	if chown {
		if err := os.Chown(f, 1000, 2000); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.createSnapshot("snap1", v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.createSnapshot("snap1", v.ID); err != nil || again.ID != snap.ID || !again.Created.Equal(snap.Created) {
		t.Fatalf("repeat create: %v %v", again, err)
	}
	if _, err := s.createSnapshot("snap1", "vol-other"); err == nil {
		t.Fatal("same name, other source must fail")
	}
	if _, err := s.createSnapshot("snap2", "vol-missing"); err == nil {
		t.Fatal("missing source must fail")
	}
	restored, err := s.createVolume("restored", 1<<20, snap.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	clone, err := s.createVolume("clone", 1<<20, "", v.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{restored.ID, clone.ID} {
		p := filepath.Join(s.volumeDir(id), "data.txt")
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "hello" {
			t.Fatalf("%s: %q %v", p, b, err)
		}
		fi, _ := os.Stat(p)
		if fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(old) {
			t.Fatalf("%s: mode %v mtime %v", p, fi.Mode(), fi.ModTime())
		}
		if st := fi.Sys().(*syscall.Stat_t); chown && (st.Uid != 1000 || st.Gid != 2000) {
			t.Fatalf("%s: owner %d:%d", p, st.Uid, st.Gid)
		}
	}
	if err := s.deleteSnapshot(snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.deleteSnapshot(snap.ID); err != nil {
		t.Fatal("delete is idempotent")
	}
	for _, id := range []string{v.ID, restored.ID, clone.ID} {
		if err := s.deleteVolume(id); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"volumes", "snapshots"} {
		left, _ := os.ReadDir(filepath.Join(s.dir, d))
		if len(left) != 0 {
			t.Fatalf("%s left: %v", d, left)
		}
	}
}
