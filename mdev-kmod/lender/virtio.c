// SPDX-License-Identifier: GPL-2.0
/*
 * Devices whose DMA may bypass the IOMMU: virtio devices that do not offer
 * VIRTIO_F_ACCESS_PLATFORM.
 *
 * A virtio device without that feature accesses memory at the addresses
 * its driver gives it, as physical addresses, past any IOMMU: QEMU's
 * virtio devices without iommu_platform=on DMA straight into the host's
 * memory, whatever domain the device is attached to. Lent, such a device
 * would read and write this host's RAM at the holder's guest-physical
 * addresses. So the lender refuses a virtio device unless its modern
 * common configuration says it offers the feature; a legacy-only one,
 * which cannot say, is refused too.
 */
#include <linux/pci.h>
#include <linux/virtio_config.h>
#include <linux/virtio_pci.h>

#include "internal.h"

/* PCI device ids of virtio devices, transitional and modern. */
#define DL_VIRTIO_FIRST		0x1000
#define DL_VIRTIO_LAST		0x107f

/*
 * Where the common configuration is: its BAR and offset, from the
 * device's vendor-specific capability of type VIRTIO_PCI_CAP_COMMON_CFG.
 * Return: 0, or -ENOENT when the device has none that fits its BAR.
 */
static int dl_virtio_common_cfg(struct dl_lent *lent, u8 *bar, u32 *off)
{
	struct pci_dev *pdev = lent->pdev;
	u8 pos, type, b;
	u32 o, len;

	for (pos = pci_find_capability(pdev, PCI_CAP_ID_VNDR); pos;
	     pos = pci_find_next_capability(pdev, pos, PCI_CAP_ID_VNDR)) {
		pci_read_config_byte(pdev, pos +
				     offsetof(struct virtio_pci_cap, cfg_type),
				     &type);
		if (type != VIRTIO_PCI_CAP_COMMON_CFG)
			continue;
		pci_read_config_byte(pdev, pos +
				     offsetof(struct virtio_pci_cap, bar), &b);
		pci_read_config_dword(pdev, pos +
				      offsetof(struct virtio_pci_cap, offset),
				      &o);
		pci_read_config_dword(pdev, pos +
				      offsetof(struct virtio_pci_cap, length),
				      &len);
		if (b >= DL_NUM_BARS || !lent->bars[b].map ||
		    len < VIRTIO_PCI_COMMON_DF + 4 ||
		    (u64)o + VIRTIO_PCI_COMMON_DF + 4 > lent->bars[b].size)
			continue;
		*bar = b;
		*off = o;
		return 0;
	}
	return -ENOENT;
}

/**
 * dl_lent_dma_bypass_check() - refuse a device whose DMA may bypass the
 *	IOMMU: a virtio device without VIRTIO_F_ACCESS_PLATFORM.
 * @lent: the device being lent, its memory BARs mapped and decoded.
 *
 * Return: 0, or -EINVAL (with a message saying why) when it must not be
 * lent.
 */
int dl_lent_dma_bypass_check(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	void __iomem *common;
	u32 off, high;
	u8 bar;

	if (pdev->vendor != PCI_VENDOR_ID_REDHAT_QUMRANET ||
	    pdev->device < DL_VIRTIO_FIRST || pdev->device > DL_VIRTIO_LAST)
		return 0;
	if (dl_virtio_common_cfg(lent, &bar, &off)) {
		pci_err(pdev, "lender: a legacy virtio device (no modern common configuration): its DMA may bypass the IOMMU; not lent\n");
		return -EINVAL;
	}
	common = lent->bars[bar].map + off;
	/* Feature bits 32 to 63. */
	iowrite32(1, common + VIRTIO_PCI_COMMON_DFSELECT);
	high = ioread32(common + VIRTIO_PCI_COMMON_DF);
	iowrite32(0, common + VIRTIO_PCI_COMMON_DFSELECT);
	if (high == U32_MAX ||
	    !(high & BIT(VIRTIO_F_ACCESS_PLATFORM - 32))) {
		pci_err(pdev, "lender: a virtio device without VIRTIO_F_ACCESS_PLATFORM: its DMA bypasses the IOMMU (in QEMU, iommu_platform=on gives it the feature); not lent\n");
		return -EINVAL;
	}
	return 0;
}
