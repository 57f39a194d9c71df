package trace

import (
	"os"
	"testing"

	"github.com/cilium/ebpf/btf"
)

// TestBTFEnumValueMatchesDecoder compares the raw scan with cilium/ebpf's
// full decoding of the kernel's BTF, for several enumerators.
func TestBTFEnumValueMatchesDecoder(t *testing.T) {
	raw, err := os.ReadFile("/sys/kernel/btf/vmlinux")
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	kspec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	names := map[string]bool{"REQ_F_BUF_NODE_BIT": true, "REQ_F_FIXED_FILE_BIT": true, "BPF_MAP_TYPE_TASK_STORAGE": true, "TASK_COMM_LEN": true}
	for typ, err := range kspec.All() {
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := typ.(*btf.Enum); ok {
			for _, v := range e.Values {
				if names[v.Name] {
					if _, seen := want[v.Name]; !seen {
						want[v.Name] = int64(v.Value)
					}
				}
			}
		}
	}
	if len(want) < 2 {
		t.Fatalf("the decoder found only %v", want)
	}
	for name, v := range want {
		got, ok := btfEnumValue(raw, name)
		if !ok || got != v {
			t.Errorf("%s = %d (found %v), decoder says %d", name, got, ok, v)
		}
	}
	if _, ok := btfEnumValue(raw, "NO_SUCH_ENUMERATOR_HCOMM"); ok {
		t.Error("found an enumerator that does not exist")
	}
	for _, bad := range [][]byte{nil, raw[:30], append([]byte{0, 0}, raw[2:100]...)} {
		if _, ok := btfEnumValue(bad, "REQ_F_BUF_NODE_BIT"); ok {
			t.Error("found a value in truncated or foreign data")
		}
	}
}
