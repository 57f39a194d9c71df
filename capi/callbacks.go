package main

import "sync/atomic"

// cbTable holds the C callback and user_data of transfers in flight, by
// index; the index travels in engine.Transfer.User, and one method value
// per handle (state.onDone) is the engine callback, so a submit allocates
// no closure. C values are kept as uintptr: a C pointer (or an arbitrary
// user_data integer) never sits in a Go pointer the garbage collector
// would inspect.
//
// Free indexes form a lock-free stack (Treiber) whose head carries a
// version in its upper 32 bits, so that a pop racing with pop-push-pop of
// the same index (ABA) fails its CAS.
type cbTable struct {
	head atomic.Uint64   // version<<32 | (top index + 1); low 0: empty
	next []atomic.Uint32 // next[i]: index below i on the stack, + 1
	cb   []uintptr
	ud   []uintptr
}

func newCBTable(n int) *cbTable {
	t := &cbTable{next: make([]atomic.Uint32, n), cb: make([]uintptr, n), ud: make([]uintptr, n)}
	for i := n - 1; i >= 0; i-- {
		t.push(uint32(i))
	}
	return t
}

// get takes a free index and stores cb and ud in it; false when all are in
// use.
func (t *cbTable) get(cb, ud uintptr) (uint32, bool) {
	for {
		h := t.head.Load()
		top := uint32(h)
		if top == 0 {
			return 0, false
		}
		nxt := t.next[top-1].Load()
		// Acquire (CAS): the previous owner's put happened before.
		if t.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(nxt)) {
			i := top - 1
			t.cb[i], t.ud[i] = cb, ud
			return i, true
		}
	}
}

// take returns index i's callback and user data and frees i.
func (t *cbTable) take(i uint32) (cb, ud uintptr) {
	cb, ud = t.cb[i], t.ud[i]
	t.put(i)
	return cb, ud
}

// put frees index i without reading it (a submit that failed).
func (t *cbTable) put(i uint32) {
	t.cb[i], t.ud[i] = 0, 0
	t.push(i)
}

func (t *cbTable) push(i uint32) {
	for {
		h := t.head.Load()
		t.next[i].Store(uint32(h))
		// Release (CAS): our writes to cb/ud happen before the next get.
		if t.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(i+1)) {
			return
		}
	}
}

// free counts free indexes (tests).
func (t *cbTable) free() int {
	n := 0
	for top := uint32(t.head.Load()); top != 0; top = t.next[top-1].Load() {
		n++
	}
	return n
}
