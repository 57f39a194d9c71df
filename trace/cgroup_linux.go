package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup is a cgroup v2 directory created for one traced command. Its file
// descriptor serves both to start the command inside it (clone3 with
// CLONE_INTO_CGROUP, so the command runs there from its first instruction)
// and as the in-kernel filter (a BPF_MAP_TYPE_CGROUP_ARRAY entry: tasks of
// the cgroup and of any cgroup below it are traced).
type Cgroup struct {
	Path string
	ID   uint64 // kernfs id (the directory's inode number), as bpf_get_current_cgroup_id returns
	fd   int
}

// Cgroup2Mount returns the mount point of the cgroup v2 hierarchy, from
// /proc/self/mountinfo. On hybrid systems it is usually /sys/fs/cgroup/unified.
func Cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoCgroup2, err)
	}
	defer f.Close()
	return parseCgroup2Mount(f)
}

// parseCgroup2Mount finds the first cgroup2 mount point in mountinfo text.
func parseCgroup2Mount(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		line := sc.Text()
		sep := strings.Index(line, " - ")
		if sep < 0 {
			continue
		}
		post := strings.Fields(line[sep+3:])
		pre := strings.Fields(line[:sep])
		if len(post) < 1 || len(pre) < 5 || post[0] != "cgroup2" {
			continue
		}
		return unescapeMount(pre[4]), nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%w: read mountinfo: %w", ErrNoCgroup2, err)
	}
	return "", fmt.Errorf("%w: no cgroup2 file system in /proc/self/mountinfo (mount one: mount -t cgroup2 none /sys/fs/cgroup/unified)", ErrNoCgroup2)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// NewCgroup creates a fresh cgroup named name (made unique: name-PID-N) at
// the root of the cgroup v2 hierarchy. It first removes the empty cgroups
// of that name that tracers which no longer run left behind (one killed
// with SIGKILL cannot remove its own).
func NewCgroup(name string) (*Cgroup, error) {
	mnt, err := Cgroup2Mount()
	if err != nil {
		return nil, err
	}
	RemoveStaleCgroups(mnt, name)
	var dir string
	for i := 0; ; i++ {
		dir = filepath.Join(mnt, fmt.Sprintf("%s-%d-%d", name, os.Getpid(), i))
		err = os.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		if errors.Is(err, os.ErrExist) && i < 100 {
			continue
		}
		return nil, fmt.Errorf("%w: create cgroup %s: %w", ErrNoCgroup2, dir, err)
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		os.Remove(dir)
		return nil, fmt.Errorf("stat cgroup %s: %w", dir, err)
	}
	return &Cgroup{Path: dir, ID: st.Ino, fd: fd}, nil
}

// RemoveStaleCgroups removes the cgroups name-PID-N under mnt whose PID is
// not a running process and that are empty, and returns their paths. A
// cgroup with processes inside is left alone (rmdir refuses it).
func RemoveStaleCgroups(mnt, name string) []string {
	entries, err := os.ReadDir(mnt)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), name+"-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // its tracer (or a process reusing its PID) runs
		}
		dir := filepath.Join(mnt, e.Name())
		if unix.Rmdir(dir) == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}

// FD is the open directory of the cgroup (for SysProcAttr.CgroupFD and the
// BPF cgroup array). It stays valid until Remove.
func (c *Cgroup) FD() int { return c.fd }

// Procs lists the processes currently in the cgroup.
func (c *Cgroup) Procs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Remove deletes the cgroup. Processes still inside (children the command
// left running) are moved to the parent cgroup first, so they keep running,
// untraced.
func (c *Cgroup) Remove() error {
	if c.fd < 0 {
		return nil
	}
	unix.Close(c.fd)
	c.fd = -1
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = unix.Rmdir(c.Path); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		// Exited processes leave the cgroup asynchronously after being
		// reaped; live ones are moved out.
		pids, _ := c.Procs()
		parent := filepath.Join(filepath.Dir(c.Path), "cgroup.procs")
		for _, p := range pids {
			_ = os.WriteFile(parent, []byte(strconv.Itoa(p)), 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", c.Path, err)
}
