package uring

// The io_uring structs and constants are generated from linux/io_uring.h,
// never typed by hand: see types_linux.go and mkzuring.sh.
//go:generate ./mkzuring.sh
