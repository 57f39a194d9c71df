package vfio

// The VFIO structs and ioctl numbers are generated from linux/vfio.h, never
// typed by hand: types_linux.go names them, internal/cmd/godefs writes
// zvfio_linux_$GOARCH.go (make generate; make check-generate compares).
//go:generate go run github.com/hcomm-go/hcomm/internal/cmd/godefs .
