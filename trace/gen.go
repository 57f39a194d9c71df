package trace

// The system call tables, per architecture, from the kernel UAPI headers
// (mksyscalls.go says which; make check-generate compares).
//go:generate go run mksyscalls.go -arch amd64 -o zsyscalls_amd64.go
//go:generate go run mksyscalls.go -arch arm64 -o zsyscalls_arm64.go
