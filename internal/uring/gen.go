package uring

// The io_uring structs and constants are generated from linux/io_uring.h,
// never typed by hand: types_linux.go names them, internal/cmd/godefs writes
// zuring_linux_$GOARCH.go (make generate; make check-generate compares).
//go:generate go run github.com/hcomm-go/hcomm/internal/cmd/godefs .
