package baseline

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// AlignedBuffer returns n bytes of Go heap memory whose address is a
// multiple of align (a power of two), by over-allocating and slicing: what
// Go code does to use O_DIRECT without hcomm.
func AlignedBuffer(n, align int) ([]byte, error) {
	if n <= 0 || align <= 0 || align&(align-1) != 0 {
		return nil, fmt.Errorf("baseline: aligned buffer of %d bytes at %d: want n > 0 and a power-of-two alignment: %w", n, align, ErrBadConfig)
	}
	b := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(&b[0]))&uintptr(align-1))) & (align - 1)
	return b[skip : skip+n : skip+n], nil
}

// File is the traditional file path: os.File.WriteAt/ReadAt of one block
// per call from Go heap buffers, by Workers goroutines at once.
type File struct {
	f       *os.File
	block   int
	workers int
	bufs    [][]byte // one heap buffer per worker
	errs    []error
}

// FileConfig configures a File.
type FileConfig struct {
	// Block is the size of one I/O in bytes (> 0; a multiple of 4096 for
	// an O_DIRECT file).
	Block int
	// Workers is how many goroutines issue I/O at once (default 1: one
	// call at a time, queue depth 1).
	Workers int
	// Align is the buffers' address alignment (default 4096, which
	// O_DIRECT needs).
	Align int
}

// NewFile prepares the traditional path over f (opened by the caller,
// with or without O_DIRECT; the caller closes it).
func NewFile(f *os.File, cfg FileConfig) (*File, error) {
	if f == nil {
		return nil, fmt.Errorf("baseline: nil file: %w", ErrBadConfig)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Align == 0 {
		cfg.Align = 4096
	}
	if cfg.Block <= 0 || cfg.Workers < 0 || cfg.Workers > 4096 {
		return nil, fmt.Errorf("baseline: file path with %d-byte blocks and %d workers: want Block > 0 and Workers 1..4096: %w", cfg.Block, cfg.Workers, ErrBadConfig)
	}
	fp := &File{f: f, block: cfg.Block, workers: cfg.Workers, errs: make([]error, cfg.Workers)}
	for range cfg.Workers {
		b, err := AlignedBuffer(cfg.Block, cfg.Align)
		if err != nil {
			return nil, err
		}
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		fp.bufs = append(fp.bufs, b)
	}
	return fp, nil
}

// Buffer is worker w's heap buffer (the data written, the place read into).
func (fp *File) Buffer(w int) []byte { return fp.bufs[w] }

// WriteBlocks writes one block at each offset with WriteAt.
func (fp *File) WriteBlocks(offs []int64) error { return fp.run(offs, true) }

// ReadBlocks reads one block at each offset with ReadAt.
func (fp *File) ReadBlocks(offs []int64) error { return fp.run(offs, false) }

func (fp *File) run(offs []int64, write bool) error {
	if fp.workers == 1 || len(offs) < 2 {
		return fp.one(0, offs, 1, write)
	}
	var wg sync.WaitGroup
	for w := range min(fp.workers, len(offs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fp.errs[w] = fp.one(w, offs[w:], fp.workers, write)
		}()
	}
	wg.Wait()
	for w, err := range fp.errs {
		if err != nil {
			fp.errs[w] = nil
			return err
		}
	}
	return nil
}

// one issues offs[0], offs[stride], ... from worker w's buffer.
func (fp *File) one(w int, offs []int64, stride int, write bool) error {
	b := fp.bufs[w]
	for i := 0; i < len(offs); i += stride {
		var n int
		var err error
		if write {
			n, err = fp.f.WriteAt(b, offs[i])
		} else {
			n, err = fp.f.ReadAt(b, offs[i])
		}
		if err != nil {
			return fmt.Errorf("baseline: %s %d bytes at %d: %w", op(write), len(b), offs[i], err)
		}
		if n != len(b) {
			return fmt.Errorf("baseline: %s %d bytes at %d: short (%d): %w", op(write), len(b), offs[i], n, ErrBadTransfer)
		}
	}
	return nil
}

func op(write bool) string {
	if write {
		return "WriteAt"
	}
	return "ReadAt"
}
