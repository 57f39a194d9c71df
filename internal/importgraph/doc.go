// Package importgraph holds the test that keeps hcomm's layering as
// docs/design.md states it: imports point down only, the engine core links
// no backend and no software device, trace never imports the engine, and
// cgo lives only in capi and the UCX backend. It has no code of its own.
package importgraph
