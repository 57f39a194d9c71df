// reg.c: the registration cache (see hc.h, hc_reg). Every function runs
// with the backend's mutex held, as hc.c's.
#include "hc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// reg_holds says whether r holds [addr, addr+len): r contains it and, for
// a cover, one of its runs does (never memory of its gaps: the
// application may free and reuse that memory, and a registration of it
// must be of its pages then, not of the ones the cover pinned).
static int reg_holds(const hc_reg *r, uint64_t addr, uint64_t len) {
	if (addr < r->addr || addr + len > r->addr + r->len)
		return 0;
	if (r->nspans == 0)
		return 1;
	uint32_t lo = 0, hi = r->nspans; // first run starting after addr
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (r->spans[2 * mid] <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && addr + len <= r->spans[2 * (lo - 1) + 1];
}

// reg_before is the number of cached entries that start before addr
// (strict) or at or before it: the entries [0, n) are the ones a range
// starting there can lie in (or, strict, overlap from below).
static uint32_t reg_before(const hc_be *be, uint64_t addr, int strict) {
	uint32_t lo = 0, hi = be->nregs;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint64_t a = be->regs[mid]->addr;
		if (a < addr || (!strict && a == addr))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

// reg_oldest visits the entries [0, lim) below tree node k (leaves
// [nlo, nhi)) that end at or after need, and keeps in *best the oldest
// that holds [addr, addr+len). Subtrees whose ends all fall short are
// skipped: the cost is the entries that contain the range's bounds, not
// those that merely start below it.
static void reg_oldest(const hc_be *be, uint32_t k, uint32_t nlo, uint32_t nhi, uint32_t lim, uint64_t addr, uint64_t len,
		       hc_reg **best) {
	if (nlo >= lim || be->reg_end[k] < addr + len)
		return;
	if (nhi - nlo == 1) {
		hc_reg *r = be->regs[nlo];
		if ((*best == NULL || r->seq < (*best)->seq) && reg_holds(r, addr, len))
			*best = r;
		return;
	}
	uint32_t mid = nlo + (nhi - nlo) / 2;
	reg_oldest(be, 2 * k, nlo, mid, lim, addr, len, best);
	reg_oldest(be, 2 * k + 1, mid, nhi, lim, addr, len, best);
}

// reg_find is the oldest cached registration that holds [addr,
// addr+len), or NULL. Oldest, so that a release finds the registration
// its registration took the reference on: a registration older than that
// one and holding the range would have been alive, and found, then
// (registrations live one interval each, and what one holds never
// changes), and the one it took stays alive while the reference does.
hc_reg *reg_find(hc_be *be, uint64_t addr, uint64_t len) {
	hc_reg *best = NULL;
	if (be->nregs > 0)
		reg_oldest(be, 1, 0, be->reg_treecap, reg_before(be, addr, 0), addr, len, &best);
	return best;
}

// reg_tree rebuilds the max tree over the entries' ends (after the
// entries changed).
static void reg_tree(hc_be *be) {
	uint32_t n = be->reg_treecap;
	for (uint32_t i = 0; i < n; i++)
		be->reg_end[n + i] = i < be->nregs ? be->regs[i]->addr + be->regs[i]->len : 0;
	for (uint32_t k = n; k-- > 1;)
		be->reg_end[k] = be->reg_end[2 * k] > be->reg_end[2 * k + 1] ? be->reg_end[2 * k] : be->reg_end[2 * k + 1];
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
	if (total > be->reg_treecap) {
		uint32_t cap = be->reg_treecap ? be->reg_treecap : 16;
		while (cap < total)
			cap *= 2;
		uint64_t *t = realloc(be->reg_end, 2 * (size_t)cap * sizeof(*t));
		if (t == NULL)
			return UCS_ERR_NO_MEMORY;
		be->reg_end = t;
		be->reg_treecap = cap;
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
	reg_tree(be);
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
	if (r != NULL) {
		be->nreg_maps++;
		r->seq = ++be->reg_seq;
	}
	return r;
}

static void reg_free(hc_be *be, hc_reg *r) {
	if (r->rkey != NULL)
		ucp_rkey_buffer_release(r->rkey);
	ucp_mem_unmap(be->ctx, r->memh);
	hc_forget(r->addr, r->len);
	free(r->spans);
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
	reg_tree(be);
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

// A region of a batch, and the cached registration that holds it
// (reg_find: the one its reference goes to), or NULL.
typedef struct {
	uint64_t addr, len;
	hc_reg *r;
} span;

static int span_cmp(const void *a, const void *b) {
	const span *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

// reg_overlaps says whether a cached registration shares a byte with
// [lo, hi): one of those starting before hi ends after lo (the max tree
// over the prefix, O(log n)).
static int reg_overlaps(hc_be *be, uint64_t lo, uint64_t hi) {
	uint32_t n = be->reg_treecap, l = n, r = n + reg_before(be, hi, 1); // leaves [l, r)
	uint64_t end = 0;
	for (; l < r; l /= 2, r /= 2) {
		if (l & 1) {
			if (be->reg_end[l] > end)
				end = be->reg_end[l];
			l++;
		}
		if (r & 1) {
			r--;
			if (be->reg_end[r] > end)
				end = be->reg_end[r];
		}
	}
	return end > lo;
}

// A mapping of the process (/proc/self/maps): one line, or contiguous
// lines of the same permissions and backing, which the kernel keeps apart
// only for flags (madvise, a registration's MADV_DONTFORK).
typedef struct {
	uint64_t lo, hi;
} vma;

// maps_read is the process's mappings, in address order, in *out (free
// it). Returns how many, or -1 with errno set.
static int64_t maps_read(vma **out) {
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t cap = 64 << 10, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (buf == NULL) {
			close(fd);
			errno = ENOMEM;
			return -1;
		}
		if (cap - n < 4096) {
			char *m = realloc(buf, cap * 2);
			if (m == NULL)
				free(buf);
			buf = m;
			cap *= 2;
			continue;
		}
		ssize_t k = read(fd, buf + n, cap - n - 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int e = errno;
			free(buf);
			close(fd);
			errno = e;
			return -1;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	buf[n] = 0;
	size_t lines = 0;
	for (size_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	vma *v = malloc((lines + 1) * sizeof(*v));
	if (v == NULL) {
		free(buf);
		errno = ENOMEM;
		return -1;
	}
	int64_t nv = 0;
	// The previous line's permissions, offset, device, inode and name.
	char pperm[5] = "";
	uint64_t poff = 0, pino = 0;
	unsigned pmaj = 0, pmin = 0;
	const char *pname = "";
	size_t pnlen = 0;
	for (char *line = buf; *line;) {
		char *eol = strchr(line, '\n');
		if (eol == NULL)
			eol = line + strlen(line);
		*eol = 0;
		unsigned long long lo, hi, off, ino;
		unsigned maj, min;
		char perm[5];
		int at = 0;
		if (sscanf(line, "%llx-%llx %4s %llx %x:%x %llu %n", &lo, &hi, perm, &off, &maj, &min, &ino, &at) >= 7) {
			const char *name = at > 0 ? line + at : "";
			size_t nlen = strlen(name);
			int same = nv > 0 && v[nv - 1].hi == lo && strcmp(perm, pperm) == 0 && maj == pmaj && min == pmin &&
				   ino == pino && nlen == pnlen && memcmp(name, pname, nlen) == 0 &&
				   (ino == 0 || poff + (v[nv - 1].hi - v[nv - 1].lo) == off);
			if (same) {
				v[nv - 1].hi = hi;
				poff = off - (lo - v[nv - 1].lo); // the merged mapping's offset
			} else {
				v[nv].lo = lo;
				v[nv].hi = hi;
				nv++;
				poff = off;
			}
			memcpy(pperm, perm, sizeof(perm));
			pmaj = maj;
			pmin = min;
			pino = ino;
			pname = name;
			pnlen = nlen;
		}
		line = eol < buf + n ? eol + 1 : eol;
	}
	// pname points into buf: nothing reads it after the loop.
	free(buf);
	*out = v;
	return nv;
}

// vma_of is the index of the mapping that contains [lo, hi), or -1.
static int64_t vma_of(const vma *v, int64_t n, uint64_t lo, uint64_t hi) {
	int64_t a = 0, b = n; // first mapping ending after lo
	while (a < b) {
		int64_t mid = a + (b - a) / 2;
		if (v[mid].hi <= lo)
			a = mid + 1;
		else
			b = mid;
	}
	return a < n && v[a].lo <= lo && hi <= v[a].hi ? a : -1;
}

// A run: regions of the batch that touch or overlap, sorted (s[first,
// first+cnt)); the registration of its regions that no cached one holds
// (new: reg_new or a cover; NULL when the cache holds every region), and
// the group of runs a covering registration would join (the first run's
// index).
typedef struct {
	uint64_t lo, hi;
	uint32_t first, cnt; // its regions
	uint32_t held;       // of them, held by a cached registration
	uint32_t group;
	int64_t map; // its mapping (vma_of), -2 until looked up
	hc_reg *r;
} run_t;

// bridgeable: may runs a (the last of a group that starts at first) and
// a+1 be joined under the size policy (the gap at most reg_gap, the
// group's gaps at most HC_COVER_SLACK of its regions' bytes; neither run
// cached)? gaps and bytes are the group's so far.
#define HC_COVER_SLACK 8 // gaps * 8 <= bytes: at most 12.5% more registered
static int bridgeable(hc_be *be, const run_t *a, const run_t *b, uint64_t gaps, uint64_t bytes) {
	if (be->reg_gap == 0 || a->held > 0 || b->held > 0)
		return 0;
	uint64_t gap = b->lo - a->hi; // > 0: runs do not touch
	return gap <= be->reg_gap && (gaps + gap) * HC_COVER_SLACK <= bytes + (b->hi - b->lo);
}

static void refusal(hc_be *be, uint64_t addr, uint64_t len, uint32_t runs, int32_t status, int32_t errnum) {
	hc_refusal *f = &be->refusals[be->refusal_n++ % HC_REFUSALS];
	f->addr = addr;
	f->len = len;
	f->runs = runs;
	f->status = status;
	f->errnum = errnum;
}

// hc_reg_batch registers n regions in one call: sorted, adjacent or
// overlapping ones merged into runs, each run one ucp_mem_map unless
// cached registrations already hold each of its regions. Every region
// holds one reference (hc_reg_release drops them): on the oldest cached
// registration that holds it (reg_find, as the release looks it up), or
// else on its run's new one. All or nothing: on a failure no reference is
// taken and nothing new stays.
//
// Runs not cached that lie close together are registered as one covering
// range, gaps included, when (docs/remote.md, "Covering registrations"):
// each gap is at most reg_gap bytes; the group's gaps are at most an
// eighth of its runs' bytes; the whole range lies in one mapping of the
// process (/proc/self/maps, read once per call and only when some runs
// pass the size test: so the gaps are memory the regions' own mapping
// holds); and no cached registration touches the range (every region's
// registration stays the one lookup finds). A cover holds its runs only
// (reg_holds): a later registration of memory in its gaps is a new one.
// A cover UCX refuses is recorded (be->refusals) and its runs registered
// one by one.
int hc_reg_batch(hc_be *be, const uint64_t *addr, const uint64_t *len, uint32_t n) {
	span *s = malloc((n ? n : 1) * sizeof(*s));
	run_t *run = malloc((n ? n : 1) * sizeof(*run));
	hc_reg **add = malloc((n ? n : 1) * sizeof(*add)); // the new ones, in order
	vma *maps = NULL;
	int64_t nmaps = -1;
	ucs_status_t st = UCS_OK;
	uint32_t nrun = 0, nadd = 0;
	if (s == NULL || run == NULL || add == NULL) {
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
		s[i].r = NULL;
	}
	qsort(s, n, sizeof(*s), span_cmp);
	int candidates = 0;
	for (uint32_t i = 0; i < n;) {
		uint64_t lo = s[i].addr, hi = s[i].addr + s[i].len;
		uint32_t j = i + 1;
		while (j < n && s[j].addr <= hi) {
			if (s[j].addr + s[j].len > hi)
				hi = s[j].addr + s[j].len;
			j++;
		}
		run_t *r = &run[nrun];
		r->lo = lo;
		r->hi = hi;
		r->first = i;
		r->cnt = j - i;
		r->held = 0;
		r->group = nrun;
		r->map = -2;
		r->r = NULL;
		for (uint32_t q = i; q < j; q++) {
			s[q].r = reg_find(be, s[q].addr, s[q].len);
			r->held += s[q].r != NULL;
		}
		if (nrun > 0 && bridgeable(be, r - 1, r, 0, (r - 1)->hi - (r - 1)->lo))
			candidates = 1;
		nrun++;
		i = j;
	}
	if (candidates) {
		nmaps = maps_read(&maps);
		if (nmaps < 0)
			refusal(be, 0, 0, 0, UCS_ERR_IO_ERROR, errno);
	}
	// Groups: each run joins the previous run's group when the policy
	// allows it (greedy, in address order).
	if (nmaps >= 0) {
		uint64_t gaps = 0, bytes = 0;
		for (uint32_t k = 0; k < nrun; k++) {
			run_t *r = &run[k];
			if (k > 0 && bridgeable(be, r - 1, r, gaps, bytes)) {
				run_t *g = &run[r[-1].group];
				if (r[-1].map == -2)
					r[-1].map = vma_of(maps, nmaps, r[-1].lo, r[-1].hi);
				r->map = vma_of(maps, nmaps, r->lo, r->hi);
				if (r->map >= 0 && r->map == r[-1].map && !reg_overlaps(be, g->lo, r->hi)) {
					r->group = r[-1].group;
					gaps += r->lo - r[-1].hi;
					bytes += r->hi - r->lo;
					continue;
				}
			}
			gaps = 0;
			bytes = r->hi - r->lo;
		}
	}
	for (uint32_t k = 0; k < nrun;) {
		uint32_t e = k + 1; // the group is [k, e)
		while (e < nrun && run[e].group == k)
			e++;
		if (e - k == 1 && run[k].held == run[k].cnt) {
			k = e; // the cache holds all its regions
			continue;
		}
		if (e - k > 1) {
			uint64_t lo = run[k].lo, hi = run[e - 1].hi;
			hc_reg *c = NULL;
			uint64_t *spans = malloc(2 * (e - k) * sizeof(*spans));
			if (spans == NULL) {
				st = UCS_ERR_NO_MEMORY;
				goto out;
			}
			if (be->reg_refuse)
				st = UCS_ERR_NO_RESOURCE;
			else
				c = reg_new(be, lo, hi - lo, &st);
			if (c == NULL)
				free(spans);
			if (c != NULL) {
				add[nadd++] = c;
				c->spans = spans;
				c->nspans = e - k;
				uint64_t gaps = 0;
				for (uint32_t q = k; q < e; q++) {
					run[q].r = c;
					spans[2 * (q - k)] = run[q].lo;
					spans[2 * (q - k) + 1] = run[q].hi;
					if (q > k)
						gaps += run[q].lo - run[q - 1].hi;
				}
				be->ncovers++;
				be->ncover_gaps += e - k - 1;
				be->ncover_gapbytes += gaps;
				k = e;
				continue;
			}
			refusal(be, lo, hi - lo, e - k, st, 0);
			st = UCS_OK;
		}
		for (; k < e; k++) {
			run[k].r = reg_new(be, run[k].lo, run[k].hi - run[k].lo, &st);
			if (run[k].r == NULL)
				goto out;
			add[nadd++] = run[k].r;
		}
	}
	if ((st = reg_merge(be, add, nadd)) != UCS_OK)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		if (s[i].r != NULL) {
			s[i].r->refs++;
			be->nreg_hits++;
		}
	}
	for (uint32_t k = 0; k < nrun; k++)
		if (run[k].r != NULL)
			run[k].r->refs += run[k].cnt - run[k].held;
	nadd = 0;
out:
	for (uint32_t a = 0; a < nadd; a++)
		reg_free(be, add[a]);
	free(s);
	free(run);
	free(add);
	free(maps);
	return st;
}

// hc_reg_release drops the references hc_reg_batch took for n regions:
// each on the oldest cached registration that holds it (reg_find), the
// one its registration took. Returns how many regions no registration
// held (not registered).
uint32_t hc_reg_release(hc_be *be, const uint64_t *addr, const uint64_t *len, uint32_t n) {
	uint32_t missing = 0, gone = 0;
	for (uint32_t i = 0; i < n; i++) {
		hc_reg *r = reg_find(be, addr[i], len[i]);
		if (r == NULL || r->refs == 0) {
			missing++;
			continue;
		}
		gone += --r->refs == 0;
	}
	if (gone > 0)
		reg_drop(be);
	return missing;
}

// hc_reg_destroy releases every cached registration (hc_destroy).
void hc_reg_destroy(hc_be *be) {
	for (uint32_t i = 0; i < be->nregs; i++)
		reg_free(be, be->regs[i]);
	free(be->regs);
	free(be->reg_end);
	be->regs = NULL;
	be->reg_end = NULL;
	be->nregs = be->regcap = be->reg_treecap = 0;
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
