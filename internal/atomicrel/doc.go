// Package atomicrel provides stores with release ordering only: every
// memory access before the store is visible before it, but, unlike
// sync/atomic's sequentially consistent Store (an XCHG on amd64, a full
// barrier of some 20 cycles), a later load may be performed before the
// store is visible.
//
// That is enough to publish data to a reader that loads the word with
// sync/atomic (an acquire load): a seqlock's writer, a ring's producer
// index. It is not enough where the writer must then load a word another
// thread stored before loading this one (Dekker's pattern: "I set done,
// then check whether a waiter parked"); such a writer needs a full barrier
// between the two, as a sequentially consistent store or a locked
// instruction gives.
//
// On amd64 (x86-TSO) every plain store has release semantics, so the
// stores are single MOV instructions in assembly, which the compiler also
// cannot move other memory accesses across. On arm64, whose memory model
// lets a plain store pass earlier loads and stores, they are single STLR
// (store-release) instructions in assembly. Elsewhere, and under the race
// detector (which sees no assembly stores and so would miss the
// happens-before edge they make), they are sync/atomic's stores.
package atomicrel
