// SPDX-License-Identifier: GPL-2.0
/*
 * The resets of the functions of a lent group (group.c): which of them
 * resets alone, and their bus's reset for those that do not. Apart from
 * group.c, whose logic the unit tests run: these only ask the PCI core.
 */
#include <linux/pci.h>

#include "internal.h"

/**
 * dl_lent_probe_resets_alone() - whether a function has a reset that
 *	resets it alone: FLR, AF FLR or a PM reset.
 * @pdev: the function, a member of a lent group, being probed.
 *
 * Not its bus's: the functions of a lent group share their bus, and Linux
 * may have kept "bus" among a function's reset methods from probing it
 * before its siblings appeared, though such a reset now fails.
 *
 * Return: true if it has one (&dl_lent.resets_alone).
 */
bool dl_lent_probe_resets_alone(struct pci_dev *pdev)
{
	u16 pmcsr;
	u8 cap;

	if (!pcie_reset_flr(pdev, PCI_RESET_PROBE))
		return true;
	cap = pci_find_capability(pdev, PCI_CAP_ID_AF);
	if (cap) {
		u8 af;

		pci_read_config_byte(pdev, cap + PCI_AF_CAP, &af);
		if ((af & PCI_AF_CAP_TP) && (af & PCI_AF_CAP_FLR))
			return true;
	}
	if (!pdev->pm_cap || (pdev->dev_flags & PCI_DEV_FLAGS_NO_PM_RESET))
		return false;
	pci_read_config_word(pdev, pdev->pm_cap + PCI_PM_CTRL, &pmcsr);
	return !(pmcsr & PCI_PM_CTRL_NO_SOFT_RESET);
}

/**
 * dl_lent_reset_bus() - reset the bus (or slot) of a lent group's
 *	functions, all of them.
 * @pdev: one of them; no device lock held (pci_reset_bus() tries them).
 *
 * pci_reset_bus() says -ENOTTY both when the bus cannot be reset and when,
 * after the reset, the bridge did not report its link active again in
 * time (QEMU's pcie-root-port did not, in the group check). In the
 * second case the functions were reset: if each answers a config read,
 * so that its state was restored, that is a reset done.
 *
 * Return: 0; -EAGAIN if a device lock was taken; another -errno.
 */
int dl_lent_reset_bus(struct pci_dev *pdev)
{
	struct pci_dev *sib;
	int ret;

	if (pci_probe_reset_slot(pdev->slot) && pci_probe_reset_bus(pdev->bus))
		return -ENOTTY;
	ret = pci_reset_bus(pdev);
	if (ret != -ENOTTY)
		return ret;
	list_for_each_entry(sib, &pdev->bus->devices, bus_list)
		if (!pci_device_is_present(sib))
			return ret;
	pci_info_ratelimited(pdev,
			     "lender: the bus was reset, though its bridge did not report the link up again; every function answers\n");
	return 0;
}
