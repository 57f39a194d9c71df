package atomicrel

import (
	"strings"
	"testing"

	"github.com/hcomm-go/hcomm/internal/objdump"
)

// TestReleaseStoreDisassembly holds the release stores, as built for each
// architecture (without -race), to the instruction the package comment
// promises: one STLR of the store's width on arm64, one plain MOV on amd64,
// and nothing else that touches memory through the pointer.
func TestReleaseStoreDisassembly(t *testing.T) {
	tests := []struct {
		arch string
		want map[string]string // function -> its one store through p
	}{
		// STLR W1, [X0] and STLR X1, [X0].
		{"arm64", map[string]string{"StoreUint32": "889ffc01", "StoreUint64": "c89ffc01"}},
		{"amd64", map[string]string{"StoreUint32": "MOVL BX, 0(AX)", "StoreUint64": "MOVQ BX, 0(AX)"}},
	}
	for _, tc := range tests {
		t.Run(tc.arch, func(t *testing.T) {
			reg := map[string]string{"arm64": "(R0)", "amd64": "(AX)"}[tc.arch]
			funcs := objdump.Funcs(t, tc.arch, ".", `^github.com/hcomm-go/hcomm/internal/atomicrel\.Store`)
			for name, want := range tc.want {
				insts, ok := funcs[name]
				if !ok {
					t.Errorf("no assembly function %s in the binary", name)
					continue
				}
				var stores []objdump.Inst
				for _, in := range insts {
					if strings.Contains(in.Asm, reg) {
						stores = append(stores, in)
					}
				}
				got := ""
				if len(stores) == 1 {
					got = stores[0].Word
					if tc.arch == "amd64" {
						got = stores[0].Asm
					}
				}
				if got != want {
					t.Errorf("%s: want exactly one access through p, %s:\n%s", name, want, objdump.Format(insts))
				}
			}
		})
	}
}
