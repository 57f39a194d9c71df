package vfiotest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FaultLog reads the IOMMU fault records the kernel logs (/dev/kmsg) after
// it was opened: Intel VT-d's one-line "DMAR: [DMA Read NO_PASID] Request
// device [00:01.0] fault addr 0x400000 …" and the Arm SMMUv3's five-line
// "arm-smmu-v3 …: event 0x10 received:" followed by the event's four
// 64-bit words (word 0: event type in bits 7:0, stream ID in bits 63:32;
// word 1: bit 35 set for a read; word 2: the input address).
//
// The kernel rate-limits both: the SMMUv3 driver prints at most 10 events
// per 5 s, and a device that faults on every 4-byte access of a refused
// transfer (QEMU splits an access the IOMMU refuses into 4-byte ones) uses
// them up at once. Find therefore matches any record of the page, not the
// exact address, and a test that provokes a second fault calls
// WaitRateLimit first.
type FaultLog struct {
	f   *os.File
	buf []byte
	// The SMMUv3 record being assembled: its event type and words so far
	// (inSMMU after a header until the fourth word).
	smmu      []uint64
	smmuEvent uint64
	inSMMU    bool
}

// OpenFaultLog opens /dev/kmsg at its end and closes it at cleanup.
func OpenFaultLog(t testing.TB) *FaultLog {
	t.Helper()
	f, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open /dev/kmsg: %v", err)
	}
	if _, err := f.Seek(0, 2); err != nil {
		f.Close()
		t.Fatalf("seek /dev/kmsg: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	// A read returns one record; a buffer smaller than the record is
	// EINVAL. The kernel's records are at most ~8 KiB with their
	// dictionary.
	return &FaultLog{f: f, buf: make([]byte, 16<<10), smmu: make([]uint64, 0, 4)}
}

// Find returns the first IOMMU fault record, logged since the last Find,
// for the page (4 KiB) of iova, caused by the PCI device at addr (e.g.
// "0000:00:01.0"), summarised in one line. The kernel logs from an
// interrupt thread, so Find waits for the record until ctx ends; it
// returns "" with ctx's error (or the read error) when there is none.
func (l *FaultLog) Find(ctx context.Context, addr string, iova uint64) (string, error) {
	bdf, err := parseBDF(addr)
	if err != nil {
		return "", err
	}
	if dl, ok := ctx.Deadline(); ok {
		if err := l.f.SetReadDeadline(dl); err != nil {
			return "", fmt.Errorf("/dev/kmsg read deadline: %w", err)
		}
	} else {
		return "", errors.New("FaultLog.Find needs a context with a deadline")
	}
	for {
		n, err := l.f.Read(l.buf)
		if err != nil {
			if errors.Is(err, syscall.EPIPE) {
				continue // records were overwritten before we read them: go on with the next
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return "", fmt.Errorf("no IOMMU fault record for IOVA page %#x from %s in the kernel log: %w", iova&^0xfff, addr, context.DeadlineExceeded)
			}
			return "", fmt.Errorf("read /dev/kmsg: %w", err)
		}
		if s, ok := l.match(string(l.buf[:n]), bdf, iova&^0xfff); ok {
			return s, nil
		}
	}
}

// RateLimitInterval is the kernel's printk rate-limit window for IOMMU
// fault records (DEFAULT_RATELIMIT_INTERVAL; burst 10).
const RateLimitInterval = 5 * time.Second

// WaitRateLimit sleeps until the kernel's rate-limit window that the faults
// found so far opened has closed, so that the next fault's records are
// printed: the window began at or before the first record Find read, and
// ends RateLimitInterval later (plus a few jiffies).
func (l *FaultLog) WaitRateLimit() {
	time.Sleep(RateLimitInterval + 50*time.Millisecond)
}

// match looks at one /dev/kmsg record ("level,seq,usec,flags;text\n").
func (l *FaultLog) match(rec string, bdf uint16, page uint64) (string, bool) {
	if i := strings.IndexByte(rec, ';'); i >= 0 {
		rec = rec[i+1:]
	}
	rec, _, _ = strings.Cut(rec, "\n")
	// Intel VT-d.
	if i := strings.Index(rec, "DMAR: "); i >= 0 {
		dev := fmt.Sprintf("[%02x:%02x.%d]", bdf>>8, bdf>>3&0x1f, bdf&7)
		if a, ok := after(rec, "fault addr "); ok && strings.Contains(rec, dev) && a&^0xfff == page {
			return rec[i:], true
		}
		return "", false
	}
	// Arm SMMUv3: the header, then one word per record ("\x090x…": kmsg
	// escapes the tab).
	if !strings.HasPrefix(rec, "arm-smmu-v3 ") {
		return "", false
	}
	if e, ok := after(rec, ": event "); ok && strings.HasSuffix(rec, " received:") {
		l.smmu, l.smmuEvent, l.inSMMU = l.smmu[:0], e, true
		return "", false
	}
	_, word, _ := strings.Cut(rec, ": ")
	word = strings.TrimPrefix(strings.TrimPrefix(word, `\x09`), "\t")
	w, ok := after(word, "0x")
	if !ok || !l.inSMMU || !strings.HasPrefix(word, "0x") {
		return "", false
	}
	l.smmu = append(l.smmu, w)
	if len(l.smmu) < 4 {
		return "", false
	}
	l.inSMMU = false
	ev := l.smmu
	if sid := ev[0] >> 32; sid != uint64(bdf) || ev[2]&^0xfff != page {
		return "", false
	}
	dir := "write"
	if ev[1]>>35&1 == 1 {
		dir = "read"
	}
	return fmt.Sprintf("arm-smmu-v3: event %#x (%s), stream ID %#x (%s), %s, input address %#x",
		l.smmuEvent, smmuEventName(l.smmuEvent), ev[0]>>32, devName(bdf), dir, ev[2]), true
}

// after parses the hexadecimal number (with or without 0x) that follows
// the first occurrence of key in s.
func after(s, key string) (uint64, bool) {
	i := strings.Index(s, key)
	if i < 0 {
		return 0, false
	}
	s = strings.TrimPrefix(s[i+len(key):], "0x")
	end := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F')
	})
	if end >= 0 {
		s = s[:end]
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}

func smmuEventName(id uint64) string {
	switch id {
	case 0x10:
		return "F_TRANSLATION"
	case 0x11:
		return "F_ADDR_SIZE"
	case 0x12:
		return "F_ACCESS"
	case 0x13:
		return "F_PERMISSION"
	}
	return "other"
}

func devName(bdf uint16) string {
	return fmt.Sprintf("%02x:%02x.%d", bdf>>8, bdf>>3&0x1f, bdf&7)
}

// parseBDF turns "0000:00:01.0" into its requester ID (bus<<8 | dev<<3 |
// fn), which is also the device's SMMUv3 stream ID on QEMU's virt machine
// (its iommu-map is the identity).
func parseBDF(addr string) (uint16, error) {
	var dom, bus, dev, fn uint
	if _, err := fmt.Sscanf(addr, "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil || bus > 0xff || dev > 0x1f || fn > 7 {
		return 0, fmt.Errorf("PCI address %q: want dddd:bb:dd.f", addr)
	}
	return uint16(bus<<8 | dev<<3 | fn), nil
}
