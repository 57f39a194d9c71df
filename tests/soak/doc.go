// Package soak runs every engine backend under faults for a set time and
// proves that nothing is lost: `make soak` (10 minutes by
// default; SOAK=60s in `make test`), or
//
//	go test -count=1 -run Soak ./tests/soak -soak 10m [-seed n]
//
// Several engines at once — HDMA over vfio-mock (reaper and poll mode) with
// error, latency, stall and reset injection at a seeded random rate, the
// io_uring file backend on a buffered and an O_DIRECT file, host memory —
// each with submitters in several goroutines (random sizes, offsets, batch
// sizes and submission calls, contexts that expire, queue depths from 8 to
// 64) and a controller that closes the engine at a random moment (Close or
// Shutdown with a short context) and opens a new one over the same device
// or file. Beside them a UCX lane (ucx_lane_test.go, built with cgo): one
// engine on the UCX backend (UCX_TLS from the environment, tcp by default)
// whose peer is a second process that is killed (SIGKILL) every 0.2–1.5 s
// and started again; its transfers are puts read back by gets, and its
// failures must be ucx.ErrPeerGone on a killed peer, as many peers failed
// as were killed, and no UCX endpoint left but the live peer's. Checked
// all along:
//
//   - every callback runs exactly once (and none for a refused submission);
//   - every successful transfer's bytes are verified by CRC-32C: a write
//     to the device or file is read back into cleared memory and compared;
//   - every failure is one the injector logged: device errors equal the
//     mock's injected errors, timeouts do not exceed its injected stalls,
//     reset failures happen only on devices that were reset or stalled,
//     cancellations only while the engine closes, and nothing else;
//   - at the end no goroutine, file descriptor, memory mapping or hugepage
//     is left behind; the RSS slope after warm-up is reported.
//
// A failing run prints its seed; -seed (make soak SEED=n) replays the same
// schedule: the same random decisions per engine and submitter and the same
// fault draws per device (goroutine interleavings still differ).
//
// The package holds tests only; this file documents it.
package soak
