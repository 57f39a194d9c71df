// reg.c: the registration cache (see hc.h, hc_reg). Every function runs
// with the backend's mutex held, as hc.c's.
#include "hc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// reg_find is the cached registration that contains [addr, addr+len), or
// NULL: a binary search for the last entry starting at or before addr,
// then back while an entry could still reach (reg_maxlen).
hc_reg *reg_find(hc_be *be, uint64_t addr, uint64_t len) {
	uint32_t lo = 0, hi = be->nregs; // first entry with addr > addr
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (be->regs[mid]->addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t i = lo; i-- > 0;) {
		hc_reg *r = be->regs[i];
		if (r->addr + be->reg_maxlen < addr + len)
			break; // no earlier entry is long enough to reach
		if (r->addr + r->len >= addr + len)
			return r;
	}
	return NULL;
}

// reg_merge inserts n new entries (sorted by address) into the sorted
// cache in one pass.
static int reg_merge(hc_be *be, hc_reg **add, uint32_t n) {
	if (n == 0)
		return UCS_OK;
	uint32_t total = be->nregs + n;
	if (total > be->regcap) {
		uint32_t cap = be->regcap ? be->regcap : 16;
		while (cap < total)
			cap *= 2;
		hc_reg **m = realloc(be->regs, cap * sizeof(*m));
		if (m == NULL)
			return UCS_ERR_NO_MEMORY;
		be->regs = m;
		be->regcap = cap;
	}
	// Merge from the back: old entries [0, nregs), new ones add[0, n).
	uint32_t i = be->nregs, j = n, k = total;
	while (j > 0) {
		if (i > 0 && be->regs[i - 1]->addr > add[j - 1]->addr)
			be->regs[--k] = be->regs[--i];
		else
			be->regs[--k] = add[--j];
	}
	be->nregs = total;
	for (uint32_t a = 0; a < n; a++)
		if (add[a]->len > be->reg_maxlen)
			be->reg_maxlen = add[a]->len;
	return UCS_OK;
}

// reg_map is a new registration of [addr, addr+len): one ucp_mem_map of
// its own, no key yet, no reference.
static hc_reg *reg_map(hc_be *be, uint64_t addr, uint64_t len, ucs_status_t *st) {
	hc_reg *r = calloc(1, sizeof(*r));
	if (r == NULL) {
		*st = UCS_ERR_NO_MEMORY;
		return NULL;
	}
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
		.address = (void *)(uintptr_t)addr,
		.length = len,
	};
	*st = ucp_mem_map(be->ctx, &mp, &r->memh);
	if (*st != UCS_OK) {
		free(r);
		return NULL;
	}
	r->addr = addr;
	r->len = len;
	return r;
}

// reg_new is reg_map for the cache (counted in nreg_maps).
static hc_reg *reg_new(hc_be *be, uint64_t addr, uint64_t len, ucs_status_t *st) {
	hc_reg *r = reg_map(be, addr, len, st);
	if (r != NULL)
		be->nreg_maps++;
	return r;
}

static void reg_free(hc_be *be, hc_reg *r) {
	if (r->rkey != NULL)
		ucp_rkey_buffer_release(r->rkey);
	ucp_mem_unmap(be->ctx, r->memh);
	hc_forget(r->addr, r->len);
	free(r);
}

// reg_drop removes entries whose count fell to 0 (ucp_mem_unmap).
static void reg_drop(hc_be *be) {
	uint32_t k = 0;
	for (uint32_t i = 0; i < be->nregs; i++) {
		if (be->regs[i]->refs == 0)
			reg_free(be, be->regs[i]);
		else
			be->regs[k++] = be->regs[i];
	}
	be->nregs = k;
}

// hc_reg_get is the registration for [addr, addr+len): a cached one that
// contains it (one more reference: no UCX call, no system call), or a new
// one (ucp_mem_map), cached.
hc_reg *hc_reg_get(hc_be *be, uint64_t addr, uint64_t len, ucs_status_t *st) {
	*st = UCS_OK;
	hc_reg *r = reg_find(be, addr, len);
	if (r != NULL) {
		r->refs++;
		be->nreg_hits++;
		return r;
	}
	r = reg_new(be, addr, len, st);
	if (r == NULL)
		return NULL;
	r->refs = 1;
	if ((*st = reg_merge(be, &r, 1)) != UCS_OK) {
		reg_free(be, r);
		return NULL;
	}
	return r;
}

// hc_reg_put drops a reference; the last one unmaps the registration.
void hc_reg_put(hc_be *be, hc_reg *r) {
	if (--r->refs == 0)
		reg_drop(be);
}

typedef struct {
	uint64_t addr, len;
} span;

static int span_cmp(const void *a, const void *b) {
	const span *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

// hc_reg_batch registers n regions in one call: sorted, adjacent or
// overlapping ones merged into runs, each run one ucp_mem_map unless a
// cached registration already contains it; every region holds one
// reference on its run's registration (hc_reg_release drops them). All or
// nothing: on a failure no reference is taken and nothing new stays.
int hc_reg_batch(hc_be *be, const uint64_t *addr, const uint64_t *len, uint32_t n) {
	span *s = malloc((n ? n : 1) * sizeof(*s));
	hc_reg **run = malloc((n ? n : 1) * sizeof(*run));   // each run's registration
	uint32_t *cnt = malloc((n ? n : 1) * sizeof(*cnt)); // its regions
	hc_reg **add = malloc((n ? n : 1) * sizeof(*add));  // the new ones, in order
	ucs_status_t st = UCS_OK;
	uint32_t nrun = 0, nadd = 0;
	if (s == NULL || run == NULL || cnt == NULL || add == NULL) {
		st = UCS_ERR_NO_MEMORY;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (len[i] == 0 || addr[i] + len[i] < addr[i]) {
			st = UCS_ERR_INVALID_PARAM;
			goto out;
		}
		s[i].addr = addr[i];
		s[i].len = len[i];
	}
	qsort(s, n, sizeof(*s), span_cmp);
	for (uint32_t i = 0; i < n;) {
		uint64_t lo = s[i].addr, hi = s[i].addr + s[i].len;
		uint32_t j = i + 1;
		while (j < n && s[j].addr <= hi) {
			if (s[j].addr + s[j].len > hi)
				hi = s[j].addr + s[j].len;
			j++;
		}
		hc_reg *r = reg_find(be, lo, hi - lo);
		if (r == NULL) {
			r = reg_new(be, lo, hi - lo, &st);
			if (r == NULL)
				goto out;
			add[nadd++] = r;
		}
		run[nrun] = r;
		cnt[nrun++] = j - i;
		i = j;
	}
	if ((st = reg_merge(be, add, nadd)) != UCS_OK)
		goto out;
	for (uint32_t k = 0; k < nrun; k++) {
		if (run[k]->refs > 0)
			be->nreg_hits += cnt[k];
		run[k]->refs += cnt[k];
	}
	nadd = 0;
out:
	for (uint32_t a = 0; a < nadd; a++)
		reg_free(be, add[a]);
	free(s);
	free(run);
	free(cnt);
	free(add);
	return st;
}

// hc_reg_release drops the references hc_reg_batch took for n regions.
// Returns how many regions no registration contained (not registered).
uint32_t hc_reg_release(hc_be *be, const uint64_t *addr, const uint64_t *len, uint32_t n) {
	uint32_t missing = 0;
	for (uint32_t i = 0; i < n; i++) {
		hc_reg *r = reg_find(be, addr[i], len[i]);
		if (r == NULL || r->refs == 0) {
			missing++;
			continue;
		}
		r->refs--;
	}
	reg_drop(be);
	return missing;
}

// hc_reg_destroy releases every cached registration (hc_destroy).
void hc_reg_destroy(hc_be *be) {
	for (uint32_t i = 0; i < be->nregs; i++)
		reg_free(be, be->regs[i]);
	free(be->regs);
	be->regs = NULL;
	be->nregs = be->regcap = 0;
}

// hc_reg_uncached registers [addr, addr+len) with a ucp_mem_map of its
// own and packs its remote key (ucp_rkey_pack), outside the cache: the two
// calls a program using UCX directly makes to export memory (hcomm-bench's
// grow yardstick). Not counted in nreg_maps. hc_reg_uncached_free releases
// it (the key, ucp_mem_unmap, UCX's own cache of the range).
hc_reg *hc_reg_uncached(hc_be *be, uint64_t addr, uint64_t len, ucs_status_t *st) {
	hc_reg *r = reg_map(be, addr, len, st);
	if (r == NULL)
		return NULL;
	if ((*st = ucp_rkey_pack(be->ctx, r->memh, &r->rkey, &r->rkeylen)) != UCS_OK) {
		r->rkey = NULL; // not packed: reg_free releases no key
		reg_free(be, r);
		return NULL;
	}
	r->refs = 1;
	return r;
}

void hc_reg_uncached_free(hc_be *be, hc_reg *r) { reg_free(be, r); }

// hc_bench_mem_map is the yardstick of the registration benchmarks: n
// regions of size bytes, stride apart from addr, each registered with
// ucp_mem_map and then unregistered, called directly (no cache of
// hcomm's). UCX's verbs memory domain keeps registrations in a cache of its
// own after ucp_mem_unmap, so called again on the same memory they are
// answered from it; cold drops them from it after each round
// (ucm_vm_munmap, what hcomm does when it releases a registration: the
// memory is then registered anew, pinned again, each time).
int hc_bench_mem_map(hc_be *be, uint64_t addr, uint64_t size, uint64_t stride, uint32_t n, int cold) {
	ucp_mem_h *m = malloc((n ? n : 1) * sizeof(*m));
	if (m == NULL)
		return UCS_ERR_NO_MEMORY;
	ucs_status_t st = UCS_OK;
	uint32_t done = 0;
	for (; done < n && st == UCS_OK; done++) {
		ucp_mem_map_params_t mp = {
			.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
			.address = (void *)(uintptr_t)(addr + done * stride),
			.length = size,
		};
		st = ucp_mem_map(be->ctx, &mp, &m[done]);
	}
	if (st != UCS_OK)
		done--;
	for (uint32_t i = 0; i < done; i++)
		ucp_mem_unmap(be->ctx, m[i]);
	if (cold)
		for (uint32_t i = 0; i < done; i++)
			hc_forget(addr + i * stride, size);
	free(m);
	return st;
}

// hc_bench_reg_hits registers [addr, addr+len) n times through the cache
// (hc_reg_batch, one region) and releases it each time, between two marker
// system calls (access of /hcomm-reg-start and /hcomm-reg-end) that a
// tracer of this thread looks for: with the range cached, nothing in
// between is a system call. Returns the first failure.
int hc_bench_reg_hits(hc_be *be, uint64_t addr, uint64_t len, uint32_t n) {
	int st = UCS_OK;
	access("/hcomm-reg-start", F_OK);
	for (uint32_t i = 0; i < n && st == UCS_OK; i++) {
		st = hc_reg_batch(be, &addr, &len, 1);
		if (st == UCS_OK && hc_reg_release(be, &addr, &len, 1) != 0)
			st = UCS_ERR_NO_ELEM;
	}
	access("/hcomm-reg-end", F_OK);
	return st;
}

// hc_bench_reg_hits_window is hc_bench_reg_hits for a tracer that counts
// this thread's system calls from another thread (TestRegisterNoSyscallEBPF):
// it sets *flag to 1 and spins until the tracer sets 2 (its first
// snapshot), makes probes getppid calls (the tracer's check that it sees
// this thread), registers and releases [addr, addr+len) n times through the
// cache, sets 3 and spins until the tracer sets 4 (its second snapshot).
// Spinning on the flag is no system call.
int hc_bench_reg_hits_window(hc_be *be, uint64_t addr, uint64_t len, uint32_t n, uint32_t probes, uint32_t *flag) {
	int st = UCS_OK;
	__atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(flag, __ATOMIC_SEQ_CST) != 2)
		;
	for (uint32_t i = 0; i < probes; i++)
		(void)getppid();
	for (uint32_t i = 0; i < n && st == UCS_OK; i++) {
		st = hc_reg_batch(be, &addr, &len, 1);
		if (st == UCS_OK && hc_reg_release(be, &addr, &len, 1) != 0)
			st = UCS_ERR_NO_ELEM;
	}
	__atomic_store_n(flag, 3, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(flag, __ATOMIC_SEQ_CST) != 4)
		;
	return st;
}
