package uring

// storeRelease32 stores v at *p with release ordering (storerel_linux_amd64.s):
// memory accesses before it are visible before it. For indexes shared with
// the kernel through io_uring's mmap'd rings, never for Go memory that the
// race detector should see.
//
//go:noescape
func storeRelease32(p *uint32, v uint32)
