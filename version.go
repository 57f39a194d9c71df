// Package hcomm names the hcomm module and its version. The library itself
// is in the packages below it: engine (the transfer API), hugepage, ring,
// vfio, backend/..., trace; capi is the C ABI (libhcomm.so) and python/ the
// Python package over it.
package hcomm

// The module's version: semantic versioning, the same in libhcomm.so
// (HCOMM_VERSION_MAJOR/MINOR/PATCH and hcomm_version() in hcomm.h; capi
// checks at compile time that they agree), in the Python package
// (hcomm.__version__) and in every binary's --version.
const (
	VersionMajor = 0
	VersionMinor = 1
	VersionPatch = 0
	Version      = "0.1.0"
)
