package vfio

// The VFIO structs and ioctl numbers are generated from linux/vfio.h, never
// typed by hand: see types_linux.go and mkzvfio.sh.
//go:generate ./mkzvfio.sh
