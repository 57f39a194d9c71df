package trace

import (
	"bytes"
	"encoding/binary"
	"os"
)

// reqFBufNode finds REQ_F_BUF_NODE (bit REQ_F_BUF_NODE_BIT of an anonymous
// enum of io_uring) in the kernel's BTF: the flag a request carries while it
// holds a registered buffer. 0 when the kernel has no such flag or its BTF
// cannot be read.
func reqFBufNode() uint64 {
	b, err := os.ReadFile("/sys/kernel/btf/vmlinux")
	if err != nil {
		return 0
	}
	v, ok := btfEnumValue(b, "REQ_F_BUF_NODE_BIT")
	if !ok || v < 0 || v >= 64 {
		return 0
	}
	return 1 << v
}

// BTF type kinds whose records carry enumerators, and the size of each
// kind's data after the 12-byte type record (include/uapi/linux/btf.h).
const (
	btfKindEnum   = 6
	btfKindEnum64 = 19
)

// btfExtra is the size of the data after a type record of kind k with
// vlen members; -1 for an unknown kind.
func btfExtra(kind, vlen int) int {
	switch kind {
	case 1, 14, 17: // INT, VAR, DECL_TAG
		return 4
	case 2, 7, 8, 9, 10, 11, 12, 16, 18: // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
		return 0
	case 3: // ARRAY
		return 12
	case 4, 5, 15: // STRUCT, UNION, DATASEC
		return 12 * vlen
	case btfKindEnum, 13: // ENUM, FUNC_PROTO
		return 8 * vlen
	case btfKindEnum64:
		return 12 * vlen
	}
	return -1
}

// btfEnumValue scans raw BTF (the kernel's /sys/kernel/btf/vmlinux, host
// byte order) for the enumerator name and returns its value. It reads the
// type records in place instead of decoding every type (which takes the
// tracer's start-up a tenth of a second longer).
func btfEnumValue(b []byte, name string) (int64, bool) {
	le := binary.LittleEndian
	if len(b) < 24 || le.Uint16(b) != 0xeB9F {
		return 0, false
	}
	hdrLen := int(le.Uint32(b[4:]))
	typeOff, typeLen := int(le.Uint32(b[8:])), int(le.Uint32(b[12:]))
	strOff, strLen := int(le.Uint32(b[16:])), int(le.Uint32(b[20:]))
	types, strs := hdrLen+typeOff, hdrLen+strOff
	if types < 0 || strs < 0 || types+typeLen > len(b) || strs+strLen > len(b) {
		return 0, false
	}
	want := append([]byte{0}, name...)
	want = append(want, 0)
	i := bytes.Index(b[strs:strs+strLen], want)
	if i < 0 {
		return 0, false
	}
	nameOff := uint32(i + 1)
	for p, end := types, types+typeLen; p+12 <= end; {
		info := le.Uint32(b[p+4:])
		kind, vlen := int(info>>24&0x1f), int(info&0xffff)
		extra := btfExtra(kind, vlen)
		if extra < 0 || p+12+extra > end {
			return 0, false
		}
		m := b[p+12 : p+12+extra]
		switch kind {
		case btfKindEnum:
			for j := 0; j+8 <= len(m); j += 8 {
				if le.Uint32(m[j:]) == nameOff {
					return int64(int32(le.Uint32(m[j+4:]))), true
				}
			}
		case btfKindEnum64:
			for j := 0; j+12 <= len(m); j += 12 {
				if le.Uint32(m[j:]) == nameOff {
					return int64(uint64(le.Uint32(m[j+4:])) | uint64(le.Uint32(m[j+8:]))<<32), true
				}
			}
		}
		p += 12 + extra
	}
	return 0, false
}
