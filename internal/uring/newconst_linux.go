package uring

// io_uring constants newer than the UAPI headers the generator reads
// (Debian bookworm's linux-libc-dev is 6.1), for the newer kernels hcomm
// runs on. Each is the kernel's value, with the release that introduced it;
// regenerating from newer headers should move them into types_linux.go.
const (
	setupNoMmap           = 1 << 14 // IORING_SETUP_NO_MMAP, Linux 6.5
	setupRegisteredFdOnly = 1 << 15 // IORING_SETUP_REGISTERED_FD_ONLY, Linux 6.5
	setupNoSQArray        = 1 << 16 // IORING_SETUP_NO_SQARRAY, Linux 6.6

	featRegRegRing = 1 << 13 // IORING_FEAT_REG_REG_RING, Linux 6.3
)
