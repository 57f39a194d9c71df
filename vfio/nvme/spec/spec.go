package spec

import "fmt"

// Register offsets in BAR0 (NVMe 1.4, "Controller Registers").
const (
	RegCAP     = 0x00 // Controller Capabilities (64)
	RegVS      = 0x08 // Version
	RegINTMS   = 0x0c // Interrupt Mask Set
	RegINTMC   = 0x10 // Interrupt Mask Clear
	RegCC      = 0x14 // Controller Configuration
	RegCSTS    = 0x1c // Controller Status
	RegNSSR    = 0x20 // NVM Subsystem Reset
	RegAQA     = 0x24 // Admin Queue Attributes
	RegASQ     = 0x28 // Admin Submission Queue Base (64)
	RegACQ     = 0x30 // Admin Completion Queue Base (64)
	RegCMBLOC  = 0x38 // Controller Memory Buffer Location
	RegCMBSZ   = 0x3c // Controller Memory Buffer Size
	RegCMBMSC  = 0x50 // CMB Memory Space Control (64, NVMe 1.4)
	RegCMBSTS  = 0x58 // CMB Status (NVMe 1.4)
	RegDoorbel = 0x1000
)

// CC fields.
const (
	CCEnable     = 1 << 0
	CCIOSQES     = 6 << 16 // 2^6 = 64-byte submission entries
	CCIOCQES     = 4 << 20 // 2^4 = 16-byte completion entries
	CCShnNormal  = 1 << 14
	CCShnMask    = 3 << 14
	CSTSReady    = 1 << 0
	CSTSFatal    = 1 << 1
	CSTSShstMask = 3 << 2
	CSTSShstDone = 2 << 2
)

// CMBMSC / CMBSZ / CMBLOC fields.
const (
	CMBMSCCRE  = 1 << 0 // capabilities registers enabled
	CMBMSCCMSE = 1 << 1 // controller memory space enabled
	CMBSZSQS   = 1 << 0
	CMBSZCQS   = 1 << 1
	CMBSZLISTS = 1 << 2
	CMBSZRDS   = 1 << 3
	CMBSZWDS   = 1 << 4
)

// Cap is the Controller Capabilities register.
type Cap uint64

// MQES is the largest queue size the controller supports (entries, 1-based).
func (c Cap) MQES() int { return int(c&0xffff) + 1 }

// CQR reports whether I/O queues must be physically contiguous.
func (c Cap) CQR() bool { return c>>16&1 != 0 }

// TimeoutUnits is CAP.TO: the worst-case time, in 500 ms units, for CSTS.RDY
// to follow CC.EN.
func (c Cap) TimeoutUnits() int { return int(c >> 24 & 0xff) }

// DSTRD is the doorbell stride: doorbells are 4<<DSTRD bytes apart.
func (c Cap) DSTRD() int { return int(c >> 32 & 0xf) }

// NVMCommandSet reports whether CAP.CSS advertises the NVM command set.
func (c Cap) NVMCommandSet() bool { return c>>37&1 != 0 }

// MPSMin and MPSMax are the smallest and largest memory page sizes in bytes.
func (c Cap) MPSMin() int { return 1 << (12 + int(c>>48&0xf)) }
func (c Cap) MPSMax() int { return 1 << (12 + int(c>>52&0xf)) }

// CMBS reports whether the controller has a Controller Memory Buffer (NVMe
// 1.4: CMBLOC and CMBSZ read 0 until CMBMSC.CRE is set).
func (c Cap) CMBS() bool { return c>>57&1 != 0 }

// Version is the VS register: major<<16 | minor<<8 | tertiary.
type Version uint32

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v>>16, v>>8&0xff, v&0xff)
}

// Admin command opcodes.
const (
	AdminDeleteSQ    = 0x00
	AdminCreateSQ    = 0x01
	AdminGetLogPage  = 0x02
	AdminDeleteCQ    = 0x04
	AdminCreateCQ    = 0x05
	AdminIdentify    = 0x06
	AdminAbort       = 0x08
	AdminSetFeatures = 0x09
	AdminGetFeatures = 0x0a
)

// NVM command set opcodes.
const (
	OpFlush       = 0x00
	OpWrite       = 0x01
	OpRead        = 0x02
	OpWriteZeroes = 0x08
	OpDSM         = 0x09
)

// Identify CNS values and feature identifiers.
const (
	CNSNamespace     = 0x00
	CNSController    = 0x01
	FeatureNumQueues = 0x07
)

// Sizes hcomm's driver (package nvme) fixes: 4 KiB memory pages (CC.MPS = 0, which every
// controller supports: CAP.MPSMIN is at least 4 KiB and the driver refuses
// one whose minimum is larger), 64-byte SQ and 16-byte CQ entries.
const (
	PageSize = 4096
	SQESize  = 64
	CQESize  = 16
	// PRPPerPage is how many 8-byte PRP entries fit in one list page.
	PRPPerPage = PageSize / 8
)
