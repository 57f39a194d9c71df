package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The stable device of file-4k: a block device whose speed is the CPU's,
// so that the engine and fio are judged on a device that does not swing
// with a shared disk. It is a loop device in direct-I/O mode over a file
// in a tmpfs mount of its own (the kernel's null_blk would serve too, but
// is not used: it is a module few kernels load, see nullBlkStatus). The
// scenario child creates the mount and the loop device before the stable
// tables and removes both after them, on failure and on SIGTERM too
// (atExit); the traced workers only open the device (-w-stable-dev).

// stablePrefix starts the stable device's variant names:
// "stable/randread/engine".
const stablePrefix = "stable/"

// stableSize is the loop device's size: its backing file lives in RAM.
func stableSize(o *options) int64 {
	if o.quick {
		return 64 << 20
	}
	return 256 << 20
}

// stableDev is a loop device over a file in a tmpfs mount of its own.
type stableDev struct {
	dir  string // the tmpfs mount point (a directory of its own)
	img  string // the backing file in it
	loop string // /dev/loopN, "" before losetup succeeded
	// mounted: dir holds the tmpfs mount.
	mounted bool
	undo    func() // unregisters the atExit teardown
	err     error  // teardown's
}

// nullBlkStatus says whether the kernel's null_blk device exists here, and
// why not.
func nullBlkStatus() string {
	if _, err := os.Stat("/sys/module/null_blk"); err == nil {
		return "null_blk loaded (not used: the loop device is what every kernel has)"
	}
	why := []string{"no /sys/module/null_blk"}
	if _, err := os.Stat("/lib/modules"); err != nil {
		why = append(why, "no /lib/modules")
	}
	if _, err := exec.LookPath("modprobe"); err != nil {
		why = append(why, "no modprobe")
	}
	return "null_blk not available on this kernel (" + strings.Join(why, ", ") + ")"
}

// setupStableDev mounts a tmpfs, fills a file of stableSize bytes in it
// and attaches it to a free loop device with direct I/O on. It needs root
// and losetup; on any failure it removes what it made and says why.
func setupStableDev(o *options) (sd *stableDev, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("needs root (mount(2) of a tmpfs, losetup)")
	}
	losetup, err := exec.LookPath("losetup")
	if err != nil {
		return nil, errors.New("losetup not found (util-linux: apt-get install mount)")
	}
	size := stableSize(o)
	dir, err := os.MkdirTemp("", "hcomm-bench-stable-")
	if err != nil {
		return nil, err
	}
	sd = &stableDev{dir: dir, img: filepath.Join(dir, "dev.img")}
	sd.undo = atExit(func() { _ = sd.teardown() })
	defer func() {
		if err != nil {
			if terr := sd.close(); terr != nil {
				err = fmt.Errorf("%w (and removing it: %v)", err, terr)
			}
			sd = nil
		}
	}()
	// Room for the file and nothing else.
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("size=%d,mode=0700", size+(1<<20))); err != nil {
		return nil, fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	sd.mounted = true
	if err := fillFile(sd.img, size); err != nil {
		return nil, err
	}
	out, err := exec.Command(losetup, "--find", "--show", "--direct-io=on", sd.img).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup --find --show --direct-io=on %s: %v: %s", sd.img, err, firstLine(strings.TrimSpace(string(out))))
	}
	sd.loop = strings.TrimSpace(string(out))
	if !strings.HasPrefix(sd.loop, "/dev/loop") {
		return nil, fmt.Errorf("losetup printed %q, not a loop device", sd.loop)
	}
	// losetup may attach the device and fail to switch direct I/O on
	// without an error (older util-linux): the kernel says.
	dio, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(sd.loop), "loop/dio"))
	if err != nil {
		return nil, fmt.Errorf("%s: reading its dio flag: %w", sd.loop, err)
	}
	if strings.TrimSpace(string(dio)) != "1" {
		return nil, fmt.Errorf("%s: the kernel did not switch direct I/O on (loop/dio %q): a buffered loop device caches every block twice", sd.loop, strings.TrimSpace(string(dio)))
	}
	o.logf("stable device: %s over %s (tmpfs, %d MiB, direct I/O)", sd.loop, sd.img, size>>20)
	return sd, nil
}

// fillFile writes size bytes of a pattern to path, so that every block of
// the loop device is backed by a page (a hole would read as zeroes without
// any copy).
func fillFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	for off := int64(0); off < size && err == nil; off += int64(len(buf)) {
		_, err = f.WriteAt(buf, off)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fill %s: %w", path, err)
	}
	return nil
}

// describe names the device for the tables.
func (sd *stableDev) describe() string {
	return fmt.Sprintf("%s: a loop device with direct I/O over a %d MiB file in a tmpfs of its own (%s); %s", sd.loop, sizeOf(sd.img)>>20, sd.dir, nullBlkStatus())
}

func sizeOf(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// close removes the loop device, the mount and its directory, and
// unregisters the exit handler.
func (sd *stableDev) close() error {
	if sd.undo != nil {
		sd.undo() // runs teardown once
		sd.undo = nil
		return sd.err
	}
	return sd.teardown()
}

// teardown detaches the loop device, unmounts the tmpfs (which frees the
// file's pages) and removes the directory; what is already gone is
// skipped.
func (sd *stableDev) teardown() error {
	var errs []error
	if sd.loop != "" {
		if out, err := exec.Command("losetup", "--detach", sd.loop).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup --detach %s: %v: %s", sd.loop, err, strings.TrimSpace(string(out))))
		} else {
			sd.loop = ""
		}
	}
	if sd.mounted {
		// The loop device lets go of its file asynchronously: a busy
		// mount is detached lazily and goes when the last reference does.
		if err := unix.Unmount(sd.dir, 0); err != nil {
			if err2 := unix.Unmount(sd.dir, unix.MNT_DETACH); err2 != nil {
				errs = append(errs, fmt.Errorf("umount %s: %v", sd.dir, err))
			} else {
				sd.mounted = false
			}
		} else {
			sd.mounted = false
		}
	}
	if !sd.mounted {
		if err := os.Remove(sd.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	sd.err = errors.Join(errs...)
	return sd.err
}
