package main

import (
	"os"

	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
)

// fileEngine is an engine over the io_uring file backend on the benchmark
// file (opened O_DIRECT), with blocks of its pool allocated: the set-up
// file-4k's and latency's engine variants share.
type fileEngine struct {
	e      *engine.Engine
	f      *os.File
	size   int64 // the file's or device's bytes
	blocks []engine.Block
}

// openFileEngineBlocks opens the benchmark file O_DIRECT, an engine over it
// with cfg (its Backend is set here) and allocates nblocks blocks of
// fileBlock bytes; on error nothing stays open.
func openFileEngineBlocks(o *options, cfg engine.Config, nblocks int) (*fileEngine, error) {
	return openTargetEngineBlocks(o, false, cfg, nblocks)
}

// openTargetEngineBlocks is openFileEngineBlocks on file-4k's target
// (targetPath: the data file or the stable device).
func openTargetEngineBlocks(o *options, stable bool, cfg engine.Config, nblocks int) (*fileEngine, error) {
	f, size, err := openTarget(o, stable)
	if err != nil {
		return nil, err
	}
	e, err := openFileEngine(f, cfg)
	if err != nil {
		f.Close()
		return nil, err
	}
	fe := &fileEngine{e: e, f: f, size: size, blocks: make([]engine.Block, nblocks)}
	for i := range fe.blocks {
		if fe.blocks[i], err = e.Alloc(fileBlock); err != nil {
			fe.close()
			return nil, err
		}
	}
	return fe, nil
}

// close shuts the engine down, then closes the file.
func (fe *fileEngine) close() error {
	ctx, cancel := closeCtx()
	defer cancel()
	err := fe.e.Shutdown(ctx)
	if cerr := fe.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// openFileEngine opens an engine over the io_uring file backend on f
// (which stays the caller's to close, after the engine).
func openFileEngine(f *os.File, cfg engine.Config) (*engine.Engine, error) {
	be, err := uringfile.New(f, uringfile.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	cfg.Backend = be
	return engine.Open(cfg)
}
