// Package uringfile is the engine backend for a file: reads and writes
// through io_uring, with the pool's arenas registered as fixed buffers and
// the file as a fixed file, one io_uring_enter per batch.
//
//	f, _ := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
//	be, _ := uringfile.New(f, uringfile.Config{})
//	eng, _ := engine.Open(engine.Config{Backend: be, Alignment: 4096})
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
