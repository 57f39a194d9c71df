package atomicrel

import (
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestLayout: StoreRelease writes through the address of the
// atomic.Uint64 inside Uint64, which is right only while that type is
// exactly its uint64 (its other fields zero-sized).
func TestLayout(t *testing.T) {
	if s := unsafe.Sizeof(atomic.Uint64{}); s != 8 {
		t.Fatalf("sync/atomic.Uint64 is %d bytes, not a bare uint64: StoreRelease's cast is wrong", s)
	}
	if s := unsafe.Sizeof(atomic.Uint32{}); s != 4 {
		t.Fatalf("sync/atomic.Uint32 is %d bytes, not a bare uint32: StoreRelease's cast is wrong", s)
	}
	var x Uint64
	x.StoreRelease(0xfeedface12345678)
	if v := x.Load(); v != 0xfeedface12345678 {
		t.Fatalf("Load after StoreRelease: %#x", v)
	}
	var y Uint32
	y.StoreRelease(0xfeedface)
	if v := y.Load(); v != 0xfeedface || !y.CompareAndSwap(0xfeedface, 1) || y.Load() != 1 {
		t.Fatalf("Uint32 after StoreRelease and CompareAndSwap: %#x", y.Load())
	}
}

func TestStores(t *testing.T) {
	var a uint32
	var b uint64
	for _, v := range []uint64{0, 1, 1 << 31, 1<<32 + 5, ^uint64(0)} {
		StoreUint32(&a, uint32(v))
		StoreUint64(&b, v)
		if atomic.LoadUint32(&a) != uint32(v) || atomic.LoadUint64(&b) != v {
			t.Fatalf("stored %#x: read %#x, %#x", v, a, b)
		}
	}
}

func BenchmarkStore(b *testing.B) {
	var x Uint64
	b.Run("seq-cst", func(b *testing.B) {
		for i := range b.N {
			x.Store(uint64(i))
		}
	})
	b.Run("release", func(b *testing.B) {
		for i := range b.N {
			x.StoreRelease(uint64(i))
		}
	})
}
