//go:build ignore

// Input to internal/cmd/godefs (`go tool cgo -godefs`, see gen.go): the VFIO
// structs and ioctl numbers of linux/vfio.h, turned into the pure-Go
// zvfio_linux_$GOARCH.go (one per architecture), the way golang.org/x/sys/unix generates its types.
// Nothing here is compiled into the package; regenerate with `make generate`
// (needs gcc and the kernel headers, Debian's linux-libc-dev).

package vfio

/*
#include <linux/vfio.h>
*/
import "C"

// API version, IOMMU types and extensions.
const (
	apiVersion   = C.VFIO_API_VERSION
	type1IOMMU   = C.VFIO_TYPE1_IOMMU
	type1v2IOMMU = C.VFIO_TYPE1v2_IOMMU
	noIOMMU      = C.VFIO_NOIOMMU_IOMMU
)

// ioctl numbers: _IO(VFIO_TYPE, VFIO_BASE + n).
const (
	ioctlGetAPIVersion       = C.VFIO_GET_API_VERSION
	ioctlCheckExtension      = C.VFIO_CHECK_EXTENSION
	ioctlSetIOMMU            = C.VFIO_SET_IOMMU
	ioctlGroupGetStatus      = C.VFIO_GROUP_GET_STATUS
	ioctlGroupSetContainer   = C.VFIO_GROUP_SET_CONTAINER
	ioctlGroupUnsetContainer = C.VFIO_GROUP_UNSET_CONTAINER
	ioctlGroupGetDeviceFD    = C.VFIO_GROUP_GET_DEVICE_FD
	ioctlDeviceGetInfo       = C.VFIO_DEVICE_GET_INFO
	ioctlDeviceGetRegionInfo = C.VFIO_DEVICE_GET_REGION_INFO
	ioctlDeviceGetIRQInfo    = C.VFIO_DEVICE_GET_IRQ_INFO
	ioctlDeviceSetIRQs       = C.VFIO_DEVICE_SET_IRQS
	ioctlDeviceReset         = C.VFIO_DEVICE_RESET
	ioctlIOMMUGetInfo        = C.VFIO_IOMMU_GET_INFO
	ioctlIOMMUMapDMA         = C.VFIO_IOMMU_MAP_DMA
	ioctlIOMMUUnmapDMA       = C.VFIO_IOMMU_UNMAP_DMA
)

// Flags.
const (
	groupFlagsViable       = C.VFIO_GROUP_FLAGS_VIABLE
	groupFlagsContainerSet = C.VFIO_GROUP_FLAGS_CONTAINER_SET

	deviceFlagsReset = C.VFIO_DEVICE_FLAGS_RESET
	deviceFlagsPCI   = C.VFIO_DEVICE_FLAGS_PCI
	deviceFlagsCaps  = C.VFIO_DEVICE_FLAGS_CAPS

	regionInfoFlagRead  = C.VFIO_REGION_INFO_FLAG_READ
	regionInfoFlagWrite = C.VFIO_REGION_INFO_FLAG_WRITE
	regionInfoFlagMmap  = C.VFIO_REGION_INFO_FLAG_MMAP
	regionInfoFlagCaps  = C.VFIO_REGION_INFO_FLAG_CAPS
	regionInfoCapSparse = C.VFIO_REGION_INFO_CAP_SPARSE_MMAP

	irqInfoEventfd    = C.VFIO_IRQ_INFO_EVENTFD
	irqInfoMaskable   = C.VFIO_IRQ_INFO_MASKABLE
	irqInfoAutomasked = C.VFIO_IRQ_INFO_AUTOMASKED
	irqInfoNoresize   = C.VFIO_IRQ_INFO_NORESIZE

	irqSetDataNone      = C.VFIO_IRQ_SET_DATA_NONE
	irqSetDataBool      = C.VFIO_IRQ_SET_DATA_BOOL
	irqSetDataEventfd   = C.VFIO_IRQ_SET_DATA_EVENTFD
	irqSetActionMask    = C.VFIO_IRQ_SET_ACTION_MASK
	irqSetActionUnmask  = C.VFIO_IRQ_SET_ACTION_UNMASK
	irqSetActionTrigger = C.VFIO_IRQ_SET_ACTION_TRIGGER

	iommuInfoPgsizes      = C.VFIO_IOMMU_INFO_PGSIZES
	iommuInfoCaps         = C.VFIO_IOMMU_INFO_CAPS
	iommuInfoCapIOVARange = C.VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE

	dmaMapFlagRead  = C.VFIO_DMA_MAP_FLAG_READ
	dmaMapFlagWrite = C.VFIO_DMA_MAP_FLAG_WRITE
)

// PCI region and IRQ indices.
const (
	pciBAR0RegionIndex   = C.VFIO_PCI_BAR0_REGION_INDEX
	pciROMRegionIndex    = C.VFIO_PCI_ROM_REGION_INDEX
	pciConfigRegionIndex = C.VFIO_PCI_CONFIG_REGION_INDEX
	pciNumRegions        = C.VFIO_PCI_NUM_REGIONS
	pciINTxIRQIndex      = C.VFIO_PCI_INTX_IRQ_INDEX
	pciMSIIRQIndex       = C.VFIO_PCI_MSI_IRQ_INDEX
	pciMSIXIRQIndex      = C.VFIO_PCI_MSIX_IRQ_INDEX
)

type (
	infoCapHeader          C.struct_vfio_info_cap_header
	groupStatus            C.struct_vfio_group_status
	deviceInfo             C.struct_vfio_device_info
	regionInfo             C.struct_vfio_region_info
	regionSparseMmapArea   C.struct_vfio_region_sparse_mmap_area
	regionInfoCapSparseHdr C.struct_vfio_region_info_cap_sparse_mmap
	irqInfo                C.struct_vfio_irq_info
	irqSet                 C.struct_vfio_irq_set
	iommuType1Info         C.struct_vfio_iommu_type1_info
	iovaRange              C.struct_vfio_iova_range
	iommuCapIOVARangeHdr   C.struct_vfio_iommu_type1_info_cap_iova_range
	dmaMap                 C.struct_vfio_iommu_type1_dma_map
	dmaUnmap               C.struct_vfio_iommu_type1_dma_unmap
)

// Sizes of the fixed parts, for argsz and for walking capability chains.
const (
	sizeofInfoCapHeader          = C.sizeof_struct_vfio_info_cap_header
	sizeofGroupStatus            = C.sizeof_struct_vfio_group_status
	sizeofDeviceInfo             = C.sizeof_struct_vfio_device_info
	sizeofRegionInfo             = C.sizeof_struct_vfio_region_info
	sizeofRegionSparseMmapArea   = C.sizeof_struct_vfio_region_sparse_mmap_area
	sizeofRegionInfoCapSparseHdr = C.sizeof_struct_vfio_region_info_cap_sparse_mmap
	sizeofIRQInfo                = C.sizeof_struct_vfio_irq_info
	sizeofIRQSet                 = C.sizeof_struct_vfio_irq_set
	sizeofIOMMUType1Info         = C.sizeof_struct_vfio_iommu_type1_info
	sizeofIOVARange              = C.sizeof_struct_vfio_iova_range
	sizeofIOMMUCapIOVARangeHdr   = C.sizeof_struct_vfio_iommu_type1_info_cap_iova_range
	sizeofDMAMap                 = C.sizeof_struct_vfio_iommu_type1_dma_map
	sizeofDMAUnmap               = C.sizeof_struct_vfio_iommu_type1_dma_unmap
)
