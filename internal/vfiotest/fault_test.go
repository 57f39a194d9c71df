package vfiotest

import (
	"strings"
	"testing"
)

// Records as /dev/kmsg returns them: one per read, "prefix;text\n", with
// the tab of the SMMUv3 driver's word lines escaped.
const (
	smmuHdr = "6,1201,14468526,-;arm-smmu-v3 9050000.smmuv3: event 0x10 received:\n"
	smmuW0  = "6,1202,14469191,-;arm-smmu-v3 9050000.smmuv3: \\x090x0000000800000010\n"
	smmuW1  = "6,1203,14469499,-;arm-smmu-v3 9050000.smmuv3: \\x090x0000000800000000\n"
	smmuW3  = "6,1205,14470031,-;arm-smmu-v3 9050000.smmuv3: \\x090x0000000000000000\n"
)

func smmuWord2(addr string) string {
	return "6,1204,14469784,-;arm-smmu-v3 9050000.smmuv3: \\x090x" + addr + "\n"
}

func TestFaultLogMatch(t *testing.T) {
	const edu = 0x0008 // 00:01.0
	cases := []struct {
		name string
		recs []string
		bdf  uint16
		page uint64
		want string // substring of the summary; "" for no match
	}{
		{"smmu read fault", []string{smmuHdr, smmuW0, smmuW1, smmuWord2("0000000000400000"), smmuW3}, edu, 0x400000,
			"event 0x10 (F_TRANSLATION), stream ID 0x8 (00:01.0), read, input address 0x400000"},
		{"smmu inside the page", []string{smmuHdr, smmuW0, smmuW1, smmuWord2("0000000000400024"), smmuW3}, edu, 0x400000, "input address 0x400024"},
		{"smmu other page", []string{smmuHdr, smmuW0, smmuW1, smmuWord2("0000000000401000"), smmuW3}, edu, 0x400000, ""},
		{"smmu other device", []string{smmuHdr, smmuW0, smmuW1, smmuWord2("0000000000400000"), smmuW3}, 0x0020, 0x400000, ""},
		{"smmu words without header", []string{smmuW0, smmuW1, smmuWord2("0000000000400000"), smmuW3}, edu, 0x400000, ""},
		{"smmu raw tab", []string{smmuHdr, strings.Replace(smmuW0, `\x09`, "\t", 1), smmuW1, smmuWord2("0000000000400000"), smmuW3}, edu, 0x400000, "read"},
		{"vt-d", []string{"3,900,5000,-;DMAR: [DMA Read NO_PASID] Request device [00:01.0] fault addr 0x400000 [fault reason 0x06] PTE Read access is not set\n"}, edu, 0x400000,
			"DMAR: [DMA Read NO_PASID] Request device [00:01.0] fault addr 0x400000"},
		{"vt-d without 0x", []string{"3,900,5000,-;DMAR: [DMA Write] Request device [00:04.0] PASID ffffffff fault addr 402000 [fault reason 05] PTE Write access is not set\n"}, 0x0020, 0x402000, "fault addr 402000"},
		{"vt-d other device", []string{"3,900,5000,-;DMAR: [DMA Read NO_PASID] Request device [00:04.0] fault addr 0x400000 [fault reason 0x06]\n"}, edu, 0x400000, ""},
		{"unrelated", []string{"6,1,1,-;vfio-pci 0000:00:01.0: enabling device (0000 -> 0002)\n"}, edu, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &FaultLog{smmu: make([]uint64, 0, 4)}
			got := ""
			for _, r := range c.recs {
				if s, ok := l.match(r, c.bdf, c.page); ok {
					got = s
					break
				}
			}
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("match = %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseBDF(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint16
		ok   bool
	}{
		{"0000:00:01.0", 0x08, true}, {"0000:00:04.0", 0x20, true}, {"0000:3b:1f.7", 0x3bff, true},
		{"00:01.0", 0, false}, {"0000:00:20.0", 0, false}, {"0000:00:01.8", 0, false},
	} {
		got, err := parseBDF(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseBDF(%q) = %#x, %v; want %#x, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
