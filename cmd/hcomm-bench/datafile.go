package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The data files of file-4k, latency and footprint: where they go, how
// they are laid out, and their removal at exit (unless -keep).

// benchDir finds a directory on a file system with a real O_DIRECT (ext4,
// xfs, btrfs): tmpfs accepts O_DIRECT and still goes through the page cache.
func benchDir(o *options) (string, string, error) {
	cands := []string{o.dir}
	if o.dir == "" {
		cwd, _ := os.Getwd()
		cands = []string{os.Getenv("TMPDIR"), "/var/tmp", "/tmp", cwd}
	}
	names := map[int64]string{0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs"}
	var tried []string
	for _, d := range cands {
		if d == "" {
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		if fs, ok := names[int64(st.Type)]; ok {
			if unix.Access(d, unix.W_OK) == nil {
				return d, fs, nil
			}
			tried = append(tried, d+": not writable")
			continue
		}
		tried = append(tried, fmt.Sprintf("%s: file system %#x (not ext4/xfs/btrfs)", d, st.Type))
	}
	if o.dir != "" {
		return "", "", fmt.Errorf("-dir %s is not on ext4/xfs/btrfs (%v)", o.dir, tried)
	}
	return "", "", fmt.Errorf("no writable ext4/xfs/btrfs directory (tried %v); pass -dir", tried)
}

// prepareFile lays the benchmark file out once (written through, so later
// O_DIRECT writes overwrite allocated blocks rather than convert unwritten
// extents) and reuses it when it already has the size.
func prepareFile(o *options) (string, error) { return layOut(o, fileName) }

// layOut returns the path of the benchmark file called name (one per user:
// another user's file is not ours to write; one per size, so a -quick run
// and a full one never share it), laying it out when needed. A new file is
// written under a temporary name and renamed into place: another
// hcomm-bench running at the same time (the machine is shared) never sees
// it half written, and none ever truncates a file another run is using
// (that cost runs EIO from fsync and fio's I/O beyond the end).
func layOut(o *options, name string) (string, error) {
	path, err := dataPath(o, name)
	if err != nil {
		return "", err
	}
	dir, name := filepath.Split(path)
	size := fileSize(o)
	if st, err := os.Stat(path); err == nil && st.Size() == size {
		return path, nil
	}
	f, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // after the rename: ENOENT, ignored
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			return "", fmt.Errorf("lay out %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("lay out %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("lay out %s: %w", path, err)
	}
	return path, nil
}

// dataPath is where the data file called name goes, and, in the parent,
// notes it for removal at exit (the parent removes what its scenario
// children lay out: they must not, or every unit lays 512 MiB out again).
func dataPath(o *options, name string) (string, error) {
	dir, _, err := benchDir(o)
	if err != nil {
		return "", err
	}
	tag := fmt.Sprintf("-%dMiB", fileSize(o)>>20)
	if uid := os.Geteuid(); uid != 0 {
		tag += fmt.Sprintf("-uid%d", uid)
	}
	path := filepath.Join(dir, strings.Replace(name, ".dat", tag+".dat", 1))
	if !o.worker && !o.child {
		noteDataFile(path)
	}
	return path, nil
}

var (
	dataMu    sync.Mutex
	dataFiles []string
)

// noteDataFile remembers a data file this run laid out or reused, for
// removeDataFiles.
func noteDataFile(path string) {
	dataMu.Lock()
	defer dataMu.Unlock()
	if !slices.Contains(dataFiles, path) {
		dataFiles = append(dataFiles, path)
	}
}

// removeDataFiles removes the run's data files at exit, or with -keep
// names them on stderr.
func removeDataFiles(o *options) {
	dataMu.Lock()
	defer dataMu.Unlock()
	for _, p := range dataFiles {
		if o.keep {
			fmt.Fprintf(os.Stderr, "hcomm-bench: kept %s (-keep)\n", p)
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "hcomm-bench: remove %s: %v\n", p, err)
		}
	}
	dataFiles = nil
}
