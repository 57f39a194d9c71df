// Package uringfile is the engine backend for files: reads and writes
// through io_uring, with the pool's arenas registered as fixed buffers and
// the files as fixed files, one io_uring_enter per batch.
//
//	f, _ := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
//	be, _ := uringfile.New(f, uringfile.Config{})
//	eng, _ := engine.Open(engine.Config{Backend: be, Alignment: 4096})
//
// One backend serves many files through the ring's registered-file table
// (Config.MaxFiles slots, DefaultMaxFiles by default): New's file is file
// 0 (engine.FileAt), AddFile adds more and returns each one's ID for the
// engine's Target.File, RemoveFile takes one away, both while the engine
// runs; NewEmpty starts with none.
//
//	be, _ := uringfile.NewEmpty(uringfile.Config{})
//	eng, _ := engine.Open(engine.Config{Backend: be, Alignment: 4096})
//	id, _ := be.AddFile(shard)
//	eng.Submit(engine.Transfer{Src: eng.Targets()[0].File(id, 0), Dst: engine.Host(buf), Len: n})
//
// A file's ID carries its slot's generation: once the file is removed,
// transfers naming it are refused at submit (backend.ErrBadTransfer, the
// message names the ID) even after its slot holds another file, those the
// kernel already took complete with their results, and one accepted but
// not yet taken completes with an error wrapping backend.ErrCanceled. A
// slot is reused only once the kernel has taken every submission that
// could name its old file, so a transfer never reaches another file.
//
// A file opened with O_DIRECT needs 4096-byte aligned addresses, lengths
// and offsets (backend.ErrAlignment otherwise), so the engine's Alignment
// must be at least 4096. The file stays the caller's: the backend never
// closes it. Regular files and block devices only (a pipe or socket could
// block Close for ever), and no O_APPEND (the kernel would place every
// write at the end, whatever its offset).
//
// A transfer does not depend on the thread that submitted it. io_uring
// ties each request to its submitting thread, and when that thread exits
// (a goroutine locked to it returned) the kernel cancels what the thread's
// io-wq workers had not started: such a transfer is issued again from the
// thread that reaps it (at most MaxReissue times; never once Cancel ran),
// and the caller sees its real result. Reissued counts them;
// docs/io_uring.md has the kernel's side.
//
// Completion errors: backend.ErrIO wrapping the errno (StatusErrno), and
// backend.ErrShortIO for a transfer that moved fewer bytes than asked.
package uringfile
