// SPDX-License-Identifier: GPL-2.0
/*
 * Memory decode for the lender's own accesses to the MSI-X table and PBA,
 * which lie in a BAR the holder may have turned decode off for.
 *
 * Used by the function reset (cfg.c) and by the vectors (irq.c), which
 * both reach the table; below both, so neither calls up into the other.
 */
#include <linux/pci.h>

#include "internal.h"

/**
 * dl_lent_memory_enable() - turn memory decode on for an access of the
 *	lender's own to the MSI-X table or PBA, if the holder turned it off.
 * @lent: the device; @lent->lock held. The holder's command writes
 *	(dl_lent_cfg_write()) take it too, so none comes in between this
 *	and dl_lent_memory_restore().
 *
 * The table and PBA lie in a memory BAR. With decode off, what the kernel
 * does there for the lender (programming vectors when they are allocated,
 * unmasking them in request_irq(), masking them in free_irq() and when
 * MSI-X is disabled, restoring them after a reset) is dropped, and the
 * vectors never fire, or, on some platforms, faults the host (the class
 * of CVE-2020-12888). vfio-pci brackets the same calls with
 * vfio_pci_memory_lock_and_enable(). Only the hardware's bit changes:
 * @lent->cmd keeps the holder's, so its BAR accesses are still refused.
 *
 * Return: whether decode was turned on, for dl_lent_memory_restore().
 */
bool dl_lent_memory_enable(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	u16 cmd;

	lockdep_assert_held(&lent->lock);

	if (pci_read_config_word(pdev, PCI_COMMAND, &cmd) ||
	    (cmd & PCI_COMMAND_MEMORY))
		return false;
	return !pci_write_config_word(pdev, PCI_COMMAND,
				      cmd | PCI_COMMAND_MEMORY);
}

/**
 * dl_lent_memory_restore() - turn memory decode off again after
 *	dl_lent_memory_enable().
 * @lent: the device; @lent->lock held since dl_lent_memory_enable().
 * @enabled: what it returned: decode is turned off only if it turned it on.
 *
 * Only the decode bit goes back: the MSI code may have changed INTx
 * disable meanwhile (pci_intx_for_msi()), and that change stays.
 */
void dl_lent_memory_restore(struct dl_lent *lent, bool enabled)
{
	struct pci_dev *pdev = lent->pdev;
	u16 cmd;

	lockdep_assert_held(&lent->lock);

	if (!enabled || pci_read_config_word(pdev, PCI_COMMAND, &cmd))
		return;
	pci_write_config_word(pdev, PCI_COMMAND, cmd & ~PCI_COMMAND_MEMORY);
}
