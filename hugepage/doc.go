// Package hugepage provides the memory that hcomm moves: arenas (one
// contiguous mapping each, off the Go heap, with an explicit backing), an
// aligned allocator over them, and a Pool that grows and shrinks by whole
// arenas.
//
// # Arenas
//
// An Arena is backed by one of: reserved hugetlb pages of 2 MiB or 1 GiB
// (MAP_HUGETLB), a hugetlb memfd (an fd another process or a device emulator
// can map), transparent hugepages (anonymous memory + MADV_HUGEPAGE), or
// plain 4 KiB pages. ArenaConfig.Backings is an ordered preference; every
// refused backing is recorded with its reason (Arena.Fallbacks), and a
// single-entry list forbids falling back. Populate prefaults, Lock mlocks, so
// the first transfer never page-faults.
//
// Errors teach: a hugetlb mapping that finds no reserved pages says how many
// pages of which size are missing and which sysfs file reserves them; an
// mlock beyond RLIMIT_MEMLOCK says that CAP_IPC_LOCK is missing.
//
// Reserve adds hugetlb pages to the kernel's pool (root) and Release gives
// back exactly what it added. Arena.PhysRuns translates the arena to
// physical addresses through /proc/self/pagemap (root); Arena.Residency reads
// /proc/self/smaps to prove the page size the kernel really uses.
//
// # Allocator and Pool
//
// A Pool hands out Blocks from its arenas: small and medium sizes from size
// classes (slabs; O(1) alloc and free), large sizes from a two-level
// segregated-fit allocator over 4 KiB units that coalesces on free (O(1)).
// Alignment is any power of two from 8 (default 64, 4096 for O_DIRECT) and
// applies to the address and the length; Alloc2D also aligns the stride. A
// Block is a small value (no heap allocation) that knows its arena and its
// offset in it, from which the engine derives the IOVA. Alloc and Free do not
// allocate on the Go heap once the pool is warm.
//
// A pool grows by whole arenas up to PoolConfig.MaxSize and gives added
// arenas back after PoolConfig.IdleRelease without a live block (or on
// Trim). PoolConfig.OnGrow and OnRelease let a user map each added arena for
// a device before its first block is handed out, and unmap it before it is
// closed; Arena.Backing says what memory each arena got.
//
// # Errors
//
// Every error starts with "hugepage: " and wraps one of these sentinels
// (test with errors.Is):
//
//   - ErrInvalidSize: zero, negative or unrepresentable size
//   - ErrInvalidBacking: unknown Backing value
//   - ErrNoHugepages: not enough hugetlb pages reserved (mmap ENOMEM)
//   - ErrNotSupported: the kernel does not offer the backing (wraps
//     errors.ErrUnsupported)
//   - ErrMemfdSize: memfd hugetlb size not a multiple of the page size
//   - ErrMemlock: mlock refused (RLIMIT_MEMLOCK without CAP_IPC_LOCK)
//   - ErrClosed: arena or pool closed (ErrClosed and ErrNotSupported are
//     hcomm's shared sentinels, the same values as engine's)
//   - ErrPrivilege: needs root / a capability (Reserve, physical addresses)
//   - ErrReserve: the kernel could not supply the hugepages asked for
//   - ErrNotResident: page not in memory, so no physical address
//   - ErrOutOfRange: offset outside the arena
//   - ErrBadAlign: alignment not a power of two >= 8
//   - ErrTooLarge: request larger than the pool can ever hold
//   - ErrPoolExhausted: no room now and growth not allowed
//   - ErrDoubleFree: block already freed (or a stale copy)
//   - ErrForeignBlock: block from another pool, zero, or forged
//
// Refused backings are reported as *BackingError values wrapping these.
package hugepage
