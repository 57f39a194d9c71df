package pagefault

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Fresh anonymous 4 KiB pages fault once each on first touch and not on
// the second (THP off for the mapping, so each page is its own fault).
func TestTouchCountsFaults(t *testing.T) {
	const pages = 256
	mem, err := unix.Mmap(-1, 0, pages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil {
		t.Fatal(err)
	}
	if f, _ := Touch(mem); f < pages || f > pages+16 {
		t.Errorf("first touch of %d fresh pages: %d faults, want %d (a few more for the runtime)", pages, f, pages)
	}
	if f, _ := Touch(mem); f > 16 {
		t.Errorf("second touch: %d faults, want ~0", f)
	}
}
