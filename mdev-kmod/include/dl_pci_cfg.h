/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Config space facts the lender and the borrower share, so that both
 * read a device's capabilities the same way (after vfio_pci_config.c).
 * Kernel-internal: not part of the wire format.
 */
#ifndef DL_PCI_CFG_H
#define DL_PCI_CFG_H

#include <linux/pci_regs.h>
#include <linux/types.h>

/**
 * dl_msi_cap_len() - bytes of an MSI capability.
 * @flags: its Message Control register.
 *
 * Return: 10 or 14 (32- or 64-bit message address), 10 more with
 * per-vector masking (mask and pending bits).
 */
static inline unsigned int dl_msi_cap_len(u16 flags)
{
	unsigned int len = PCI_MSI_DATA_32 + 2;

	if (flags & PCI_MSI_FLAGS_64BIT)
		len += 4;
	if (flags & PCI_MSI_FLAGS_MASKBIT)
		len += 10;
	return len;
}

#endif /* DL_PCI_CFG_H */
