package trace

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/hcomm-go/hcomm/bpf"
)

// Options configure a Tracer.
type Options struct {
	// Hooks are the engine hook symbols; zero means DefaultHooks.
	Hooks Hooks
	// Executables are extra binaries to probe for the hooks (the traced
	// command's or process's own executable is always probed).
	Executables []string
	// OnEvent, if set, receives ring-buffer events (engine batches, execs)
	// from the reader goroutine.
	OnEvent func(Event)
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// Filter selects the calls the syscall table counts (default: all).
	Filter Filter
	// By breaks the syscall table down per process or per thread
	// (Snapshot.Tasks); the default is one table for everything traced.
	By Breakdown
}

// Filter selects the system calls the syscall table (and its per-task
// breakdown) counts; copies, io_uring, page faults and the engine are
// counted whatever it says. The filter runs in the kernel.
type Filter struct {
	// Syscalls, if not empty, are the only syscall names counted (as
	// SyscallName spells them; see ParseSyscalls).
	Syscalls []string
	// Failed counts only calls that returned an error.
	Failed bool
	// Errno, if not 0, counts only calls that failed with it.
	Errno unix.Errno
}

// IsZero reports whether f selects every call.
func (f Filter) IsZero() bool { return len(f.Syscalls) == 0 && !f.Failed && f.Errno == 0 }

// Breakdown says how the syscall table is split.
type Breakdown int

// Breakdowns.
const (
	ByNone    Breakdown = 0
	ByProcess Breakdown = bpf.ByProcess // per thread group
	ByThread  Breakdown = bpf.ByThread  // per thread
)

func (b Breakdown) String() string {
	switch b {
	case ByProcess:
		return "process"
	case ByThread:
		return "thread"
	}
	return ""
}

// EventType tells ring-buffer events apart.
type EventType uint32

// Event types.
const (
	EventEngineSubmit EventType = bpf.EventEngineSubmit
	EventEngineReap   EventType = bpf.EventEngineReap
	EventExec         EventType = bpf.EventExec
)

// Event is one ring-buffer record: an engine batch (Count transfers, Bytes,
// Aux = path for a submit, errors for a reap) or an exec inside the traced set.
type Event struct {
	Type      EventType
	MonoNs    uint64 // CLOCK_MONOTONIC, ns
	PID, TGID int
	Count     uint32
	Bytes     uint64
	Aux       uint32
	Comm      string
	File      string
}

// Exec records a program started inside the traced set.
type Exec struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	File string `json:"file"`
}

// EngineStatus says whether engine hooks were found and attached.
type EngineStatus struct {
	Present  bool     // at least the submit hook is attached
	Binaries []string // binaries whose hooks are attached
	Reason   string   // why not (or which binaries lack them)
}

// Tracer owns the loaded programs and their attachments.
type Tracer struct {
	coll        *ebpf.Collection
	links       []link.Link
	rd          *ringbuf.Reader
	engine      EngineStatus
	unavailable []string
	log         *slog.Logger
	onEvent     func(Event)
	by          Breakdown
	start       time.Time
	wg          sync.WaitGroup

	mu    sync.Mutex
	execs []Exec
}

// probe is one tracepoint program: the program's name in the object, the
// tracepoint (tp_btf target) it attaches to, and whether the tracer fails
// without it (the others are reported as unavailable). oldName is the
// tracepoint's name in older kernels, tried when the kernel lacks tracepoint.
// fits, when set, says whether the kernel's tracepoint passes the arguments
// the program reads: where a tracepoint's arguments changed between kernels,
// the object has one program per form and the tracer loads the one that fits.
type probe struct {
	prog, tracepoint string
	required         bool
	oldName          string
	fits             func(*btf.FuncProto) bool
}

var probes = []probe{
	{prog: "sys_enter", tracepoint: "sys_enter", required: true},
	{prog: "sys_exit", tracepoint: "sys_exit", required: true},
	{prog: "uring_create", tracepoint: "io_uring_create"},
	// io_uring_submit_sqe(struct io_kiocb *req, bool force_nonblock) in
	// older kernels (the VM tests' 6.1 guest); the program reads req only.
	{prog: "uring_submit", tracepoint: "io_uring_submit_req", oldName: "io_uring_submit_sqe",
		fits: func(fp *btf.FuncProto) bool { return paramIsStructPtr(fp, 1, "io_kiocb") }},
	// io_uring_complete(ctx, req, struct io_uring_cqe *cqe) now;
	// (ctx, req, user_data, res, cflags, extra1, extra2) in older kernels.
	{prog: "uring_complete", tracepoint: "io_uring_complete",
		fits: func(fp *btf.FuncProto) bool { return paramIsStructPtr(fp, 3, "io_uring_cqe") }},
	{prog: "uring_complete_args", tracepoint: "io_uring_complete",
		fits: func(fp *btf.FuncProto) bool { return len(fp.Params) >= 6 && paramIsInt(fp, 3) && paramIsInt(fp, 4) }},
	{prog: "page_fault_user", tracepoint: "page_fault_user"},
	{prog: "process_exec", tracepoint: "sched_process_exec"},
	{prog: "process_fork", tracepoint: "sched_process_fork"},
}

// target selects what the programs count: a thread group or a cgroup.
type target struct {
	pid    int
	cgroup *Cgroup
}

// newTracer loads the programs filtered to tg, attaches them and the engine
// uprobes on executables, and starts the ring-buffer reader.
func newTracer(tg target, opts Options, executables []string) (*Tracer, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("trace: the programs are built for amd64 and arm64, this is %s: %w", runtime.GOARCH, ErrNotSupported)
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	if opts.Hooks == (Hooks{}) {
		opts.Hooks = DefaultHooks
	}
	t := &Tracer{log: opts.Logger, onEvent: opts.OnEvent, by: opts.By}
	if t.log == nil {
		t.log = slog.Default()
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("trace: raise RLIMIT_MEMLOCK for BPF maps: %w", err)
	}
	spec, err := bpf.Spec()
	if err != nil {
		return nil, fmt.Errorf("trace: parse embedded BPF object: %w", err)
	}
	kspec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("trace: kernel BTF (/sys/kernel/btf/vmlinux): %w (%w)", ErrNotSupported, err)
	}
	if err := t.dropMissingTracepoints(spec, kspec); err != nil {
		return nil, err
	}
	if err := t.configure(spec, kspec, tg, opts); err != nil {
		return nil, err
	}
	if err := t.load(spec, kspec, tg); err != nil {
		return nil, err
	}
	if err := t.attachTracepoints(); err != nil {
		t.Close()
		return nil, err
	}
	t.attachEngine(tg, opts.Hooks, executables)
	if err := t.startReader(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// dropMissingTracepoints removes from spec the programs whose tracepoint
// the kernel lacks or whose arguments do not fit the kernel's form of it,
// and points programs at a tracepoint's older name where that is the one the
// kernel has.
func (t *Tracer) dropMissingTracepoints(spec *ebpf.CollectionSpec, kspec *btf.Spec) error {
	fitted, misfit := map[string]bool{}, map[string]bool{}
	for _, p := range probes {
		name := p.tracepoint
		proto, err := tracepointProto(kspec, name)
		if err != nil && p.oldName != "" {
			if op, oerr := tracepointProto(kspec, p.oldName); oerr == nil {
				name, proto, err = p.oldName, op, nil
			}
		}
		switch {
		case err != nil:
			if p.required {
				return fmt.Errorf("trace: kernel has no tracepoint %s: %w (%w)", p.tracepoint, ErrNotSupported, err)
			}
			t.unavailable = append(t.unavailable, p.tracepoint+": not in this kernel")
			delete(spec.Programs, p.prog)
		case p.fits != nil && !p.fits(proto):
			misfit[p.tracepoint] = true
			delete(spec.Programs, p.prog)
		default:
			fitted[p.tracepoint] = true
			spec.Programs[p.prog].AttachTo = name
		}
	}
	for tp := range misfit {
		if !fitted[tp] {
			t.unavailable = append(t.unavailable, tp+": this kernel passes arguments the tracer does not know")
		}
	}
	return nil
}

// tracepointProto returns the function prototype of tracepoint tp from the
// kernel's BTF (btf_trace_<tp> points to it; parameter 0 is the tracepoint's
// private data, the tracepoint's own arguments follow).
func tracepointProto(kspec *btf.Spec, tp string) (*btf.FuncProto, error) {
	typ, err := kspec.AnyTypeByName("btf_trace_" + tp)
	if err != nil {
		return nil, err
	}
	if ptr, ok := btf.UnderlyingType(typ).(*btf.Pointer); ok {
		if fp, ok := btf.UnderlyingType(ptr.Target).(*btf.FuncProto); ok {
			return fp, nil
		}
	}
	return nil, fmt.Errorf("btf_trace_%s is %v, not a pointer to a function prototype", tp, typ)
}

// paramIsStructPtr reports whether parameter i of fp points to struct name.
func paramIsStructPtr(fp *btf.FuncProto, i int, name string) bool {
	if i >= len(fp.Params) {
		return false
	}
	ptr, ok := btf.UnderlyingType(fp.Params[i].Type).(*btf.Pointer)
	if !ok {
		return false
	}
	st, ok := btf.UnderlyingType(ptr.Target).(*btf.Struct)
	return ok && st.Name == name
}

// paramIsInt reports whether parameter i of fp is an integer.
func paramIsInt(fp *btf.FuncProto, i int) bool {
	if i >= len(fp.Params) {
		return false
	}
	_, ok := btf.UnderlyingType(fp.Params[i].Type).(*btf.Int)
	return ok
}

// configure sets the programs' read-only variables: the filter (cgroup or
// thread group, with the PID namespace when it is not the initial one),
// counting from the command's exec, the syscall filter, the per-task
// breakdown and the kernel's REQ_F_BUF_NODE bit.
func (t *Tracer) configure(spec *ebpf.CollectionSpec, kspec *btf.Spec, tg target, opts Options) error {
	vars := map[string]any{"req_f_buf_node": reqFBufNode(), "by_task": uint32(opts.By)}
	if tg.cgroup != nil {
		vars["filter_mode"] = uint32(bpf.FilterCgroup)
		if spec.Programs["process_exec"] != nil && spec.Programs["process_fork"] != nil {
			vars["arm_on_exec"] = uint32(1)
		} else {
			t.unavailable = append(t.unavailable, "counting from the command's execve (needs sched_process_exec and sched_process_fork): the launcher's calls before it are counted too")
		}
	} else {
		vars["filter_mode"] = uint32(bpf.FilterTGID)
		vars["target_tgid"] = uint32(tg.pid)
		dev, ino, init, err := pidNamespace()
		if err != nil {
			return err
		}
		if !init {
			vars["pidns_dev"], vars["pidns_ino"] = dev, ino
		}
	}
	if err := filterVars(opts.Filter, vars); err != nil {
		return err
	}
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("trace: BPF object lacks variable %s", name)
		}
		if err := vs.Set(vars[name]); err != nil {
			return fmt.Errorf("trace: set BPF variable %s: %w", name, err)
		}
	}
	return nil
}

// filterVars translates f into the sys_filter, syscall_set and
// filter_errno variables.
func filterVars(f Filter, vars map[string]any) error {
	var mode uint32
	if len(f.Syscalls) > 0 {
		nrs, err := ParseSyscalls(f.Syscalls)
		if err != nil {
			return err
		}
		var set [bpf.MaxSyscalls / 64]uint64
		for _, nr := range nrs {
			set[nr/64] |= 1 << (nr % 64)
		}
		mode |= bpf.SysFilterNames
		vars["syscall_set"] = set
	}
	if f.Failed {
		mode |= bpf.SysFilterFailed
	}
	if f.Errno != 0 {
		mode |= bpf.SysFilterErrno
		vars["filter_errno"] = int64(f.Errno)
	}
	vars["sys_filter"] = mode
	return nil
}

// load creates the maps and programs in the kernel and, for a cgroup
// target, stores the cgroup in the filter map.
func (t *Tracer) load(spec *ebpf.CollectionSpec, kspec *btf.Spec, tg target) error {
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{KernelTypes: kspec},
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("trace: load BPF programs (verifier): %+v", ve)
		}
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: load BPF programs: %w", ErrNotPrivileged, err)
		}
		return fmt.Errorf("trace: load BPF programs: %w", err)
	}
	t.coll = coll
	if tg.cgroup != nil {
		if err := coll.Maps["cgroup_map"].Put(uint32(0), uint32(tg.cgroup.FD())); err != nil {
			t.Close()
			return fmt.Errorf("trace: store cgroup %s in the filter map: %w", tg.cgroup.Path, err)
		}
	}
	return nil
}

// attachTracepoints attaches every loaded tracepoint program; an optional
// one that fails is recorded as unavailable.
func (t *Tracer) attachTracepoints() error {
	for _, p := range probes {
		prog := t.coll.Programs[p.prog]
		if prog == nil {
			continue
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			if p.required {
				return fmt.Errorf("trace: attach %s to tracepoint %s: %w", p.prog, p.tracepoint, err)
			}
			t.unavailable = append(t.unavailable, fmt.Sprintf("%s: %v", p.tracepoint, err))
			continue
		}
		t.links = append(t.links, l)
	}
	return nil
}

// startReader opens the event ring buffer and starts its reader goroutine.
func (t *Tracer) startReader() error {
	rd, err := ringbuf.NewReader(t.coll.Maps["events"])
	if err != nil {
		return fmt.Errorf("trace: open event ring buffer: %w", err)
	}
	t.rd = rd
	t.start = time.Now()
	t.wg.Add(1)
	go t.readEvents()
	return nil
}

// pidNamespace returns the device and inode of this process's PID namespace
// and whether it is the initial one (where BPF's tgid is the PID we see).
func pidNamespace() (dev, ino uint64, initial bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, 0, false, fmt.Errorf("stat /proc/self/ns/pid: %w", err)
	}
	const procPidInitIno = 0xEFFFFFFC
	return uint64(st.Dev), st.Ino, st.Ino == procPidInitIno, nil
}

// attachEngine puts entry uprobes on the hook symbols of each executable.
func (t *Tracer) attachEngine(tg target, hooks Hooks, executables []string) {
	var reasons []string
	seen := map[string]bool{}
	for _, path := range executables {
		if path == "" || seen[path] {
			continue
		}
		seen[path] = true
		has, err := elfSymbols(path, hooks.SubmitBatch, hooks.ReapBatch)
		if err != nil {
			// The reason is read by people: the sentinel's text stays out.
			reasons = append(reasons, fmt.Sprintf("%s: %s", path, strings.TrimPrefix(err.Error(), ErrEngineAbsent.Error()+": ")))
			continue
		}
		if !has[hooks.SubmitBatch] {
			reasons = append(reasons, fmt.Sprintf("%s: no symbol %s", path, hooks.SubmitBatch))
			continue
		}
		ex, err := link.OpenExecutable(path)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		opts := &link.UprobeOptions{PID: tg.pid} // 0 (any) for a cgroup: the BPF filter decides
		l, err := ex.Uprobe(hooks.SubmitBatch, t.coll.Programs["engine_submit"], opts)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: uprobe %s: %v", path, hooks.SubmitBatch, err))
			continue
		}
		t.links = append(t.links, l)
		if has[hooks.ReapBatch] {
			l, err := ex.Uprobe(hooks.ReapBatch, t.coll.Programs["engine_reap"], opts)
			if err != nil {
				reasons = append(reasons, fmt.Sprintf("%s: uprobe %s: %v", path, hooks.ReapBatch, err))
			} else {
				t.links = append(t.links, l)
			}
		} else {
			reasons = append(reasons, fmt.Sprintf("%s: no symbol %s (reaps not counted)", path, hooks.ReapBatch))
		}
		t.engine.Binaries = append(t.engine.Binaries, path)
	}
	t.engine.Present = len(t.engine.Binaries) > 0
	if len(executables) == 0 {
		reasons = append(reasons, "no executable to probe")
	}
	t.engine.Reason = strings.Join(reasons, "; ")
	if !t.engine.Present {
		t.log.Debug("engine hooks absent", "reason", t.engine.Reason)
	}
}

// notELF explains why path cannot carry the hook symbols: a script (its
// interpreter runs the code) or some other non-ELF file.
func notELF(path string) error {
	b := make([]byte, 2)
	if f, err := os.Open(path); err == nil {
		_, _ = io.ReadFull(f, b)
		f.Close()
	}
	if string(b) == "#!" {
		return fmt.Errorf("%w: a script, not an ELF executable (name the program it runs with --engine-binary)", ErrEngineAbsent)
	}
	return fmt.Errorf("%w: not an ELF executable", ErrEngineAbsent)
}

// elfSymbols reports which of names the ELF file's symbol table defines.
func elfSymbols(path string, names ...string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, notELF(path)
		}
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		if errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("%w: no symbol table (stripped binary?)", ErrEngineAbsent)
		}
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	has := map[string]bool{}
	for _, s := range syms {
		if want[s.Name] && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			has[s.Name] = true
		}
	}
	return has, nil
}

func (t *Tracer) readEvents() {
	defer t.wg.Done()
	var rec ringbuf.Record
	for {
		if err := t.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, ringbuf.ErrFlushed) || errors.Is(err, os.ErrClosed) {
				return
			}
			t.log.Warn("ring buffer read", "err", err)
			return
		}
		var raw bpf.Event
		if len(rec.RawSample) < binarySize(raw) {
			continue
		}
		copy(bytesOf(&raw), rec.RawSample)
		ev := Event{
			Type: EventType(raw.Type), MonoNs: raw.Ts, PID: int(raw.Pid), TGID: int(raw.Tgid),
			Count: raw.Count, Bytes: raw.Bytes, Aux: raw.Aux,
			Comm: cstring(raw.Comm[:]), File: cstring(raw.File[:]),
		}
		if ev.Type == EventExec {
			t.mu.Lock()
			t.execs = append(t.execs, Exec{PID: ev.PID, Comm: ev.Comm, File: ev.File})
			t.mu.Unlock()
		}
		if t.onEvent != nil {
			t.onEvent(ev)
		}
	}
}

// Engine reports whether the engine hooks are attached.
func (t *Tracer) Engine() EngineStatus { return t.engine }

// Unavailable lists optional probes that could not be attached, with reasons.
func (t *Tracer) Unavailable() []string { return append([]string(nil), t.unavailable...) }

// Execs returns the programs exec'd inside the traced set so far.
func (t *Tracer) Execs() []Exec {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Exec(nil), t.execs...)
}

// Started is when the probes were attached.
func (t *Tracer) Started() time.Time { return t.start }

// Snapshot reads every counter map and sums the per-CPU values.
func (t *Tracer) Snapshot() (*Snapshot, error) {
	s := &Snapshot{Taken: time.Now()}
	for _, r := range []func() error{
		func() error { return readPerCPU(t.coll.Maps["sys_stats"], s.Syscalls[:]) },
		func() error { return readMinMax(t.coll.Maps["sys_minmax"], s.MinMax[:]) },
		func() error { return readPerCPU(t.coll.Maps["copy_stats"], s.Copy[:]) },
		func() error { return readPerCPU(t.coll.Maps["uring_stats"], s.URing[:]) },
		func() error { return readPerCPU(t.coll.Maps["fault_stats"], unsafeOne(&s.Faults)) },
		func() error { return readPerCPU(t.coll.Maps["engine_stats"], unsafeOne(&s.Engine)) },
		func() error { return readPerCPU(t.coll.Maps["misc_stats"], unsafeOne(&s.Misc)) },
		func() (err error) { s.Tasks, err = t.readTasks(); return err },
	} {
		if err := r(); err != nil {
			return nil, err
		}
	}
	stats, err := t.ProgramStats()
	if err != nil {
		return nil, err
	}
	for _, st := range stats {
		s.ProgramMisses += st.RecursionMisses
	}
	return s, nil
}

func unsafeOne[T any](p *T) []T { return unsafeSlice(p, 1) }

// readPerCPU fills out[i] with the sum over CPUs of key i.
func readPerCPU[T any](m *ebpf.Map, out []T) error {
	var vals []T
	for i := range out {
		if err := m.Lookup(uint32(i), &vals); err != nil {
			return fmt.Errorf("trace: read map %s[%d]: %w", m.String(), i, err)
		}
		var zero T
		out[i] = zero
		for j := range vals {
			addWords(&out[i], &vals[j])
		}
	}
	return nil
}

// readMinMax fills out[i] with the minimum (of the non-zero) and maximum
// over CPUs of key i.
func readMinMax(m *ebpf.Map, out []bpf.SysMinmax) error {
	var vals []bpf.SysMinmax
	for i := range out {
		if err := m.Lookup(uint32(i), &vals); err != nil {
			return fmt.Errorf("trace: read map %s[%d]: %w", m.String(), i, err)
		}
		out[i] = bpf.SysMinmax{}
		for _, v := range vals {
			if v.MinNs != 0 && (out[i].MinNs == 0 || v.MinNs < out[i].MinNs) {
				out[i].MinNs = v.MinNs
			}
			out[i].MaxNs = max(out[i].MaxNs, v.MaxNs)
		}
	}
	return nil
}

// readTasks reads the per-task breakdown, ordered by task then syscall;
// nil when it is off.
func (t *Tracer) readTasks() ([]TaskCount, error) {
	if t.by == ByNone {
		return nil, nil
	}
	var (
		k    bpf.TaskKey
		v    bpf.TaskStat
		rows []TaskCount
	)
	it := t.coll.Maps["task_sys"].Iterate()
	for it.Next(&k, &v) {
		rows = append(rows, TaskCount{
			ID: int(k.Id), TGID: int(v.Tgid), Comm: cstring(v.Comm[:]), Nr: int(k.Nr),
			Count: v.Count, Errors: v.Errors, TotalNs: v.TotalNs,
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("trace: read map task_sys: %w", err)
	}
	slices.SortFunc(rows, compareTasks)
	return rows, nil
}

// Close detaches every probe, drains the ring buffer and frees the maps.
// Idempotent.
func (t *Tracer) Close() error {
	for _, l := range t.links {
		l.Close()
	}
	t.links = nil
	if t.rd != nil {
		// Deliver what is already in the ring, then stop the reader.
		if err := t.rd.Flush(); err != nil {
			t.rd.Close()
		}
		t.wg.Wait()
		t.rd.Close()
		t.rd = nil
	}
	if t.coll != nil {
		t.coll.Close()
		t.coll = nil
	}
	return nil
}

// ProgramStats returns the kernel's statistics of each loaded program:
// recursion misses always (runs skipped because the program was already
// running on that CPU), run count and run time only while statistics are
// enabled (ebpf.EnableStats, as the overhead benchmarks do).
func (t *Tracer) ProgramStats() (map[string]ebpf.ProgramStats, error) {
	out := map[string]ebpf.ProgramStats{}
	for name, p := range t.coll.Programs {
		st, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("stats of program %s: %w", name, err)
		}
		out[name] = *st
	}
	return out, nil
}
