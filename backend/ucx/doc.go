// Package ucx is hcomm's remote backend: a backend.Backend whose targets are
// other processes' pools — on this host or another — reached through UCX's
// UCP API (libucp, Debian's libucx-dev 1.13). UCX picks the wire per link:
// RDMA, TCP or shared memory. The package is a thin cgo layer (hc.c) over
// the UCP calls it needs; it is the only cgo in hcomm besides capi, and the
// engine core never imports it.
//
//	b, _ := ucx.New(ucx.Config{Listen: "10.0.0.5:0"})  // context, worker, listener
//	eng, _ := engine.Open(engine.Config{Backend: b})     // pool arenas registered (ucp_mem_map)
//	peer, _ := b.Connect(ctx, "10.0.0.6:13337")          // handshake: windows + rkeys
//	eng.Submit(engine.Transfer{Src: engine.Host(buf), Dst: engine.Remote(peer, off), Len: n, ...})
//
// # What a peer reaches
//
// Each arena the engine maps (MapArena) is registered once with ucp_mem_map
// and its remote key packed. When two backends connect, each sends the other
// a hello on the new connection: its exported window — every arena mapped
// at that moment (offset, length, base address, packed rkey) — and its
// worker address. The window lays arenas end to end in the order they were
// mapped; an arena's offset never changes while it is mapped, and an
// unmapped one leaves a hole (offsets are not reused). engine.Remote(peer,
// off) names byte off of that window. Arenas mapped later are sent to
// every connected peer, and MapArena returns once each acknowledged (the
// engine hands out blocks of an arena only after MapArena): a peer knows
// an arena before anyone can name it. UnmapArena first takes the arena out
// of every peer's window and waits for their acknowledgements, which each
// sends after a flush of its endpoint (nothing of its in flight there);
// a peer that does not answer in time is disconnected. Prepare refuses,
// before anything is posted, a range outside the window's arenas or
// straddling two (ErrRemoteBounds, wrapping backend.ErrOutOfBounds), an
// unknown peer (ErrNoPeer) and a failed one (ErrPeerGone). See
// docs/remote.md for what this means for security: the checks are the
// initiator's.
//
// # Transfers
//
// host → remote is ucp_put_nbx, remote → host ucp_get_nbx, straight
// from/to pool memory (the arena's memory handle is passed, so UCX's
// zero-copy protocols read and write the pool). Forward only writes a
// submission entry into a ring in C memory; Flush publishes the batch and
// posts it in one call into C, followed by one ucp_ep_flush_nbx per peer
// the batch put to — or, with transfers already outstanding, leaves it to
// whoever progresses the worker next (the progress goroutine, which polls
// again within 50 µs while requests are in UCX, or the engine's next
// Reap), which posts everything published so far in order: the submitter
// then makes no system call while it holds the engine's owner flag. A put
// completes when a flush posted after it does (the bytes are in the peer's
// memory), a get when its own request does. Completions are collected by the
// request callbacks (C functions; no Go callback, no Go pointer in C
// memory: user data are pointers into C arrays) into a C ring that Reap
// copies out, in one call that also progresses the worker.
//
// Direct copies (Config.SharedMemory): a peer's UCX-allocated segment is
// attached in this process when its remote key is unpacked, and
// ucp_rkey_ptr says where. A transfer to such an arena is not posted to
// UCX: hc_submit copies it itself (libc memcpy; non-temporal stores from
// 1 MiB) and completes it into the ring at once — what UCX's sysv put and
// get do, without the request and the flush around them. With
// CallerProgress, transfers up to 4 KiB are copied by the submitter
// instead (Prepare marks them Inline; Execute, no call into C), and the
// next Poll delivers them. Before a peer's keys are destroyed (its
// mapping goes), fence stops and waits out the submitters' copies to it.
//
// # Registration
//
// Registrations are cached (reg.c): MapArena of memory a cached
// registration contains takes a reference — no UCX call, no system call —
// and RegisterRegions registers many regions in one call, adjacent ones
// merged into one ucp_mem_map (not with SharedMemory, whose arenas are
// segments of their own). Runs that lie close together in one mapping
// are one covering registration, gaps included, within a bound on the
// extra bytes (Config.RegisterGap; docs/remote.md): the cache holds only
// the runs, and a cover UCX refuses falls back to one registration per
// run (RegistrationFallbacks). Cached registrations may overlap; a
// region's reference goes to the oldest one that holds it, and its
// release drops that same one.
//
// # Notifications
//
// A put to the remote offset Notify is a notification: its bytes (at most
// MaxNotify) are a message for the peer's application, delivered after
// every put this side submitted to that peer before it is in the peer's
// pool, in order per peer, exactly once (a batch of puts ending with one is
// NIXL's write with notification). hc_submit gives it the flush of the
// peer's endpoint (ucp_ep_flush_nbx: every put posted before it reached
// the peer's memory); when the flush completes it is sent as an active
// message on the control endpoint with its sequence number; the peer
// checks the number (the next one, or the sender is failed), queues it for
// Notifications / WaitNotification and acknowledges it (cumulatively) when
// it enters that channel. The sender's transfer completes with the
// acknowledgement: a peer that dies, is disconnected or times out before
// it fails the notification once with ErrPeerGone.
//
// # Threads
//
// The workers are created with UCS_THREAD_MODE_SERIALIZED (ThreadMode reports
// what UCX granted): it may be called from any OS thread, one at a time. A
// mutex serializes the engine's owner (Flush, Reap, Cancel), Connect and the
// progress goroutine; the engine calls from whichever goroutine holds its
// owner flag, so no goroutine is locked to an OS thread (LockOSThread would
// be needed only for UCS_THREAD_MODE_SINGLE, which the owner-flag hand-over
// between goroutines cannot honour).
//
// With Config.SharedMemory there are two workers: the control worker
// (listener, the listener's tcp connections, handshake, peer failure) and
// the data worker (the shared-memory data endpoints), so that progressing
// transfers never polls the tcp interface (an epoll_wait per
// ucp_worker_progress).
//
// The progress goroutine keeps the workers moving when the engine does
// not: it accepts connections, answers handshakes, notices failed peers,
// serves a peer's tcp puts and gets into this side's pool (the tcp
// transport needs the target to progress), runs the watchdog
// (Config.Timeout) and finishes transfers while the engine sleeps. It spins
// for Config.Spin after an event (default: not at all), then arms the
// workers (ucp_worker_arm), progresses them once more (over RDMA verbs a
// completion that arrived just before the arm raises no event), and
// sleeps in poll(2) on their event fds (ucp_worker_get_efd) when that
// found nothing; it never queues on the mutex behind the engine's
// owner, which progresses the data worker itself. ReadyFD is an eventfd
// written when completions wait, so an idle engine sleeps too.
//
// Without SharedMemory the engine waits on the backend in batches
// (BatchWaits, WaitCompletions): a goroutine waiting for completions
// progresses the worker itself, posting what Flush left, and sleeps on the
// worker's event fd after 100 µs. With SharedMemory BatchWaits is false:
// a put or get is a copy, complete when Flush returns.
//
// Config.SharedMemory also makes each exported arena a UCX-allocated SysV
// segment attached over the arena's own addresses (ucp_mem_map with
// UCP_MEM_MAP_ALLOCATE, then shmat with SHM_REMAP): a peer's put or get is
// then its own memcpy into or out of the segment (a direct copy, above),
// with no message to this side. Registered memory is reachable over shared
// memory only through software RMA (messages the target's worker serves),
// which a peer killed mid-message can wedge for good (docs/remote.md).
//
// # Failure
//
// Endpoints use UCP_ERR_HANDLING_MODE_PEER. When a peer dies (kill -9,
// reset, its engine closed) UCX calls the endpoint's error handler; the
// backend then force-closes its endpoints, and every transfer in flight to
// the peer completes once with an error wrapping ErrPeerGone (and
// backend.ErrIO, or backend.ErrTimeout for UCX's endpoint timeout). A
// request UCX never completes after the close is reported failed anyway;
// its slot stays held until UCX lets go of it (slots are 2 × QueueDepth;
// transfers beyond fail with a "no request slot" error). Peer indices are
// never reused: Connect again after a failure gives a new one. A peer
// whose batch stays outstanding longer than Config.Timeout (default 30 s)
// is failed the same way, its transfers with ErrPeerGone and
// backend.ErrTimeout: no transfer waits for ever.
//
// Config.SharedMemory: UCX 1.13 never gives shared-memory lanes to the
// listener's connection, so with it each peer gets a second, data endpoint
// from its worker address, without peer error handling (UCX 1.13 gives an
// address endpoint with peer error handling no RMA lanes at all); failure
// is still detected on the listener's connection.
//
// # Errors
//
// Sentinels for errors.Is: ErrUCX, ErrBadAddress, ErrConnect, ErrNoPeer,
// ErrPeerGone, ErrRemoteBounds, ErrProtocol, ErrTransport, ErrClosed.
// Prepare's errors also wrap backend.ErrBadTransfer or
// backend.ErrOutOfBounds; completion errors (Err) wrap backend.ErrIO,
// backend.ErrTimeout or backend.ErrCanceled, and are formatted once (the
// completion path allocates nothing).
package ucx
