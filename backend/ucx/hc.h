// hc.h: hcomm's thin C layer over UCP (see doc.go). Everything here is C
// memory: Go writes submission entries into hc_be.sq and reads completions
// from hc_be.cq, and never stores a Go pointer in any of these structures.
// Every function runs with the backend's mutex held (one thread at a time:
// the worker is created with UCS_THREAD_MODE_SERIALIZED).
#ifndef HCOMM_UCX_HC_H
#define HCOMM_UCX_HC_H

#include <stdint.h>
#include <stddef.h>
#include <ucp/api/ucp.h>

#define HC_MAX_ARENAS 64

// Operations (hc_sqe.op). HC_NOTIFY sends the message at local (len
// bytes, at most HC_NOTIFY_MAX) to the peer's application once every put
// posted to that peer before it is in the peer's memory; it completes when
// the peer acknowledged its delivery.
enum { HC_PUT = 1, HC_GET = 2, HC_NOTIFY = 3 };

#define HC_NOTIFY_MAX 256

// Peer states (hc_peer.state).
enum { HC_CONNECTING = 0, HC_READY = 1, HC_FAILED = 2, HC_CLOSED = 3 };

// Statuses hc adds to UCX's own (negative, below every ucs_status_t).
enum {
	HC_ST_PEER_GONE = -1000, // the peer failed or was closed before posting
	HC_ST_BOUNDS = -1001,    // remote offset outside the peer's export
	HC_ST_CANCELED_STAGED = -1002,
	HC_ST_NO_SLOT = -1003, // every slot held by requests UCX never completed
	HC_ST_PROTOCOL = -1004, // the peer sent a malformed hello or notification
};

// HC_ROUNDS: hc_progress's calls of ucp_worker_progress for a caller that
// does not poll again at once (the progress goroutine, a waiter, Close).
#define HC_ROUNDS 64

// How a test peer breaks its hellos (hc_be.hello_mangle).
enum { HC_MANGLE_NONE, HC_MANGLE_TRUNCATE, HC_MANGLE_COUNT, HC_MANGLE_KEYLEN, HC_MANGLE_START, HC_MANGLE_TRAILER, HC_MANGLE_N };

// Events hc_progress reports (hc_be.events): what Go must look at.
enum { HC_EV_CONNREQ = 1, HC_EV_HELLO = 2, HC_EV_FAIL = 4, HC_EV_PROGRESS = 8, HC_EV_NOTIFY = 16, HC_EV_ARENA = 32 };

// hc_upd is an arena update a peer sent (an arena added to or removed
// from its window), queued until Go applies it (hc_arena_apply).
typedef struct hc_upd {
	struct hc_upd *next;
	size_t len;
	uint8_t data[];
} hc_upd;

// hc_rm is an arena of a peer being removed: its key is destroyed, and
// the removal acknowledged, once the endpoint's flush completed (nothing
// of ours in flight to it).
typedef struct hc_rm {
	struct hc_rm *next;
	struct hc_be *be;
	ucp_rkey_h rkey;
	uint64_t start;
	int done;
} hc_rm;

// Notification states (hc_op.nstate).
enum { HC_NS_WAIT = 0, HC_NS_READY = 1, HC_NS_SENT = 2, HC_NS_DONE = 3 };

// hc_notif is one notification received, waiting for Go (hc_be.nrecv).
typedef struct hc_notif {
	uint32_t peer;
	uint32_t len;
	uint64_t seq;
	uint8_t data[HC_NOTIFY_MAX];
} hc_notif;

// hc_sqe is one transfer staged by Go (Forward) and posted by hc_submit.
typedef struct hc_sqe {
	uint64_t tag;
	uint64_t local; // virtual address of the host end
	uint64_t roff;  // offset in the peer's exported window
	uint32_t len;
	uint32_t peer;
	uint16_t arena; // local arena slot (its memory handle)
	uint8_t op;
	uint8_t pad[5];
} hc_sqe;

// hc_cqe is one finished transfer; the layout of engine.Completion.
typedef struct hc_cqe {
	uint64_t tag;
	uint32_t n;
	int32_t status; // 0 or a ucs_status_t / HC_ST_* (negative)
} hc_cqe;

typedef struct hc_be hc_be;

// hc_reg is a registration (ucp_mem_map) of [addr, addr+len) in the
// backend's range cache (reg.c), with its packed remote key once an arena
// inside it was exported, and its references: mapped arenas and regions
// registered in batches. Registering a range a cached registration
// contains takes a reference: no UCX call, no system call. A covering
// registration (hc_reg_batch) holds only its runs for lookups: spans[2i],
// spans[2i+1] is run i's [lo, hi), sorted; memory in its gaps is
// registered but not held (nspans 0: all of it is). seq orders the
// cache's registrations by age (be->reg_seq when made): a lookup answers
// with the oldest that holds the range, so a release finds the
// registration its registration took a reference on (reg.c, reg_find).
typedef struct hc_reg {
	uint64_t addr, len;
	uint64_t seq;
	ucp_mem_h memh;
	void *rkey;
	size_t rkeylen;
	uint32_t refs;
	uint32_t nspans;
	uint64_t *spans;
} hc_reg;

// hc_refusal is a covering registration that was not made: the range,
// the runs it would have joined, and why (a ucs_status_t from
// ucp_mem_map, or UCS_ERR_IO_ERROR with errnum when the process's
// mappings could not be read: then len is 0).
#define HC_REFUSALS 8
typedef struct hc_refusal {
	uint64_t addr, len;
	uint32_t runs;
	int32_t status;
	int32_t errnum;
} hc_refusal;

typedef struct hc_op {
	hc_be *be;
	uint64_t tag;
	uint32_t len;
	int32_t status;
	int32_t group;
	int32_t next; // next op of the group, of the peer's notifications, or of the free list
	uint8_t op;
	// HC_NOTIFY only: its state, whether its group (whose flush must
	// complete before it is sent) still holds it, whether UCX holds its
	// send request; its sequence number per peer, the message's address,
	// and when it was posted (the watchdog).
	uint8_t nstate;
	uint8_t ngrp;
	uint8_t nreq;
	uint32_t peer;
	uint64_t seq;
	uint64_t addr;
	uint64_t posted;
} hc_op;

typedef struct hc_group {
	hc_be *be;
	int32_t head;    // first op
	int32_t pending; // requests in flight + 1 while the group is open
	int32_t status;  // the flush's status
	int32_t next;    // next open group of this submit, or of the free list
	uint32_t peer;
	uint8_t has_put;
	uint8_t orphan; // its ops were reported when its peer closed
	int32_t notify; // the notification waiting for this group's flush, or -1
	uint64_t posted; // CLOCK_MONOTONIC ns when the group was posted
} hc_group;

struct hc_pwin;

typedef struct hc_peer {
	hc_be *be;
	uint32_t idx;
	int state;
	int32_t fail_status;
	ucp_ep_h ep;  // control endpoint: the listener's connection (handshake)
	ucp_ep_h dep; // data endpoint: from the peer's worker address (RMA)
	void *hello_req; // our hello AM in flight
	void *hello_out; // its payload, freed when it completes
	void *close_req; // ucp_ep_close_nbx in flight (control)
	void *dclose_req; // ucp_ep_close_nbx in flight (data)
	int32_t open_group;
	uint8_t *hello; // the peer's hello, once received
	size_t hello_len;
	uint64_t exported; // bit s: our arena slot s was in our hello
	// The peer's window (narenas arenas in w): allocated with the peer,
	// freed by hc_peer_close (narenas and nadded are 0 from then on): a
	// peer gone keeps only this structure, its index and its failure.
	uint32_t narenas;
	struct hc_pwin *w;
	// reaping: on hc_be.reap, the list of peers whose hello or close
	// requests are still in UCX (hc_progress frees them as they finish).
	uint8_t reaping;
	// Notifications sent: a FIFO of ops (linked by next) from posting to
	// the peer's acknowledgement; nseq_out numbers the next one.
	int32_t nhead, ntail;
	uint64_t nseq_out;
	// Notifications received: nseq_in is the next sequence number
	// expected, ndelivered how many Go took (acknowledged when ack_due).
	uint64_t nseq_in, ndelivered;
	uint8_t ack_due;
	uint64_t ack_val; // the count the acknowledgement in flight carries
	void *ack_req;    // that acknowledgement, or NULL
	// Arena updates: hello_sent once our hello went out (later arenas
	// are sent as updates); arena_wait counts updates we sent that the
	// peer has not acknowledged; upd queues the peer's updates for Go;
	// rm its arenas being removed.
	uint8_t hello_sent;
	int32_t arena_wait;
	hc_upd *upd_head, *upd_tail;
	hc_rm *rm;
	// Additions applied, acknowledged once Go published the window
	// (hc_arena_ack): how many (their window offsets are w->added).
	uint32_t nadded;
} hc_peer;

// hc_pwin is a peer's window: its arenas (narenas of them, in hc_peer)
// and the additions not acknowledged yet (nadded).
typedef struct hc_pwin {
	uint64_t start[HC_MAX_ARENAS]; // window offset of each exported arena
	uint64_t len[HC_MAX_ARENAS];
	uint64_t base[HC_MAX_ARENAS]; // remote virtual address
	ucp_rkey_h rkey[HC_MAX_ARENAS];
	// direct[i]: the peer's arena i mapped into this process (shared
	// memory: ucp_rkey_ptr of its key), or NULL. Valid until
	// hc_peer_close destroys the key (Go fences its copies first).
	void *direct[HC_MAX_ARENAS];
	uint64_t added[HC_MAX_ARENAS];
} hc_pwin;

struct hc_be {
	ucp_context_h ctx;
	ucp_worker_h worker; // control: listener, handshake, peer failure
	// dworker carries the data endpoints (shared memory): a worker of its
	// own, so that progressing transfers never polls the control worker's
	// tcp interface (an epoll_wait per ucp_worker_progress). Without
	// shm_ep it is worker.
	ucp_worker_h dworker;
	ucp_listener_h listener;
	int efd;  // control worker's event fd
	int defd; // data worker's (== efd without shm_ep)
	int thread_mode;
	int shm_ep; // Config.SharedMemory: a second, data endpoint per peer
	ucp_address_t *waddr; // the data worker's address, sent in the hello
	size_t waddr_len;
	uint32_t events;
	int canceling; // hc_cancel_all ran: UCS_ERR_CANCELED means canceled
	int hello_mangle; // tests only: send_hello breaks its hellos this way (HC_MANGLE_*)

	// Transfers (hc_attach).
	uint32_t depth;
	uint32_t nslots; // ops and groups: 2 * depth
	hc_op *ops;
	int32_t op_free;
	hc_group *groups;
	int32_t grp_free;
	// sq is a ring: Go's Forward writes entries past sq_pub, Flush
	// publishes them (sq_pub, a release store by the engine's owner),
	// hc_submit posts [sq_head, sq_pub) under the mutex.
	hc_sqe *sq;
	uint32_t sq_head, sq_pub, sq_mask;
	hc_cqe *cq;
	uint32_t cq_head, cq_tail, cq_mask;
	uint32_t inflight; // posted ops whose completion is not in cq yet
	uint64_t ndirect;  // transfers hc_submit copied itself (peer memory mapped here)
	uint64_t nprogress; // ucp_worker_progress calls on the data worker

	// Notifications: some sent ones became ready (their flush completed),
	// some received ones await an acknowledgement; the received ones Go
	// has not taken (a ring of nr_cap entries, grown up to HC_NRECV_MAX).
	uint8_t notify_ready, ack_due, rm_due;
	hc_notif *nrecv;
	uint32_t nr_head, nr_tail, nr_cap;

	// Local arenas. memh registers the arena's range for this side's own
	// transfers; xmemh (shared memory only) is the UCX-allocated SysV
	// segment the arena's pages now are (see hc_map), exported at
	// export_addr (its address in UCX's own mapping); without it the arena
	// itself is exported (export_addr == arena_addr).
	ucp_mem_h memh[HC_MAX_ARENAS];
	ucp_mem_h xmemh[HC_MAX_ARENAS];
	uint64_t arena_addr[HC_MAX_ARENAS];
	uint64_t arena_len[HC_MAX_ARENAS];
	uint64_t export_addr[HC_MAX_ARENAS];
	// The registration cache (reg.c): entries sorted by address;
	// reg_end is a max tree over their ends (reg_treecap leaves, a power
	// of two: leaf i is regs[i]'s end, 0 past nregs), so a lookup visits
	// only entries that reach its range; reg_seq numbers registrations
	// as they are made (hc_reg.seq). slot_reg[s] is arena s's
	// registration (memh[s] its memh) when it came from the cache.
	// Counters for tests and benchmarks.
	hc_reg **regs;
	uint32_t nregs, regcap;
	uint64_t *reg_end;
	uint32_t reg_treecap;
	uint64_t reg_seq;
	hc_reg *slot_reg[HC_MAX_ARENAS];
	uint64_t nreg_maps, nreg_hits;
	// Covering registrations (hc_reg_batch): reg_gap is the largest gap
	// one bridges (0: none); the counters, and the last HC_REFUSALS
	// covers that could not be made (refusal_n counts them all: entry
	// i % HC_REFUSALS). reg_refuse (tests only) refuses every cover
	// before UCX sees it, as a pinning failure would.
	uint64_t reg_gap;
	uint64_t ncovers, ncover_gaps, ncover_gapbytes;
	hc_refusal refusals[HC_REFUSALS];
	uint64_t refusal_n;
	int reg_refuse;
	// win_start[s]: arena s's offset in this side's window; win_end the
	// next arena's. Offsets are never reused: an arena added later goes
	// at the end, one removed leaves a hole.
	uint64_t win_start[HC_MAX_ARENAS];
	uint64_t win_end;
	void *rkeybuf[HC_MAX_ARENAS];
	size_t rkeylen[HC_MAX_ARENAS];

	// Peers, by index (never reused).
	hc_peer **peers;
	uint32_t npeers, peers_cap;
	// Peers whose hello or close requests UCX still holds (hc_peer.reaping).
	uint32_t *reap;
	uint32_t nreap, reap_cap;
	uint64_t nreaped; // requests freed from the list (tests)

	// Connection requests the listener received, not yet accepted.
	ucp_conn_request_h *connreq;
	uint32_t nconnreq, connreq_cap;
};

// hc_hello is a peer's hello, parsed (hc_parse_hello): its arena table
// and where the keys and the worker address are in the message.
typedef struct hc_hello {
	uint32_t narenas;
	uint64_t start[HC_MAX_ARENAS], len[HC_MAX_ARENAS], base[HC_MAX_ARENAS];
	size_t keyoff[HC_MAX_ARENAS];
	uint32_t keylen[HC_MAX_ARENAS];
	size_t addroff;
	uint32_t addrlen;
} hc_hello;

hc_reg *reg_find(hc_be *be, uint64_t addr, uint64_t len);
hc_reg *hc_reg_get(hc_be *be, uint64_t addr, uint64_t len, ucs_status_t *st);
// hc_forget drops UCX's cached registrations of a released range (hc.c).
void hc_forget(uint64_t addr, uint64_t len);
void hc_reg_put(hc_be *be, hc_reg *r);
int hc_reg_batch(hc_be *be, const uint64_t *addr, const uint64_t *len, uint32_t n);
uint32_t hc_reg_release(hc_be *be, const uint64_t *addr, const uint64_t *len, uint32_t n);
void hc_reg_destroy(hc_be *be);
hc_reg *hc_reg_uncached(hc_be *be, uint64_t addr, uint64_t len, ucs_status_t *st);
void hc_reg_uncached_free(hc_be *be, hc_reg *r);
int hc_bench_reg_hits(hc_be *be, uint64_t addr, uint64_t len, uint32_t n);
int hc_bench_reg_hits_window(hc_be *be, uint64_t addr, uint64_t len, uint32_t n, uint32_t probes, uint32_t *flag);
int hc_bench_mem_map(hc_be *be, uint64_t addr, uint64_t size, uint64_t stride, uint32_t n, int cold);
int hc_parse_hello(const uint8_t *b, size_t n, hc_hello *h);
int hc_open(hc_be **out, int shm, const char **err);
void hc_destroy(hc_be *be);
int hc_attach(hc_be *be, uint32_t depth);
int hc_listen(hc_be *be, int family, const uint8_t *ip, uint16_t port, uint16_t *bound);
int hc_map(hc_be *be, int slot, uint64_t addr, uint64_t len, int lock, const char **note);
int hc_unmap(hc_be *be, int slot);
int hc_connect(hc_be *be, int family, const uint8_t *ip, uint16_t port, uint32_t *idx);
int hc_accept(hc_be *be, uint32_t *idx);
int hc_import(hc_be *be, uint32_t idx);
void hc_peer_close(hc_be *be, uint32_t idx, int32_t status);
int hc_peer_busy(hc_be *be, uint32_t idx);
uint32_t hc_progress(hc_be *be, int ctl, int rounds);
int hc_arm(hc_be *be);
uint32_t hc_submit(hc_be *be, int rounds);
uint32_t hc_cancel_all(hc_be *be);
uint32_t hc_expire(hc_be *be, uint64_t timeout_ns);
char *hc_ep_info(hc_be *be, uint32_t idx);
hc_notif *hc_notify_peek(hc_be *be);
int hc_arena_apply(hc_be *be, uint32_t idx);
void hc_arena_ack(hc_be *be, uint32_t idx);
void hc_unpublish(hc_be *be, int slot);
void hc_notify_pop(hc_be *be);
uint32_t hc_notify_flush(hc_be *be);
void hc_copy(void *dst, const void *src, size_t n);


#endif
