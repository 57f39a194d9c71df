package trace

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

// Where a tracepoint's arguments changed between kernels, the tracer picks
// the program by the kernel's form of it.
func TestProbeFits(t *testing.T) {
	var (
		data  = btf.FuncParam{Name: "__data", Type: &btf.Pointer{Target: &btf.Void{}}}
		ptrTo = func(name string) btf.FuncParam {
			return btf.FuncParam{Type: &btf.Pointer{Target: &btf.Struct{Name: name}}}
		}
		u64 = btf.FuncParam{Type: &btf.Int{Name: "u64", Size: 8}}
		s32 = btf.FuncParam{Type: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}}
		u32 = btf.FuncParam{Type: &btf.Typedef{Name: "u32", Type: &btf.Int{Name: "unsigned int", Size: 4}}}
	)
	cqeForm := &btf.FuncProto{Params: []btf.FuncParam{data, ptrTo("io_ring_ctx"), ptrTo("io_kiocb"), ptrTo("io_uring_cqe")}}
	argsForm := &btf.FuncProto{Params: []btf.FuncParam{data, ptrTo("io_ring_ctx"), ptrTo("io_kiocb"), u64, s32, u32, u64, u64}}
	submitForm := &btf.FuncProto{Params: []btf.FuncParam{data, ptrTo("io_kiocb"), {Type: &btf.Int{Name: "_Bool", Size: 1, Encoding: btf.Bool}}}}
	fits := map[string]func(*btf.FuncProto) bool{}
	for _, p := range probes {
		if p.fits != nil {
			fits[p.prog] = p.fits
		}
	}
	for _, tt := range []struct {
		prog  string
		proto *btf.FuncProto
		want  bool
	}{
		{"uring_complete", cqeForm, true},
		{"uring_complete", argsForm, false},
		{"uring_complete_args", argsForm, true},
		{"uring_complete_args", cqeForm, false},
		{"uring_submit", submitForm, true},
		{"uring_submit", cqeForm, false},
		{"uring_submit", &btf.FuncProto{Params: []btf.FuncParam{data}}, false},
	} {
		if got := fits[tt.prog](tt.proto); got != tt.want {
			t.Errorf("%s fits %v = %v, want %v", tt.prog, tt.proto, got, tt.want)
		}
	}
}

// On this kernel exactly one io_uring_complete program fits.
func TestProbeFitsKernel(t *testing.T) {
	kspec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	n := 0
	for _, p := range probes {
		if p.tracepoint != "io_uring_complete" {
			continue
		}
		fp, err := tracepointProto(kspec, p.tracepoint)
		if err != nil {
			t.Skipf("kernel without io_uring tracepoints: %v", err)
		}
		if p.fits(fp) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d io_uring_complete programs fit this kernel, want 1", n)
	}
}
