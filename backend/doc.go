// Package backend is the contract between hcomm's engine and what it moves
// data with, as database/sql/driver is to database/sql: the Backend
// interface a device, file, host-memory or network backend implements, the
// types that cross it (Op, Endpoint, Completion, Status, Env, Counters,
// Description, LocKind, Path), the sentinel errors a backend wraps, and
// the optional interfaces (BatchWaiter, BatchWaitChooser, LazyDoorbell)
// that let the engine wait in a backend and defer its doorbell.
//
// Applications do not use this package: they call package engine and pick
// backends from the packages under backend/ (hdmadev, uringfile, memory,
// nvme, ucx). A backend imports this package and never the engine; the
// engine imports it and no backend (internal/importgraph keeps it so).
package backend
