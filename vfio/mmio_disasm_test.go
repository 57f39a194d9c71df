package vfio

import (
	"regexp"
	"testing"

	"github.com/hcomm-go/hcomm/internal/objdump"
)

// TestMMIODisassembly holds the MMIO accessors, as built for each
// architecture, to what mmio_*.s promise: exactly one access to the device
// address, of the accessor's width, and on arm64 Linux's readl/writel
// barriers around it (DMB OSHST before a store, DMB OSHLD after a load)
// and no other barrier. It reads the instructions of the package's test
// binary cross-built for the architecture (go test -c, go tool objdump).
func TestMMIODisassembly(t *testing.T) {
	const (
		dmbOSHLD = "d50331bf"
		dmbOSHST = "d50332bf"
	)
	type want struct {
		access  string // the device access: arm64 its encoding, amd64 its Go assembly
		barrier string // arm64: the DMB's encoding; "" none
		after   bool   // the barrier follows the access (a read) instead of preceding it
	}
	tests := []struct {
		arch      string
		device    *regexp.Regexp // an instruction that addresses the device pointer
		barrierRe *regexp.Regexp
		funcs     map[string]want
	}{
		{"arm64", regexp.MustCompile(`\(R0\)`), regexp.MustCompile(`^(DMB|DSB|ISB|LDAR|STLR)`), map[string]want{
			"mmioRead8":   {"39400001", dmbOSHLD, true},  // LDRB W1, [X0]
			"mmioRead16":  {"79400001", dmbOSHLD, true},  // LDRH W1, [X0]
			"mmioRead32":  {"b9400001", dmbOSHLD, true},  // LDR W1, [X0]
			"mmioRead64":  {"f9400001", dmbOSHLD, true},  // LDR X1, [X0]
			"mmioWrite8":  {"39000001", dmbOSHST, false}, // STRB W1, [X0]
			"mmioWrite16": {"79000001", dmbOSHST, false}, // STRH W1, [X0]
			"mmioWrite32": {"b9000001", dmbOSHST, false}, // STR W1, [X0]
			"mmioWrite64": {"f9000001", dmbOSHST, false}, // STR X1, [X0]
		}},
		{"amd64", regexp.MustCompile(`\(AX\)`), regexp.MustCompile(`^(MFENCE|SFENCE|LFENCE|LOCK|XCHG)`), map[string]want{
			"mmioRead8":   {"MOVB 0(AX), BL", "", false},
			"mmioRead16":  {"MOVW 0(AX), BX", "", false},
			"mmioRead32":  {"MOVL 0(AX), BX", "", false},
			"mmioRead64":  {"MOVQ 0(AX), BX", "", false},
			"mmioWrite8":  {"MOVB BL, 0(AX)", "", false},
			"mmioWrite16": {"MOVW BX, 0(AX)", "", false},
			"mmioWrite32": {"MOVL BX, 0(AX)", "", false},
			"mmioWrite64": {"MOVQ BX, 0(AX)", "", false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.arch, func(t *testing.T) {
			funcs := objdump.Funcs(t, tc.arch, ".", `^github.com/hcomm-go/hcomm/vfio\.(mmio|DMAReadBarrier)`)
			// DMAReadBarrier: on arm64 one DMB OSHLD and nothing else, on
			// amd64 no instruction but RET.
			wantDMA := map[string][]string{"arm64": {dmbOSHLD, "d65f03c0"}, "amd64": {"c3"}}[tc.arch]
			if got := funcs["DMAReadBarrier"]; len(got) != len(wantDMA) || got[0].Word != wantDMA[0] {
				t.Errorf("%s DMAReadBarrier, want %v:\n%s", tc.arch, wantDMA, objdump.Format(got))
			}
			for name, w := range tc.funcs {
				insts, ok := funcs[name]
				if !ok {
					t.Errorf("%s: no assembly function %s in the binary", tc.arch, name)
					continue
				}
				access, barriers := -1, 0
				for i, in := range insts {
					if tc.device.MatchString(in.Asm) {
						if access >= 0 {
							t.Errorf("%s %s: a second access to the device address:\n%s", tc.arch, name, objdump.Format(insts))
						}
						access = i
					}
					if tc.barrierRe.MatchString(in.Asm) {
						barriers++
					}
				}
				if access < 0 {
					t.Errorf("%s %s: no access to the device address:\n%s", tc.arch, name, objdump.Format(insts))
					continue
				}
				got := insts[access].Word
				if tc.arch == "amd64" {
					got = insts[access].Asm
				}
				if got != w.access {
					t.Errorf("%s %s: device access %s, want %s:\n%s", tc.arch, name, insts[access], w.access, objdump.Format(insts))
				}
				wantBarriers := 0
				if w.barrier != "" {
					wantBarriers = 1
					at := access - 1
					if w.after {
						at = access + 1
					}
					if at < 0 || at >= len(insts) || insts[at].Word != w.barrier {
						t.Errorf("%s %s: want barrier %s right %s the access:\n%s", tc.arch, name, w.barrier,
							map[bool]string{true: "after", false: "before"}[w.after], objdump.Format(insts))
					}
				}
				if barriers != wantBarriers {
					t.Errorf("%s %s: %d barriers, want %d:\n%s", tc.arch, name, barriers, wantBarriers, objdump.Format(insts))
				}
			}
		})
	}
}
