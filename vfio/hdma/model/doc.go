// Package model is the HDMA device model in code: register offsets, bits,
// opcodes, status codes and the 64-byte submission / 16-byte completion
// layouts. It is the contract between the driver (vfio/hdma) and the software
// device (vfio/mock); docs/hdma.md is its prose form, and the two must say the
// same thing.
//
// The package holds constants and a descriptor codec only; it has no errors.
package model
