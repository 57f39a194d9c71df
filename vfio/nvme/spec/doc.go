// Package spec is the NVMe specification in code (NVMe 1.4, the parts
// hcomm's driver uses): the controller registers and their fields (CAP, VS,
// CC, CSTS, AQA, the CMB registers, the doorbells), the admin and NVM
// command set opcodes, the 64-byte submission and 16-byte completion entry
// layouts (Command, CQE) with their codecs, the Identify Controller and
// Identify Namespace data the driver reads, the completion status field
// (Status: SCT, SC, CRD, More, DNR), and PRP lists (PRPListPages,
// BuildPRP). It is to the userspace driver (package vfio/nvme) what
// vfio/hdma/model is to the HDMA driver, as SPDK keeps nvme_spec.h apart
// from its driver: it knows nothing of queues, VFIO or DMA mappings.
//
// Errors, for errors.Is: ErrBadTransfer (a transfer no command can carry),
// ErrNotNVMe (identify data this package cannot use). Package nvme
// re-exports both, and maps statuses to its error sentinels (StatusErr).
package spec
