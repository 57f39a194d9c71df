// hc.c: hcomm's thin C layer over UCP. See hc.h and doc.go.
#include "hc.h"

#include <arpa/inet.h>
#include <ucm/api/ucm.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define HC_AM_HELLO 0x4843 // "HC"
#define HC_AM_NOTIFY 0x4844 // a notification: header its sequence number, data the message
#define HC_AM_NACK 0x4845   // notifications delivered: header their count
#define HC_AM_ARENA 0x4846  // an arena added to or removed from the sender's window
#define HC_AM_AACK 0x4847   // an arena update applied
enum { HC_ARENA_ADD = 1, HC_ARENA_REMOVE = 2 };
#define HC_NRECV_MAX (1u << 16) // received notifications Go has not taken, at most
#define HC_MAGIC 0x58554348u // "HCUX"
#define HC_VERSION 1u

// hc_copy copies a direct transfer (hc_submit). From HC_NT_MIN bytes on it
// writes with non-temporal stores: the bytes are for another process, and
// bypassing the cache beat libc's memcpy (which keeps them cached up to a
// threshold of a fraction of the L3, tens of MiB) at 1 MiB and 16 MiB here.
#define HC_NT_MIN (1u << 20)
void hc_copy(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
	if (n >= HC_NT_MIN) {
		uint8_t *d = dst;
		const uint8_t *s = src;
		size_t head = (16 - ((uintptr_t)d & 15)) & 15;
		memcpy(d, s, head);
		d += head;
		s += head;
		n -= head;
		for (; n >= 64; n -= 64, d += 64, s += 64) {
			__m128i a = _mm_loadu_si128((const __m128i *)s);
			__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
			__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
			__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
			_mm_stream_si128((__m128i *)d, a);
			_mm_stream_si128((__m128i *)(d + 16), b);
			_mm_stream_si128((__m128i *)(d + 32), c);
			_mm_stream_si128((__m128i *)(d + 48), e);
		}
		_mm_sfence(); // the stores are visible before the completion
		memcpy(d, s, n);
		return;
	}
#endif
	memcpy(dst, src, n);
}

static void cq_push(hc_be *be, uint64_t tag, uint32_t n, int32_t st) {
	hc_cqe *e = &be->cq[be->cq_tail & be->cq_mask];
	e->tag = tag;
	e->n = st == 0 ? n : 0;
	e->status = st;
	be->cq_tail++;
}

// Requests UCX cancels complete with the peer's failure, not as
// "canceled": UCX purges a failed endpoint's requests (sometimes before
// its error handler runs), and hc force-closes it. Only Cancel (the
// engine's Close) cancels.
static int32_t peer_status(hc_be *be, uint32_t peer, int32_t st) {
	if (st != UCS_ERR_CANCELED || be->canceling)
		return st;
	if (peer < be->npeers && be->peers[peer]->fail_status != 0)
		return be->peers[peer]->fail_status;
	return HC_ST_PEER_GONE;
}

// peer_fail marks a peer failed (Go closes it: HC_EV_FAIL).
static void peer_fail(hc_be *be, hc_peer *p, int32_t st) {
	if (p->state < HC_FAILED) {
		p->state = HC_FAILED;
		p->fail_status = st;
	}
	be->events |= HC_EV_FAIL;
}

// A notification op lives in its peer's FIFO from hc_submit until it is
// reported (acknowledged, or failed); its slot is freed once it is
// reported and neither its group nor a send request refers to it.
static void notify_release(hc_be *be, int32_t i) {
	hc_op *op = &be->ops[i];
	if (op->nstate == HC_NS_DONE && !op->ngrp && !op->nreq) {
		op->next = be->op_free;
		be->op_free = i;
	}
}

static void notify_unlink(hc_be *be, hc_peer *p, int32_t i) {
	int32_t prev = -1;
	for (int32_t j = p->nhead; j >= 0 && j != i; j = be->ops[j].next)
		prev = j;
	int32_t next = be->ops[i].next;
	if (prev < 0)
		p->nhead = next;
	else
		be->ops[prev].next = next;
	if (p->ntail == i)
		p->ntail = prev;
	be->ops[i].next = -1;
}

// notify_done reports notification i with st, once.
static void notify_done(hc_be *be, int32_t i, int32_t st) {
	hc_op *op = &be->ops[i];
	if (op->nstate == HC_NS_DONE)
		return;
	notify_unlink(be, be->peers[op->peer], i);
	op->nstate = HC_NS_DONE;
	cq_push(be, op->tag, op->len, peer_status(be, op->peer, st));
	be->inflight--;
	notify_release(be, i);
}

// notify_fail fails notification i and its peer: the peer's sequence of
// notifications is broken, and so is the promise of order.
static void notify_fail(hc_be *be, int32_t i, int32_t st) {
	hc_peer *p = be->peers[be->ops[i].peer];
	// A send UCX canceled: the peer's endpoint is failing (UCX purges its
	// requests, sometimes before the error handler runs).
	st = peer_status(be, be->ops[i].peer, st);
	notify_done(be, i, st);
	peer_fail(be, p, st);
}

// notify_flushed: the flush of every put posted before notification i
// completed (fail: its status); it may be sent now.
static void notify_flushed(hc_be *be, int32_t i, int32_t fail) {
	hc_op *op = &be->ops[i];
	op->ngrp = 0;
	if (op->nstate != HC_NS_WAIT) {
		notify_release(be, i);
		return;
	}
	if (fail != UCS_OK) {
		notify_fail(be, i, fail);
		return;
	}
	op->nstate = HC_NS_READY;
	be->notify_ready = 1;
}

static void notify_sent_cb(void *req, ucs_status_t st, void *ud) {
	hc_op *op = ud;
	hc_be *be = op->be;
	int32_t i = (int32_t)(op - be->ops);
	ucp_request_free(req);
	op->nreq = 0;
	if (st != UCS_OK && op->nstate != HC_NS_DONE)
		notify_fail(be, i, st);
	else
		notify_release(be, i);
}

// notify_send sends, per peer in order, the notifications whose puts are
// in place, up to the first that still waits for its flush (never from a
// UCX callback: after ucp_worker_progress returned).
static void notify_send(hc_be *be) {
	be->notify_ready = 0;
	for (uint32_t k = 0; k < be->npeers; k++) {
		hc_peer *p = be->peers[k];
		if (p->nhead < 0 || p->ep == NULL || p->state != HC_READY)
			continue; // closing: hc_peer_close reports them
		for (int32_t i = p->nhead; i >= 0;) {
			hc_op *op = &be->ops[i];
			int32_t next = op->next;
			if (op->nstate == HC_NS_WAIT)
				break;
			if (op->nstate == HC_NS_READY) {
				ucp_request_param_t rp = {
					.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
							UCP_OP_ATTR_FIELD_USER_DATA,
					.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
					.cb = {.send = notify_sent_cb},
					.user_data = op,
				};
				op->nstate = HC_NS_SENT;
				// The header (op->seq) and the message (the caller's
				// block) stay valid until the request completes.
				ucs_status_ptr_t r = ucp_am_send_nbx(p->ep, HC_AM_NOTIFY, &op->seq, sizeof(op->seq),
								     (void *)(uintptr_t)op->addr, op->len, &rp);
				if (UCS_PTR_IS_ERR(r)) {
					notify_fail(be, i, UCS_PTR_STATUS(r));
					break;
				}
				if (r != NULL)
					op->nreq = 1;
			}
			i = next;
		}
	}
}

// reply_peer is the live peer whose control endpoint a message came on.
static hc_peer *reply_peer(hc_be *be, const ucp_am_recv_param_t *param) {
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return NULL;
	for (uint32_t i = 0; i < be->npeers; i++) {
		hc_peer *p = be->peers[i];
		if (p->ep == param->reply_ep && p->state < HC_FAILED)
			return p;
	}
	return NULL;
}

// notify_cb receives a notification: it must be whole (eager), at most
// HC_NOTIFY_MAX bytes, and the next of its peer's sequence; anything else
// fails the peer (a typed error in Go), never this side.
static ucs_status_t notify_cb(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			      const ucp_am_recv_param_t *param) {
	hc_be *be = arg;
	hc_peer *p = reply_peer(be, param);
	if (p == NULL)
		return UCS_OK;
	uint64_t seq = 0;
	if (hlen == sizeof(seq))
		memcpy(&seq, hdr, sizeof(seq));
	if (hlen != sizeof(seq) || len > HC_NOTIFY_MAX || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
	    seq != p->nseq_in) {
		peer_fail(be, p, HC_ST_PROTOCOL);
		return UCS_OK;
	}
	if (be->nr_tail - be->nr_head == be->nr_cap) {
		uint32_t cap = be->nr_cap ? 2 * be->nr_cap : 64;
		hc_notif *n = cap <= HC_NRECV_MAX ? malloc(cap * sizeof(*n)) : NULL;
		if (n == NULL) {
			peer_fail(be, p, UCS_ERR_NO_MEMORY);
			return UCS_OK;
		}
		for (uint32_t k = 0; be->nr_head + k != be->nr_tail; k++)
			n[k] = be->nrecv[(be->nr_head + k) & (be->nr_cap - 1)];
		be->nr_tail -= be->nr_head;
		be->nr_head = 0;
		free(be->nrecv);
		be->nrecv = n;
		be->nr_cap = cap;
	}
	hc_notif *e = &be->nrecv[be->nr_tail & (be->nr_cap - 1)];
	e->peer = p->idx;
	e->len = (uint32_t)len;
	e->seq = seq;
	memcpy(e->data, data, len);
	be->nr_tail++;
	p->nseq_in++;
	be->events |= HC_EV_NOTIFY;
	return UCS_OK;
}

// nack_cb: the peer delivered its first n notifications from this side.
static ucs_status_t nack_cb(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			    const ucp_am_recv_param_t *param) {
	hc_be *be = arg;
	(void)data;
	(void)len;
	hc_peer *p = reply_peer(be, param);
	uint64_t n;
	if (p == NULL)
		return UCS_OK;
	if (hlen != sizeof(n)) {
		peer_fail(be, p, HC_ST_PROTOCOL);
		return UCS_OK;
	}
	memcpy(&n, hdr, sizeof(n));
	while (p->nhead >= 0 && be->ops[p->nhead].seq < n) {
		if (be->ops[p->nhead].nstate != HC_NS_SENT) {
			peer_fail(be, p, HC_ST_PROTOCOL); // acknowledged before it was sent
			break;
		}
		notify_done(be, p->nhead, UCS_OK);
	}
	return UCS_OK;
}

// arena_cb queues a peer's arena update for Go (hc_arena_apply): it
// unpacks a remote key, which is not done inside UCX's callback.
static ucs_status_t arena_cb(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *param) {
	hc_be *be = arg;
	(void)hdr;
	(void)hlen;
	hc_peer *p = reply_peer(be, param);
	if (p == NULL)
		return UCS_OK;
	hc_upd *u = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? NULL : malloc(sizeof(*u) + len);
	if (u == NULL) {
		peer_fail(be, p, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? HC_ST_PROTOCOL : UCS_ERR_NO_MEMORY);
		return UCS_OK;
	}
	u->next = NULL;
	u->len = len;
	memcpy(u->data, data, len);
	if (p->upd_tail != NULL)
		p->upd_tail->next = u;
	else
		p->upd_head = u;
	p->upd_tail = u;
	be->events |= HC_EV_ARENA;
	return UCS_OK;
}

// aack_cb: the peer applied one of our arena updates.
static ucs_status_t aack_cb(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			    const ucp_am_recv_param_t *param) {
	hc_be *be = arg;
	(void)hdr;
	(void)hlen;
	(void)data;
	hc_peer *p = reply_peer(be, param);
	if (p == NULL)
		return UCS_OK;
	if (len != 16 || p->arena_wait <= 0) {
		peer_fail(be, p, HC_ST_PROTOCOL);
		return UCS_OK;
	}
	p->arena_wait--;
	return UCS_OK;
}

static void free_cb(void *req, ucs_status_t st, void *ud) {
	(void)st;
	free(ud);
	ucp_request_free(req);
}

// send_blob sends a small control message (a malloc'd buffer, freed when
// the send completes) on p's control endpoint.
static ucs_status_t send_blob(hc_peer *p, unsigned id, uint8_t *b, size_t n) {
	ucp_request_param_t rp = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
		.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
		.cb = {.send = free_cb},
		.user_data = b,
	};
	ucs_status_ptr_t r = ucp_am_send_nbx(p->ep, id, NULL, 0, b, n, &rp);
	if (!UCS_PTR_IS_PTR(r))
		free(b);
	return UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_OK;
}

static void send_aack(hc_be *be, hc_peer *p, uint32_t op, uint64_t start) {
	uint8_t *b = malloc(16);
	if (b == NULL) {
		peer_fail(be, p, UCS_ERR_NO_MEMORY);
		return;
	}
	uint32_t f[2] = {op, 0};
	memcpy(b, f, 8);
	memcpy(b + 8, &start, 8);
	ucs_status_t st = send_blob(p, HC_AM_AACK, b, 16);
	if (st != UCS_OK)
		peer_fail(be, p, st);
}

// send_arena sends arena slot's addition to (or removal from) this side's
// window to peer p; the peer acknowledges it (arena_wait).
static void send_arena(hc_be *be, hc_peer *p, int slot, uint32_t op) {
	size_t n = 36 + (op == HC_ARENA_ADD ? be->rkeylen[slot] : 0);
	uint8_t *b = malloc(n);
	if (b == NULL) {
		peer_fail(be, p, UCS_ERR_NO_MEMORY);
		return;
	}
	uint32_t kl = op == HC_ARENA_ADD ? (uint32_t)be->rkeylen[slot] : 0;
	uint64_t f[3] = {be->win_start[slot], be->arena_len[slot], be->export_addr[slot]};
	memcpy(b, &op, 4);
	memcpy(b + 4, f, 24);
	memcpy(b + 28, &kl, 4);
	memset(b + 32, 0, 4);
	if (kl > 0)
		memcpy(b + 36, be->rkeybuf[slot], kl);
	ucs_status_t st = send_blob(p, HC_AM_ARENA, b, n);
	if (st != UCS_OK) {
		peer_fail(be, p, st);
		return;
	}
	p->arena_wait++;
	if (op == HC_ARENA_ADD)
		p->exported |= 1ull << slot;
	else
		p->exported &= ~(1ull << slot);
}

// hc_publish: arena slot was mapped; every peer that got our hello before
// gets it as an update (Go waits for their acknowledgements).
static void hc_publish(hc_be *be, int slot) {
	for (uint32_t k = 0; k < be->npeers; k++) {
		hc_peer *p = be->peers[k];
		if (p->hello_sent && p->state < HC_FAILED && p->ep != NULL)
			send_arena(be, p, slot, HC_ARENA_ADD);
	}
}

// hc_unpublish: arena slot is about to be unmapped; every peer that has it
// is told (Go waits until they acknowledged: nothing of theirs is then in
// flight to it, and none can start).
void hc_unpublish(hc_be *be, int slot) {
	for (uint32_t k = 0; k < be->npeers; k++) {
		hc_peer *p = be->peers[k];
		if ((p->exported & (1ull << slot)) && p->state < HC_FAILED && p->ep != NULL)
			send_arena(be, p, slot, HC_ARENA_REMOVE);
	}
}

static void rm_flush_cb(void *req, ucs_status_t st, void *ud) {
	hc_rm *rm = ud;
	(void)st;
	ucp_request_free(req);
	rm->done = 1;
	rm->be->rm_due = 1;
}

// rm_finish destroys the keys of removed arenas whose flush completed and
// acknowledges their removal.
static void rm_finish(hc_be *be) {
	be->rm_due = 0;
	for (uint32_t k = 0; k < be->npeers; k++) {
		hc_peer *p = be->peers[k];
		for (hc_rm **q = &p->rm; *q != NULL;) {
			hc_rm *rm = *q;
			if (!rm->done) {
				q = &rm->next;
				continue;
			}
			*q = rm->next;
			if (rm->rkey != NULL)
				ucp_rkey_destroy(rm->rkey);
			if (p->state < HC_FAILED && p->ep != NULL)
				send_aack(be, p, HC_ARENA_REMOVE, rm->start);
			free(rm);
		}
	}
}

// arena_apply1 applies one update from peer p (msg of n bytes).
static int32_t arena_apply1(hc_be *be, hc_peer *p, const uint8_t *m, size_t n) {
	uint32_t op, kl;
	uint64_t f[3];
	if (n < 36)
		return HC_ST_PROTOCOL;
	memcpy(&op, m, 4);
	memcpy(f, m + 4, 24);
	memcpy(&kl, m + 28, 4);
	if (op == HC_ARENA_ADD) {
		uint64_t end = p->narenas ? p->w->start[p->narenas - 1] + p->w->len[p->narenas - 1] : 0;
		if (n - 36 != kl || kl == 0 || p->narenas == HC_MAX_ARENAS || f[0] < end || f[1] == 0 ||
		    f[0] + f[1] < f[0] || f[2] + f[1] < f[2])
			return HC_ST_PROTOCOL;
		uint32_t i = p->narenas;
		ucs_status_t st = ucp_ep_rkey_unpack(p->dep, m + 36, &p->w->rkey[i]);
		if (st != UCS_OK)
			return st;
		p->w->start[i] = f[0];
		p->w->len[i] = f[1];
		p->w->base[i] = f[2];
		p->w->direct[i] = NULL;
		void *ptr;
		if (be->shm_ep && ucp_rkey_ptr(p->w->rkey[i], p->w->base[i], &ptr) == UCS_OK)
			p->w->direct[i] = ptr;
		p->narenas++;
		if (p->nadded < HC_MAX_ARENAS)
			p->w->added[p->nadded++] = f[0];
		return UCS_OK;
	}
	if (op != HC_ARENA_REMOVE || n != 36)
		return HC_ST_PROTOCOL;
	uint32_t i = 0;
	while (i < p->narenas && p->w->start[i] != f[0])
		i++;
	if (i == p->narenas)
		return HC_ST_PROTOCOL;
	hc_rm *rm = calloc(1, sizeof(*rm));
	if (rm == NULL)
		return UCS_ERR_NO_MEMORY;
	rm->be = be;
	rm->rkey = p->w->rkey[i];
	rm->start = f[0];
	// Out of the window now (hc_submit refuses what is staged for it);
	// the key goes, and the removal is acknowledged, once a flush of the
	// endpoint says that nothing posted to it is in flight.
	for (uint32_t j = i; j + 1 < p->narenas; j++) {
		p->w->start[j] = p->w->start[j + 1];
		p->w->len[j] = p->w->len[j + 1];
		p->w->base[j] = p->w->base[j + 1];
		p->w->rkey[j] = p->w->rkey[j + 1];
		p->w->direct[j] = p->w->direct[j + 1];
	}
	p->narenas--;
	p->w->rkey[p->narenas] = NULL;
	p->w->direct[p->narenas] = NULL;
	rm->next = p->rm;
	p->rm = rm;
	ucp_request_param_t rp = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
		.cb = {.send = rm_flush_cb},
		.user_data = rm,
	};
	ucs_status_ptr_t r = ucp_ep_flush_nbx(p->dep, &rp);
	if (!UCS_PTR_IS_PTR(r)) {
		rm->done = 1;
		be->rm_due = 1;
	}
	return UCS_OK;
}

// hc_arena_apply applies peer idx's queued arena updates (once its hello
// is imported): additions join its window (keys unpacked, acknowledged),
// removals leave it at once and are acknowledged after a flush. A
// malformed update fails the peer. Returns how many were applied.
int hc_arena_apply(hc_be *be, uint32_t idx) {
	hc_peer *p = be->peers[idx];
	int n = 0;
	while (p->upd_head != NULL && p->state == HC_READY) {
		hc_upd *u = p->upd_head;
		p->upd_head = u->next;
		if (p->upd_head == NULL)
			p->upd_tail = NULL;
		int32_t st = arena_apply1(be, p, u->data, u->len);
		free(u);
		if (st != UCS_OK) {
			peer_fail(be, p, st);
			break;
		}
		n++;
	}
	return n;
}

// hc_arena_ack acknowledges the additions hc_arena_apply made: Go has
// published the window that holds them, so the peer may hand out blocks
// of them.
void hc_arena_ack(hc_be *be, uint32_t idx) {
	hc_peer *p = be->peers[idx];
	for (uint32_t i = 0; i < p->nadded && p->state < HC_FAILED && p->ep != NULL; i++)
		send_aack(be, p, HC_ARENA_ADD, p->w->added[i]);
	p->nadded = 0;
}

hc_notif *hc_notify_peek(hc_be *be) {
	return be->nr_head == be->nr_tail ? NULL : &be->nrecv[be->nr_head & (be->nr_cap - 1)];
}

// hc_notify_pop: Go took the oldest notification; it is acknowledged at
// the next hc_notify_flush.
void hc_notify_pop(hc_be *be) {
	hc_notif *e = &be->nrecv[be->nr_head & (be->nr_cap - 1)];
	hc_peer *p = be->peers[e->peer];
	p->ndelivered = e->seq + 1;
	p->ack_due = 1;
	be->ack_due = 1;
	be->nr_head++;
}

static void ack_cb(void *req, ucs_status_t st, void *ud) {
	hc_peer *p = ud;
	(void)st;
	ucp_request_free(req);
	p->ack_req = NULL;
}

// hc_notify_flush sends what notifications wait for: the acknowledgements
// of those Go took (one per peer, cumulative; one in flight per peer at a
// time, its count in ack_val) and the notifications whose puts are in
// place. Returns the events that raised.
uint32_t hc_notify_flush(hc_be *be) {
	if (be->rm_due)
		rm_finish(be);
	if (be->notify_ready)
		notify_send(be);
	if (be->ack_due) {
		be->ack_due = 0;
		for (uint32_t k = 0; k < be->npeers; k++) {
			hc_peer *p = be->peers[k];
			if (!p->ack_due)
				continue;
			if (p->ep == NULL || p->state >= HC_FAILED) {
				p->ack_due = 0;
				continue;
			}
			if (p->ack_req != NULL) {
				be->ack_due = 1; // after the one in flight
				continue;
			}
			p->ack_due = 0;
			p->ack_val = p->ndelivered;
			ucp_request_param_t rp = {
				.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
				.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
				.cb = {.send = ack_cb},
				.user_data = p,
			};
			ucs_status_ptr_t r = ucp_am_send_nbx(p->ep, HC_AM_NACK, &p->ack_val, sizeof(p->ack_val), NULL, 0, &rp);
			if (UCS_PTR_IS_ERR(r))
				peer_fail(be, p, UCS_PTR_STATUS(r));
			else if (r != NULL)
				p->ack_req = r;
		}
	}
	uint32_t ev = be->events;
	be->events = 0;
	return ev;
}

// group_complete reports every op of a group (once: an orphaned group was
// reported when it was orphaned).
static void group_complete(hc_be *be, hc_group *grp, int32_t fail) {
	for (int32_t i = grp->head; i >= 0; i = be->ops[i].next) {
		hc_op *op = &be->ops[i];
		int32_t st = op->status;
		if (st == UCS_OK && op->op == HC_PUT)
			st = grp->status; // a put is done when its flush is
		if (st == UCS_OK)
			st = fail;
		cq_push(be, op->tag, op->len, peer_status(be, grp->peer, st));
		be->inflight--;
	}
}

// group_done runs when the last request of a group completed: report its
// ops (unless orphaned) and free its slots.
static void group_done(hc_be *be, int32_t g) {
	hc_group *grp = &be->groups[g];
	int32_t fail = grp->status;
	for (int32_t i = grp->head; i >= 0 && fail == UCS_OK; i = be->ops[i].next)
		fail = be->ops[i].status;
	if (!grp->orphan)
		group_complete(be, grp, UCS_OK);
	if (grp->notify >= 0)
		notify_flushed(be, grp->notify, fail);
	grp->notify = -1;
	int32_t i = grp->head;
	while (i >= 0) {
		int32_t next = be->ops[i].next;
		be->ops[i].next = be->op_free;
		be->op_free = i;
		i = next;
	}
	grp->orphan = 0;
	grp->next = be->grp_free;
	be->grp_free = g;
}

static void group_put(hc_be *be, int32_t g) {
	if (--be->groups[g].pending == 0)
		group_done(be, g);
}

static void op_cb(void *req, ucs_status_t st, void *ud) {
	hc_op *op = ud;
	if (st != UCS_OK && op->status == UCS_OK)
		op->status = st;
	ucp_request_free(req);
	group_put(op->be, op->group);
}

static void flush_cb(void *req, ucs_status_t st, void *ud) {
	hc_group *grp = ud;
	if (st != UCS_OK && grp->status == UCS_OK)
		grp->status = st;
	ucp_request_free(req);
	group_put(grp->be, (int32_t)(grp - grp->be->groups));
}

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t st) {
	hc_peer *p = arg;
	(void)ep;
	peer_fail(p->be, p, st);
}

static void conn_cb(ucp_conn_request_h req, void *arg) {
	hc_be *be = arg;
	if (be->nconnreq == be->connreq_cap) {
		uint32_t cap = be->connreq_cap ? 2 * be->connreq_cap : 8;
		void *n = realloc(be->connreq, cap * sizeof(*be->connreq));
		if (n == NULL) {
			ucp_listener_reject(be->listener, req);
			return;
		}
		be->connreq = n;
		be->connreq_cap = cap;
	}
	be->connreq[be->nconnreq++] = req;
	be->events |= HC_EV_CONNREQ;
}

static ucs_status_t hello_cb(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *param) {
	hc_be *be = arg;
	(void)hdr;
	(void)hlen;
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return UCS_OK;
	for (uint32_t i = 0; i < be->npeers; i++) {
		hc_peer *p = be->peers[i];
		if (p->ep != param->reply_ep || p->state != HC_CONNECTING || p->hello != NULL)
			continue;
		if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
			p->state = HC_FAILED; // a hello too large for eager: not ours
			p->fail_status = UCS_ERR_UNSUPPORTED;
			be->events |= HC_EV_FAIL;
			return UCS_OK;
		}
		p->hello = malloc(len ? len : 1);
		if (p->hello == NULL) {
			p->state = HC_FAILED;
			p->fail_status = UCS_ERR_NO_MEMORY;
			be->events |= HC_EV_FAIL;
			return UCS_OK;
		}
		memcpy(p->hello, data, len);
		p->hello_len = len;
		be->events |= HC_EV_HELLO;
		return UCS_OK;
	}
	return UCS_OK;
}

int hc_open(hc_be **out, int shm, const char **err) {
	hc_be *be = calloc(1, sizeof(*be));
	if (be == NULL) {
		*err = "calloc";
		return UCS_ERR_NO_MEMORY;
	}
	be->efd = -1;
	be->shm_ep = shm;
	ucp_config_t *cfg;
	ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
	if (st != UCS_OK) {
		*err = "ucp_config_read";
		free(be);
		return st;
	}
	ucp_params_t p = {
		.field_mask = UCP_PARAM_FIELD_FEATURES,
		.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
	};
	st = ucp_init(&p, cfg, &be->ctx);
	ucp_config_release(cfg);
	if (st != UCS_OK) {
		*err = "ucp_init";
		free(be);
		return st;
	}
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SERIALIZED,
	};
	st = ucp_worker_create(be->ctx, &wp, &be->worker);
	if (st != UCS_OK) {
		*err = "ucp_worker_create";
		goto fail;
	}
	ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
	st = ucp_worker_query(be->worker, &wa);
	if (st != UCS_OK) {
		*err = "ucp_worker_query";
		goto fail;
	}
	be->thread_mode = wa.thread_mode;
	st = ucp_worker_get_efd(be->worker, &be->efd);
	if (st != UCS_OK) {
		*err = "ucp_worker_get_efd";
		goto fail;
	}
	be->dworker = be->worker;
	be->defd = be->efd;
	if (shm) {
		st = ucp_worker_create(be->ctx, &wp, &be->dworker);
		if (st != UCS_OK) {
			be->dworker = NULL;
			*err = "ucp_worker_create (data)";
			goto fail;
		}
		st = ucp_worker_get_efd(be->dworker, &be->defd);
		if (st != UCS_OK) {
			*err = "ucp_worker_get_efd (data)";
			goto fail;
		}
	}
	st = ucp_worker_get_address(be->dworker, &be->waddr, &be->waddr_len);
	if (st != UCS_OK) {
		*err = "ucp_worker_get_address";
		goto fail;
	}
	ucp_am_handler_param_t ap = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
			      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = HC_AM_HELLO,
		.flags = UCP_AM_FLAG_WHOLE_MSG,
		.cb = hello_cb,
		.arg = be,
	};
	st = ucp_worker_set_am_recv_handler(be->worker, &ap);
	if (st == UCS_OK) {
		ap.id = HC_AM_NOTIFY;
		ap.cb = notify_cb;
		st = ucp_worker_set_am_recv_handler(be->worker, &ap);
	}
	if (st == UCS_OK) {
		ap.id = HC_AM_NACK;
		ap.cb = nack_cb;
		st = ucp_worker_set_am_recv_handler(be->worker, &ap);
	}
	if (st == UCS_OK) {
		ap.id = HC_AM_ARENA;
		ap.cb = arena_cb;
		st = ucp_worker_set_am_recv_handler(be->worker, &ap);
	}
	if (st == UCS_OK) {
		ap.id = HC_AM_AACK;
		ap.cb = aack_cb;
		st = ucp_worker_set_am_recv_handler(be->worker, &ap);
	}
	if (st != UCS_OK) {
		*err = "ucp_worker_set_am_recv_handler";
		goto fail;
	}
	*out = be;
	return UCS_OK;
fail:
	if (be->waddr != NULL)
		ucp_worker_release_address(be->dworker, be->waddr);
	if (be->dworker != NULL && be->dworker != be->worker)
		ucp_worker_destroy(be->dworker);
	if (be->worker != NULL)
		ucp_worker_destroy(be->worker);
	ucp_cleanup(be->ctx);
	free(be);
	return st;
}

int hc_attach(hc_be *be, uint32_t depth) {
	uint32_t cap = 1;
	while (cap < depth)
		cap <<= 1;
	be->depth = depth;
	// Twice the depth: slots of orphaned groups stay taken until UCX
	// completes their requests (see hc_peer_close).
	uint32_t ns = 2 * depth;
	be->nslots = ns;
	be->ops = calloc(ns, sizeof(*be->ops));
	be->groups = calloc(ns, sizeof(*be->groups));
	be->sq = calloc(cap, sizeof(*be->sq));
	be->cq = calloc(cap, sizeof(*be->cq));
	if (!be->ops || !be->groups || !be->sq || !be->cq)
		return UCS_ERR_NO_MEMORY;
	be->cq_mask = cap - 1;
	be->sq_mask = cap - 1;
	for (uint32_t i = 0; i < ns; i++) {
		be->ops[i].be = be;
		be->ops[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
		be->groups[i].be = be;
		be->groups[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
	}
	be->op_free = 0;
	be->grp_free = 0;
	return UCS_OK;
}

static socklen_t mkaddr(struct sockaddr_storage *ss, int family, const uint8_t *ip, uint16_t port) {
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		memcpy(&a->sin6_addr, ip, 16);
		return sizeof(*a);
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	memcpy(&a->sin_addr, ip, 4);
	return sizeof(*a);
}

int hc_listen(hc_be *be, int family, const uint8_t *ip, uint16_t port, uint16_t *bound) {
	struct sockaddr_storage ss;
	socklen_t sl = mkaddr(&ss, family, ip, port);
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
		.sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sl},
		.conn_handler = {.cb = conn_cb, .arg = be},
	};
	ucs_status_t st = ucp_listener_create(be->worker, &lp, &be->listener);
	if (st != UCS_OK)
		return st;
	ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
	st = ucp_listener_query(be->listener, &la);
	if (st != UCS_OK)
		return st;
	if (la.sockaddr.ss_family == AF_INET6)
		*bound = ntohs(((struct sockaddr_in6 *)&la.sockaddr)->sin6_port);
	else
		*bound = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
	return UCS_OK;
}

// sysv_shmid is the SysV segment id of the mapping that starts at addr
// (/proc/self/maps shows a SysV attach as "/SYSV<key> (deleted)" with the
// segment id in the inode column), or -1.
static int sysv_shmid(uint64_t addr) {
	FILE *f = fopen("/proc/self/maps", "r");
	if (f == NULL)
		return -1;
	char line[512];
	int id = -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long lo, hi, ino;
		char path[256];
		if (sscanf(line, "%lx-%lx %*s %*s %*s %lu %255s", &lo, &hi, &ino, path) != 4)
			continue;
		if (lo == addr && strncmp(path, "/SYSV", 5) == 0) {
			id = (int)ino;
			break;
		}
	}
	fclose(f);
	return id;
}

// copy_resident copies the arena's bytes into the fresh (zero) segment:
// only its pages that exist — present or swapped out, says
// /proc/self/pagemap (bits 63 and 62). A page never touched reads as zero,
// so copying it would only fault in both: a large pool the engine left
// unpopulated costs no memory here. Any doubt: copy everything.
static void copy_resident(void *dst, const uint8_t *src, uint64_t len) {
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t np = (len + ps - 1) / ps;
	uint64_t *ent = malloc((np ? np : 1) * sizeof(*ent));
	FILE *f = fopen("/proc/self/pagemap", "rb");
	int ok = ent != NULL && f != NULL && (uint64_t)(uintptr_t)src % ps == 0 &&
		 fseeko(f, (off_t)((uint64_t)(uintptr_t)src / ps * 8), SEEK_SET) == 0 &&
		 fread(ent, 8, np, f) == np;
	if (f != NULL)
		fclose(f);
	if (!ok) {
		free(ent);
		memcpy(dst, src, len);
		return;
	}
	for (uint64_t i = 0; i < np; i++) {
		if (!(ent[i] >> 62))
			continue; // neither present nor swapped: never touched
		uint64_t off = i * ps;
		uint64_t n = len - off < ps ? len - off : ps;
		memcpy((uint8_t *)dst + off, src + off, n);
	}
	free(ent);
}

// alias makes the arena [addr, addr+len) shared memory that UCX's
// shared-memory transports can reach with zero copies: UCX allocates a
// SysV segment (ucp_mem_map with UCP_MEM_MAP_ALLOCATE: its remote key lets
// a peer attach the segment, so a put or get is one memcpy into or out of
// it, with no message to this side), the arena's bytes are copied into it,
// and the segment is attached over the arena's own range (shmat
// SHM_REMAP, which replaces the arena's pages in one step). The arena's
// addresses stay what the engine knows; its pages are now the segment's.
// Returns a note saying why not, or NULL.
static const char *alias(hc_be *be, int slot, uint64_t addr, uint64_t len, int lock) {
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
			      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
		.address = NULL,
		.length = len,
		.flags = UCP_MEM_MAP_ALLOCATE,
	};
	ucp_mem_h m;
	if (ucp_mem_map(be->ctx, &mp, &m) != UCS_OK)
		return "ucp_mem_map(UCP_MEM_MAP_ALLOCATE) failed";
	ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
	const char *why = NULL;
	int id = -1;
	struct shmid_ds ds;
	if (ucp_mem_query(m, &ma) != UCS_OK)
		why = "ucp_mem_query";
	else if ((id = sysv_shmid((uint64_t)(uintptr_t)ma.address)) < 0)
		why = "UCX did not allocate a SysV segment (sysv not in UCX_TLS?)";
	else if (shmctl(id, IPC_STAT, &ds) != 0 || ds.shm_segsz != len || ma.length != len)
		// shmat maps the whole segment: one larger than the arena (a
		// hugetlb segment rounded up) would cover what follows it.
		why = "UCX's segment is not the arena's size";
	if (why == NULL) {
		copy_resident(ma.address, (const uint8_t *)(uintptr_t)addr, len);
		void *r = shmat(id, (void *)(uintptr_t)addr, SHM_REMAP);
		if (r != (void *)(uintptr_t)addr)
			why = "shmat(SHM_REMAP) over the arena failed";
		else if (lock && mlock(r, len) != 0)
			why = NULL; // the segment is in use now; unlocked pages are not fatal
	}
	if (why != NULL) {
		ucp_mem_unmap(be->ctx, m);
		return why;
	}
	be->xmemh[slot] = m;
	be->export_addr[slot] = (uint64_t)(uintptr_t)ma.address;
	return NULL;
}

// hc_map registers arena slot and packs the remote key peers get. With
// shared memory (be->shm_ep) it first turns the arena into a UCX-allocated
// segment (alias); *note says why that failed (the arena is then exported
// as registered memory, which UCX 1.13's shared-memory transports reach
// only through messages the peer's worker must serve).
int hc_map(hc_be *be, int slot, uint64_t addr, uint64_t len, int lock, const char **note) {
	*note = NULL;
	be->export_addr[slot] = addr;
	if (be->shm_ep)
		*note = alias(be, slot, addr, len, lock);
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
		.address = (void *)(uintptr_t)addr,
		.length = len,
	};
	ucs_status_t st;
	if (!be->shm_ep) {
		// The registration cache: memory already registered (a region
		// registered in a batch, an arena mapped in another slot) is
		// not registered again, and its packed key is reused.
		hc_reg *r = hc_reg_get(be, addr, len, &st);
		if (r == NULL)
			return st;
		if (r->rkey == NULL && (st = ucp_rkey_pack(be->ctx, r->memh, &r->rkey, &r->rkeylen)) != UCS_OK) {
			r->rkey = NULL;
			hc_reg_put(be, r);
			return st;
		}
		be->slot_reg[slot] = r;
		be->memh[slot] = r->memh;
		be->rkeybuf[slot] = r->rkey;
		be->rkeylen[slot] = r->rkeylen;
		goto mapped;
	}
	st = ucp_mem_map(be->ctx, &mp, &be->memh[slot]);
	if (st == UCS_OK) {
		ucp_mem_h x = be->xmemh[slot] != NULL ? be->xmemh[slot] : be->memh[slot];
		st = ucp_rkey_pack(be->ctx, x, &be->rkeybuf[slot], &be->rkeylen[slot]);
		if (st != UCS_OK) {
			ucp_mem_unmap(be->ctx, be->memh[slot]);
			be->memh[slot] = NULL;
		}
	}
	if (st != UCS_OK) {
		// The arena's range stays attached to the segment (same bytes);
		// UCX's own mapping of it goes.
		if (be->xmemh[slot] != NULL)
			ucp_mem_unmap(be->ctx, be->xmemh[slot]);
		be->xmemh[slot] = NULL;
		return st;
	}
mapped:
	be->arena_addr[slot] = addr;
	be->arena_len[slot] = len;
	be->win_start[slot] = be->win_end;
	be->win_end += len;
	hc_publish(be, slot);
	return UCS_OK;
}

// hc_forget drops what UCX's own registration caches (the verbs memory
// domain's rcache) keep of [addr, addr+len) once hcomm released its last
// registration of it. UCX learns that memory is unmapped by hooking libc's
// munmap; Go unmaps with a raw system call, so without this a range
// unmapped and mapped again at the same address (an arena the pool
// releases and grows again) would hit the stale registration, pinning the
// old pages: RDMA would then write where the application no longer looks
// (soft-RoCE in the VM guest showed it). The range may still be mapped:
// a later registration of it is then a new one, of the current pages.
void hc_forget(uint64_t addr, uint64_t len) { ucm_vm_munmap((void *)(uintptr_t)addr, len); }

// hc_unmap releases arena slot. An aliased arena's range stays attached to
// its segment until the arena is unmapped (the segment was marked for
// removal when UCX created it: the kernel frees it then).
int hc_unmap(hc_be *be, int slot) {
	if (be->memh[slot] == NULL)
		return UCS_OK;
	ucs_status_t st = UCS_OK;
	if (be->slot_reg[slot] != NULL) {
		hc_reg_put(be, be->slot_reg[slot]); // the cache's: its key too
		be->slot_reg[slot] = NULL;
	} else {
		ucp_rkey_buffer_release(be->rkeybuf[slot]);
		st = ucp_mem_unmap(be->ctx, be->memh[slot]);
		hc_forget(be->arena_addr[slot], be->arena_len[slot]);
	}
	be->rkeybuf[slot] = NULL;
	be->memh[slot] = NULL;
	if (be->xmemh[slot] != NULL) {
		ucs_status_t xst = ucp_mem_unmap(be->ctx, be->xmemh[slot]);
		if (st == UCS_OK)
			st = xst;
		be->xmemh[slot] = NULL;
	}
	be->arena_addr[slot] = 0;
	be->arena_len[slot] = 0;
	be->export_addr[slot] = 0;
	be->win_start[slot] = 0;
	return st;
}

static hc_peer *peer_new(hc_be *be) {
	if (be->npeers == be->peers_cap) {
		uint32_t cap = be->peers_cap ? 2 * be->peers_cap : 8;
		void *n = realloc(be->peers, cap * sizeof(*be->peers));
		if (n == NULL)
			return NULL;
		be->peers = n;
		be->peers_cap = cap;
	}
	hc_peer *p = calloc(1, sizeof(*p));
	if (p == NULL)
		return NULL;
	p->w = calloc(1, sizeof(*p->w));
	if (p->w == NULL) {
		free(p);
		return NULL;
	}
	p->be = be;
	p->idx = be->npeers;
	p->open_group = -1;
	p->nhead = p->ntail = -1;
	be->peers[be->npeers++] = p;
	return p;
}

// reap_later puts peer p on the list of peers whose requests hc_progress
// frees as UCX finishes them (reap_finished).
static void reap_later(hc_be *be, hc_peer *p) {
	if (p->reaping)
		return;
	if (be->nreap == be->reap_cap) {
		uint32_t cap = be->reap_cap ? 2 * be->reap_cap : 8;
		void *n = realloc(be->reap, cap * sizeof(*be->reap));
		if (n == NULL)
			return; // freed by hc_destroy instead
		be->reap = n;
		be->reap_cap = cap;
	}
	be->reap[be->nreap++] = p->idx;
	p->reaping = 1;
}

static int reap_req(void **r);

// reap_finished frees the hello and close requests UCX finished (and the
// hello's payload); a peer leaves the list when none is left.
static void reap_finished(hc_be *be) {
	for (uint32_t i = 0; i < be->nreap;) {
		hc_peer *p = be->peers[be->reap[i]];
		if (reap_req(&p->hello_req)) {
			free(p->hello_out);
			p->hello_out = NULL;
			be->nreaped++;
		}
		be->nreaped += reap_req(&p->close_req) + reap_req(&p->dclose_req);
		if (p->hello_req != NULL || p->close_req != NULL || p->dclose_req != NULL) {
			i++;
			continue;
		}
		p->reaping = 0;
		be->reap[i] = be->reap[--be->nreap];
	}
}

// send_hello sends the exported window (every mapped arena in slot order:
// window offset, length, base address, packed remote key) and this
// worker's address, on the control endpoint.
static ucs_status_t send_hello(hc_be *be, hc_peer *p) {
	size_t n = 12 + 4 + be->waddr_len;
	uint32_t na = 0;
	for (int s = 0; s < HC_MAX_ARENAS; s++)
		if (be->memh[s] != NULL) {
			n += 28 + be->rkeylen[s];
			na++;
		}
	// The hello stays with the peer until the send completes.
	uint8_t *b = malloc(n + 1), *q = b;
	if (b == NULL)
		return UCS_ERR_NO_MEMORY;
	uint32_t hdr[3] = {HC_MAGIC, HC_VERSION, na};
	memcpy(q, hdr, 12);
	q += 12;
	// In window order (an arena mapped later has a higher offset,
	// whatever its slot).
	uint64_t done = 0;
	for (uint32_t k = 0; k < na; k++) {
		int s = -1;
		for (int t = 0; t < HC_MAX_ARENAS; t++)
			if (be->memh[t] != NULL && !(done & (1ull << t)) && (s < 0 || be->win_start[t] < be->win_start[s]))
				s = t;
		done |= 1ull << s;
		p->exported |= 1ull << s;
		uint64_t f[3] = {be->win_start[s], be->arena_len[s], be->export_addr[s]};
		uint32_t kl = (uint32_t)be->rkeylen[s];
		memcpy(q, f, 24);
		memcpy(q + 24, &kl, 4);
		memcpy(q + 28, be->rkeybuf[s], kl);
		q += 28 + kl;
	}
	uint32_t al = (uint32_t)be->waddr_len;
	memcpy(q, &al, 4);
	memcpy(q + 4, be->waddr, al);
	switch (be->hello_mangle) { // a lying peer, for tests
	case HC_MANGLE_TRUNCATE:
		n /= 2;
		break;
	case HC_MANGLE_COUNT:
		hdr[2] = HC_MAX_ARENAS + 1;
		memcpy(b, hdr, 12);
		break;
	case HC_MANGLE_KEYLEN:
		if (na > 0) {
			uint32_t kl = 1u << 30;
			memcpy(b + 12 + 24, &kl, 4);
		}
		break;
	case HC_MANGLE_START:
		if (na > 0) {
			uint64_t st = 4096;
			memcpy(b + 12, &st, 8);
		}
		break;
	case HC_MANGLE_TRAILER:
		b[n++] = 0;
		break;
	}
	ucp_request_param_t rp = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
	};
	ucs_status_ptr_t r = ucp_am_send_nbx(p->ep, HC_AM_HELLO, NULL, 0, b, n, &rp);
	if (r == NULL) {
		free(b);
		p->hello_sent = 1;
		return UCS_OK;
	}
	if (UCS_PTR_IS_ERR(r)) {
		free(b);
		return UCS_PTR_STATUS(r);
	}
	p->hello_req = r;
	p->hello_out = b; // freed when the request completes (reap_finished)
	p->hello_sent = 1;
	reap_later(be, p);
	return UCS_OK;
}

int hc_connect(hc_be *be, int family, const uint8_t *ip, uint16_t port, uint32_t *idx) {
	hc_peer *p = peer_new(be);
	if (p == NULL)
		return UCS_ERR_NO_MEMORY;
	*idx = p->idx;
	struct sockaddr_storage ss;
	socklen_t sl = mkaddr(&ss, family, ip, port);
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sl},
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = {.cb = err_cb, .arg = p},
	};
	ucs_status_t st = ucp_ep_create(be->worker, &ep, &p->ep);
	if (st == UCS_OK)
		st = send_hello(be, p);
	if (st != UCS_OK) {
		p->state = HC_FAILED;
		p->fail_status = st;
	}
	return st;
}

int hc_accept(hc_be *be, uint32_t *idx) {
	if (be->nconnreq == 0)
		return 1;
	ucp_conn_request_h req = be->connreq[0];
	memmove(be->connreq, be->connreq + 1, (be->nconnreq - 1) * sizeof(*be->connreq));
	be->nconnreq--;
	hc_peer *p = peer_new(be);
	if (p == NULL) {
		ucp_listener_reject(be->listener, req);
		return UCS_ERR_NO_MEMORY;
	}
	*idx = p->idx;
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.conn_request = req,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = {.cb = err_cb, .arg = p},
	};
	ucs_status_t st = ucp_ep_create(be->worker, &ep, &p->ep);
	if (st == UCS_OK)
		st = send_hello(be, p);
	if (st != UCS_OK) {
		p->state = HC_FAILED;
		p->fail_status = st;
	}
	return st;
}

// hc_parse_hello checks a hello (n bytes at b, from a peer) and, when it
// is well formed, describes it in h: magic and version, at most
// HC_MAX_ARENAS arenas, each non-empty, in increasing window offsets
// without overlap or wrapping (holes are arenas removed since; a base
// address whose range does not wrap either),
// each key and the worker address inside the message and non-empty, and
// nothing after the address. Anything else is HC_ST_PROTOCOL: the
// peer is refused, nothing is imported. No UCX call (the fuzz target calls
// it alone).
int hc_parse_hello(const uint8_t *b, size_t n, hc_hello *h) {
	uint32_t hdr[3];
	if (b == NULL || n < 12)
		return HC_ST_PROTOCOL;
	memcpy(hdr, b, 12);
	if (hdr[0] != HC_MAGIC || hdr[1] != HC_VERSION || hdr[2] > HC_MAX_ARENAS)
		return HC_ST_PROTOCOL;
	size_t o = 12;
	uint64_t start = 0;
	for (uint32_t i = 0; i < hdr[2]; i++) {
		uint64_t f[3];
		uint32_t kl;
		if (n - o < 28)
			return HC_ST_PROTOCOL;
		memcpy(f, b + o, 24);
		memcpy(&kl, b + o + 24, 4);
		o += 28;
		if (n - o < kl || kl == 0 || f[0] < start || f[1] == 0 || f[2] + f[1] < f[2] || f[0] + f[1] < f[0])
			return HC_ST_PROTOCOL;
		h->start[i] = f[0];
		h->len[i] = f[1];
		h->base[i] = f[2];
		h->keyoff[i] = o;
		h->keylen[i] = kl;
		start = f[0] + f[1];
		o += kl;
	}
	uint32_t al;
	if (n - o < 4)
		return HC_ST_PROTOCOL;
	memcpy(&al, b + o, 4);
	o += 4;
	if (n - o != al || al == 0)
		return HC_ST_PROTOCOL;
	h->narenas = hdr[2];
	h->addroff = o;
	h->addrlen = al;
	return UCS_OK;
}

// hc_import turns a received hello into the peer's window: base addresses
// and unpacked remote keys.
int hc_import(hc_be *be, uint32_t idx) {
	hc_peer *p = be->peers[idx];
	uint8_t *b = p->hello;
	hc_hello h;
	int32_t st = hc_parse_hello(b, p->hello_len, &h);
	if (st != UCS_OK) {
		st = HC_ST_PROTOCOL;
		goto out;
	}
	for (uint32_t i = 0; i < h.narenas; i++) {
		p->w->start[i] = h.start[i];
		p->w->len[i] = h.len[i];
		p->w->base[i] = h.base[i];
	}
	if (be->shm_ep) {
		// A data endpoint from the peer's worker address, without peer
		// error handling: the only way UCX 1.13 picks shared-memory
		// lanes (sysv/posix have no peer-failure support; with
		// UCP_ERR_HANDLING_MODE_PEER an address endpoint gets no RMA
		// lanes at all). Peer failure is still seen on the control
		// endpoint, and hc_peer_close then force-closes this one.
		ucp_ep_params_t ep = {
			.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
			.address = (const ucp_address_t *)(b + h.addroff),
		};
		st = ucp_ep_create(be->dworker, &ep, &p->dep);
		if (st != UCS_OK)
			goto out;
	} else {
		p->dep = p->ep; // RMA on the listener's connection (peer error handling)
	}
	for (uint32_t i = 0; i < h.narenas; i++) {
		st = ucp_ep_rkey_unpack(p->dep, b + h.keyoff[i], &p->w->rkey[i]);
		if (st != UCS_OK)
			goto out;
		p->narenas = i + 1;
		// Shared memory: UCX attached the peer's segment while
		// unpacking its key (sysv: shmat; posix: mmap); ucp_rkey_ptr
		// says where. A put or get is then a memcpy the submitter does
		// itself — what UCX's sysv put_short/put_bcopy do, without the
		// request, the flush and the completion ring around them. Not
		// over a key UCX cannot map (registered memory, tcp, RDMA).
		void *ptr;
		if (be->shm_ep && ucp_rkey_ptr(p->w->rkey[i], p->w->base[i], &ptr) == UCS_OK)
			p->w->direct[i] = ptr;
	}
	st = UCS_OK;
	p->state = HC_READY;
out:
	free(p->hello);
	p->hello = NULL;
	if (st != UCS_OK && p->state < HC_FAILED) {
		p->state = HC_FAILED;
		p->fail_status = st;
	}
	return st;
}

// hc_peer_close force-closes a peer's endpoint: UCX completes every request
// still in flight to it with an error, once.
void hc_peer_close(hc_be *be, uint32_t idx, int32_t status) {
	hc_peer *p = be->peers[idx];
	if (p->state == HC_CLOSED)
		return;
	if (p->fail_status == 0)
		p->fail_status = status;
	p->state = HC_CLOSED;
	for (uint32_t i = 0; i < p->narenas; i++) {
		if (p->w->rkey[i] != NULL)
			ucp_rkey_destroy(p->w->rkey[i]);
	}
	free(p->w);
	p->w = NULL;
	p->narenas = 0;
	p->nadded = 0;
	free(p->hello);
	p->hello = NULL;
	while (p->upd_head != NULL) {
		hc_upd *u = p->upd_head;
		p->upd_head = u->next;
		free(u);
	}
	p->upd_tail = NULL;
	p->arena_wait = 0;
	// Arenas being removed: their keys go now; an entry stays until its
	// flush's callback ran (rm_finish frees it).
	for (hc_rm *rm = p->rm; rm != NULL; rm = rm->next) {
		if (rm->rkey != NULL)
			ucp_rkey_destroy(rm->rkey);
		rm->rkey = NULL;
	}
	ucp_request_param_t rp = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = UCP_EP_CLOSE_FLAG_FORCE,
	};
	if (p->dep != NULL && p->dep != p->ep) {
		// UCX 1.13 refuses UCP_EP_CLOSE_FLAG_FORCE for an endpoint
		// without peer error handling (UCS_ERR_INVALID_PARAM, nothing
		// closed): close the data endpoint in flush mode. Its transfers
		// into UCX-allocated segments finished when they were posted
		// (memcpy), so the flush has nothing to wait for.
		ucp_request_param_t drp = {.op_attr_mask = 0};
		ucs_status_ptr_t r = ucp_ep_close_nbx(p->dep, &drp);
		if (UCS_PTR_IS_PTR(r))
			p->dclose_req = r;
		p->dep = NULL;
	}
	if (p->dep == p->ep)
		p->dep = NULL; // one endpoint (no SharedMemory): closed below
	if (p->ep != NULL) {
		ucs_status_ptr_t r = ucp_ep_close_nbx(p->ep, &rp);
		if (UCS_PTR_IS_PTR(r))
			p->close_req = r;
		p->ep = NULL;
	}
	if (p->close_req != NULL || p->dclose_req != NULL || p->hello_req != NULL)
		reap_later(be, p);
	// Notifications not acknowledged yet fail now, once (a late send
	// callback or flush finds them reported).
	while (p->nhead >= 0)
		notify_done(be, p->nhead, p->fail_status ? p->fail_status : UCS_ERR_CANCELED);
	// What UCX did not complete while closing fails now, once. A request
	// on a data endpoint without peer error handling may never complete:
	// its group keeps its slots (late callbacks land there and are
	// ignored) but is reported now.
	for (uint32_t g = 0; g < be->nslots; g++) {
		hc_group *grp = &be->groups[g];
		if (grp->pending > 0 && grp->peer == idx && !grp->orphan) {
			group_complete(be, grp, p->fail_status ? p->fail_status : UCS_ERR_CANCELED);
			grp->orphan = 1;
		}
	}
}

static int reap_req(void **r) {
	if (*r != NULL && ucp_request_check_status(*r) != UCS_INPROGRESS) {
		ucp_request_free(*r);
		*r = NULL;
		return 1;
	}
	return 0;
}

int hc_peer_busy(hc_be *be, uint32_t idx) {
	hc_peer *p = be->peers[idx];
	if (reap_req(&p->hello_req)) {
		free(p->hello_out);
		p->hello_out = NULL;
	}
	reap_req(&p->close_req);
	reap_req(&p->dclose_req);
	return p->hello_req != NULL || p->close_req != NULL || p->dclose_req != NULL || p->ack_req != NULL ||
	       p->rm != NULL;
}

// hc_progress progresses the data worker — up to rounds calls of
// ucp_worker_progress while they report events; each call over tcp is an
// epoll_wait, and the last one, which finds nothing, is a system call for
// nothing: a caller that polls again passes 1 — and the control worker too
// when ctl is set (or when they are one), and returns the events Go must
// look at.
uint32_t hc_progress(hc_be *be, int ctl, int rounds) {
	uint32_t ev = 0;
	for (int i = 0; i < rounds; i++) {
		be->nprogress++;
		if (ucp_worker_progress(be->dworker) == 0)
			break;
		ev = HC_EV_PROGRESS;
	}
	if (ctl && be->worker != be->dworker)
		for (int i = 0; i < 64 && ucp_worker_progress(be->worker) != 0; i++)
			ev = HC_EV_PROGRESS;
	if (be->nreap > 0)
		reap_finished(be);
	return ev | hc_notify_flush(be);
}

// hc_arm arms both workers' event fds (ucp_worker_arm) and then
// progresses them once more: UCS_OK when that found nothing (the caller may
// sleep on the fds), UCS_ERR_BUSY when there are events to progress first
// (the arm failed, or the last look found some; what it found is reported
// by the next hc_progress or hc_submit).
//
// The last look is what makes sleeping safe over RDMA verbs. ucp_worker_arm
// arms a verbs interface's completion queues with ibv_req_notify_cq, which
// raises an event only for a completion added after it. A completion added
// between the caller's last ucp_worker_progress (which found the queue
// empty) and the arm raises none on a device that does not report missed
// completions — rxe (soft-RoCE) does not: the kernel's uverbs arms it
// with IB_CQ_NEXT_COMP alone — and the caller would sleep on a message
// already in its queue until some later event. Arming first and emptying
// the queue after is the order ibv_get_cq_event(3) prescribes; UCX 1.13
// does the reverse (uct_ib_iface_pre_arm, then ibv_req_notify_cq).
int hc_arm(hc_be *be) {
	ucs_status_t st = ucp_worker_arm(be->worker);
	if (st == UCS_OK && be->dworker != be->worker)
		st = ucp_worker_arm(be->dworker);
	if (st != UCS_OK)
		return st;
	be->nprogress++;
	if (ucp_worker_progress(be->dworker) != 0)
		return UCS_ERR_BUSY;
	if (be->worker != be->dworker && ucp_worker_progress(be->worker) != 0)
		return UCS_ERR_BUSY;
	return UCS_OK;
}

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// group_open opens a group for peer p's transfers in this submit (a slot
// is free).
static int32_t group_open(hc_be *be, hc_peer *p, uint32_t peer, int32_t *open, uint64_t *now) {
	int32_t g = be->grp_free;
	hc_group *grp = &be->groups[g];
	be->grp_free = grp->next;
	grp->head = -1;
	grp->pending = 1;
	grp->status = UCS_OK;
	grp->peer = peer;
	grp->has_put = 0;
	grp->orphan = 0;
	grp->notify = -1;
	if (*now == 0)
		*now = now_ns();
	grp->posted = *now;
	grp->next = *open;
	*open = g;
	p->open_group = g;
	return g;
}

uint32_t hc_submit(hc_be *be, int rounds) {
	int32_t open = -1; // groups opened by this submit
	uint64_t now = 0;
	// Go's Flush publishes entries (a release store of sq_pub, owner
	// only); whoever holds the mutex posts them, in order.
	uint32_t pub = __atomic_load_n(&be->sq_pub, __ATOMIC_ACQUIRE);
	for (; be->sq_head != pub; be->sq_head++) {
		hc_sqe *s = &be->sq[be->sq_head & be->sq_mask];
		if (s->peer >= be->npeers || be->peers[s->peer]->state != HC_READY) {
			cq_push(be, s->tag, 0, HC_ST_PEER_GONE);
			continue;
		}
		hc_peer *p = be->peers[s->peer];
		if (s->op == HC_NOTIFY) {
			int32_t g = p->open_group;
			if (be->op_free < 0 || (g < 0 && be->grp_free < 0)) {
				cq_push(be, s->tag, 0, HC_ST_NO_SLOT);
				continue;
			}
			if (g < 0)
				g = group_open(be, p, s->peer, &open, &now);
			// Its group's flush (ucp_ep_flush_nbx: the whole endpoint)
			// completes once every put posted to the peer before it is
			// in the peer's memory; then it is sent (notify_flushed).
			// Later puts open a group of their own.
			hc_group *grp = &be->groups[g];
			grp->has_put = 1;
			grp->notify = be->op_free;
			p->open_group = -1;
			int32_t oi = be->op_free;
			hc_op *op = &be->ops[oi];
			be->op_free = op->next;
			op->tag = s->tag;
			op->len = s->len;
			op->status = UCS_OK;
			op->group = g;
			op->op = HC_NOTIFY;
			op->nstate = HC_NS_WAIT;
			op->ngrp = 1;
			op->nreq = 0;
			op->peer = s->peer;
			op->seq = p->nseq_out++;
			op->addr = s->local;
			if (now == 0)
				now = now_ns();
			op->posted = now;
			op->next = -1;
			if (p->ntail >= 0)
				be->ops[p->ntail].next = oi;
			else
				p->nhead = oi;
			p->ntail = oi;
			be->inflight++;
			continue;
		}
		uint32_t a = 0;
		while (a < p->narenas && s->roff >= p->w->start[a] + p->w->len[a])
			a++;
		if (a == p->narenas || s->roff < p->w->start[a] || s->len > p->w->start[a] + p->w->len[a] - s->roff) {
			cq_push(be, s->tag, 0, HC_ST_BOUNDS);
			continue;
		}
		if (p->w->direct[a] != NULL) {
			// The peer's arena is mapped here (shared memory): copy,
			// done — what UCX's sysv/posix put and get do, without the
			// request and the flush around them.
			uint8_t *r = (uint8_t *)p->w->direct[a] + (s->roff - p->w->start[a]);
			void *l = (void *)(uintptr_t)s->local;
			if (s->op == HC_PUT)
				hc_copy(r, l, s->len);
			else
				hc_copy(l, r, s->len);
			cq_push(be, s->tag, s->len, 0);
			be->ndirect++;
			continue;
		}
		int32_t g = p->open_group;
		if (be->op_free < 0 || (g < 0 && be->grp_free < 0)) {
			cq_push(be, s->tag, 0, HC_ST_NO_SLOT);
			continue;
		}
		if (g < 0)
			g = group_open(be, p, s->peer, &open, &now);
		hc_group *grp = &be->groups[g];
		int32_t oi = be->op_free;
		hc_op *op = &be->ops[oi];
		be->op_free = op->next;
		op->tag = s->tag;
		op->len = s->len;
		op->status = UCS_OK;
		op->group = g;
		op->op = s->op;
		op->next = grp->head;
		grp->head = oi;
		be->inflight++;
		ucp_request_param_t rp = {
			.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
			.cb = {.send = op_cb},
			.user_data = op,
		};
		if (s->arena < HC_MAX_ARENAS && be->memh[s->arena] != NULL) {
			rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
			rp.memh = be->memh[s->arena];
		}
		uint64_t raddr = p->w->base[a] + (s->roff - p->w->start[a]);
		ucs_status_ptr_t r;
		if (s->op == HC_PUT) {
			grp->has_put = 1;
			r = ucp_put_nbx(p->dep, (void *)(uintptr_t)s->local, s->len, raddr, p->w->rkey[a], &rp);
		} else {
			r = ucp_get_nbx(p->dep, (void *)(uintptr_t)s->local, s->len, raddr, p->w->rkey[a], &rp);
		}
		if (UCS_PTR_IS_ERR(r))
			op->status = UCS_PTR_STATUS(r);
		else if (r != NULL)
			grp->pending++;
	}
	// One flush per peer the batch touched: a put is complete once the
	// flush says it reached the peer's memory.
	while (open >= 0) {
		hc_group *grp = &be->groups[open];
		int32_t next = grp->next;
		hc_peer *p = be->peers[grp->peer];
		p->open_group = -1;
		if (grp->has_put) {
			ucp_request_param_t rp = {
				.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
				.cb = {.send = flush_cb},
				.user_data = grp,
			};
			ucs_status_ptr_t r = ucp_ep_flush_nbx(p->dep, &rp);
			if (UCS_PTR_IS_ERR(r))
				grp->status = UCS_PTR_STATUS(r);
			else if (r != NULL)
				grp->pending++;
		}
		group_put(be, open);
		open = next;
	}
	// Everything done at posting (shared memory: memcpys): nothing of
	// ours to progress.
	if (rounds == 0 || (be->inflight == 0 && be->dworker != be->worker))
		return hc_notify_flush(be);
	return hc_progress(be, 0, rounds);
}

// hc_expire declares failed (UCS_ERR_TIMED_OUT) every peer with a batch
// outstanding for longer than timeout_ns: a transfer UCX will never finish
// (a peer that stopped without its connection failing; a shared-memory
// queue a killed process left half written) then fails instead of hanging.
// Returns how many peers it failed; Go closes them (HC_EV_FAIL).
uint32_t hc_expire(hc_be *be, uint64_t timeout_ns) {
	uint64_t now = now_ns();
	uint32_t n = 0;
	for (uint32_t g = 0; g < be->nslots; g++) {
		hc_group *grp = &be->groups[g];
		if (grp->pending <= 0 || grp->orphan || now - grp->posted < timeout_ns)
			continue;
		hc_peer *p = grp->peer < be->npeers ? be->peers[grp->peer] : NULL;
		if (p != NULL && p->state < HC_FAILED) {
			p->state = HC_FAILED;
			p->fail_status = UCS_ERR_TIMED_OUT;
			be->events |= HC_EV_FAIL;
			n++;
		}
	}
	// A notification the peer never acknowledges (its oldest).
	for (uint32_t k = 0; k < be->npeers; k++) {
		hc_peer *p = be->peers[k];
		if (p->nhead >= 0 && p->state < HC_FAILED && now - be->ops[p->nhead].posted >= timeout_ns) {
			peer_fail(be, p, UCS_ERR_TIMED_OUT);
			n++;
		}
	}
	return n;
}

// hc_cancel_all force-closes every peer (Close): their requests complete
// with UCS_ERR_CANCELED. Returns how many posted ops are still in flight.
uint32_t hc_cancel_all(hc_be *be) {
	be->canceling = 1;
	// Published, not posted: canceled before they reached UCX.
	uint32_t pub = __atomic_load_n(&be->sq_pub, __ATOMIC_ACQUIRE);
	for (; be->sq_head != pub; be->sq_head++)
		cq_push(be, be->sq[be->sq_head & be->sq_mask].tag, 0, HC_ST_CANCELED_STAGED);
	for (uint32_t i = 0; i < be->npeers; i++)
		hc_peer_close(be, i, UCS_ERR_CANCELED);
	hc_progress(be, 1, HC_ROUNDS);
	return be->inflight;
}

void hc_destroy(hc_be *be) {
	for (uint32_t i = 0; i < be->npeers; i++) {
		hc_peer_close(be, i, UCS_ERR_CANCELED);
	}
	for (int spin = 0; spin < 100000; spin++) {
		int busy = 0;
		hc_progress(be, 1, HC_ROUNDS);
		for (uint32_t i = 0; i < be->npeers; i++)
			busy |= hc_peer_busy(be, i);
		if (!busy)
			break;
	}
	for (uint32_t i = 0; i < be->nconnreq; i++)
		ucp_listener_reject(be->listener, be->connreq[i]);
	if (be->listener != NULL)
		ucp_listener_destroy(be->listener);
	for (int s = 0; s < HC_MAX_ARENAS; s++)
		hc_unmap(be, s);
	hc_reg_destroy(be);
	for (uint32_t i = 0; i < be->npeers; i++) {
		free(be->peers[i]->hello);
		free(be->peers[i]->hello_out);
		free(be->peers[i]->w);
		free(be->peers[i]);
	}
	free(be->peers);
	free(be->reap);
	free(be->connreq);
	free(be->nrecv);
	ucp_worker_release_address(be->dworker, be->waddr);
	if (be->dworker != be->worker)
		ucp_worker_destroy(be->dworker);
	ucp_worker_destroy(be->worker);
	ucp_cleanup(be->ctx);
	free(be->ops);
	free(be->groups);
	free(be->sq);
	free(be->cq);
	free(be);
}

// hc_ep_info writes ucp_ep_print_info's description of a peer's endpoint
// (its lanes: which transport carries RMA, AM, wireup) into a malloc'd
// string.
char *hc_ep_info(hc_be *be, uint32_t idx) {
	char *s = NULL;
	size_t n = 0;
	if (idx >= be->npeers || be->peers[idx]->dep == NULL)
		return NULL;
	FILE *f = open_memstream(&s, &n);
	if (f == NULL)
		return NULL;
	ucp_ep_print_info(be->peers[idx]->dep, f);
	fclose(f);
	return s;
}
