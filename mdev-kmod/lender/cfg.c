// SPDX-License-Identifier: GPL-2.0
/*
 * Config space writes from the borrower, filtered.
 *
 * The borrower (and the guest behind it) may drive the device, but must
 * not move it in the lender's address space, take its interrupts, change
 * how it sits on the link, or create new functions. Like vfio-pci's
 * per-capability permission tables (drivers/vfio/pci/vfio_pci_config.c),
 * each config byte has a mask of the bits a borrower may write; computed
 * once at probe. What is kept from the hardware:
 *  - the BARs, the expansion ROM BAR, the status register (write 1 to
 *    clear), BIST and the read-only header fields;
 *  - in the command register every bit but memory and I/O space, bus
 *    master and INTx disable;
 *  - the MSI, MSI-X and power management capabilities (the lender owns
 *    the vectors; D3 would take the BARs away), every capability's id and
 *    next pointer;
 *  - in the PCIe capability all but the safe bits of device control
 *    (not max payload, max read request, phantom functions); a write of
 *    function-level reset does pci_reset_function_locked() instead;
 *  - extended capabilities other than AER and vendor-specific ones
 *    (SR-IOV would create functions on the lender, resizable BAR would
 *    move BARs, ATS/PRI/PASID would let the device bypass translation).
 * Reads are not filtered: the borrower builds its guest's view itself.
 */
#include <linux/pci.h>
#include <linux/slab.h>

#include "internal.h"

#define DL_CMD_WMASK	(PCI_COMMAND_IO | PCI_COMMAND_MEMORY | \
			 PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE)
#define DL_DEVCTL_WMASK	(PCI_EXP_DEVCTL_CERE | PCI_EXP_DEVCTL_NFERE | \
			 PCI_EXP_DEVCTL_FERE | PCI_EXP_DEVCTL_URRE | \
			 PCI_EXP_DEVCTL_RELAX_EN | PCI_EXP_DEVCTL_EXT_TAG | \
			 PCI_EXP_DEVCTL_AUX_PME | PCI_EXP_DEVCTL_NOSNOOP_EN)

static void dl_wmask_set(struct dl_lent *lent, unsigned int pos,
			 unsigned int len, u8 mask)
{
	if (pos >= lent->cfg_size)
		return;
	len = min(len, lent->cfg_size - pos);
	memset(lent->wmask + pos, mask, len);
}

static void dl_wmask_set16(struct dl_lent *lent, unsigned int pos, u16 mask)
{
	dl_wmask_set(lent, pos, 1, mask & 0xff);
	dl_wmask_set(lent, pos + 1, 1, mask >> 8);
}

static unsigned int dl_msi_cap_len(struct pci_dev *pdev)
{
	unsigned int len = PCI_MSI_DATA_32 + 2;
	u16 flags;

	pci_read_config_word(pdev, pdev->msi_cap + PCI_MSI_FLAGS, &flags);
	if (flags & PCI_MSI_FLAGS_64BIT)
		len += 4;
	if (flags & PCI_MSI_FLAGS_MASKBIT)
		len += 10;
	return len;
}

static void dl_cfg_std_caps(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	int ttl = (PCI_CFG_SPACE_SIZE - PCI_STD_HEADER_SIZEOF) / PCI_CAP_SIZEOF;
	u8 pos, id;

	pci_read_config_byte(pdev, PCI_CAPABILITY_LIST, &pos);
	while (pos >= PCI_STD_HEADER_SIZEOF && ttl--) {
		pos &= ~3;
		pci_read_config_byte(pdev, pos + PCI_CAP_LIST_ID, &id);
		if (id == 0xff)
			break;
		dl_wmask_set(lent, pos, PCI_CAP_SIZEOF, 0);
		switch (id) {
		case PCI_CAP_ID_MSI:
			dl_wmask_set(lent, pos, dl_msi_cap_len(pdev), 0);
			break;
		case PCI_CAP_ID_MSIX:
			dl_wmask_set(lent, pos, PCI_CAP_MSIX_SIZEOF, 0);
			break;
		case PCI_CAP_ID_PM:
			dl_wmask_set(lent, pos, PCI_PM_SIZEOF, 0);
			break;
		case PCI_CAP_ID_EXP:
			dl_wmask_set(lent, pos, PCI_CAP_EXP_ENDPOINT_SIZEOF_V2, 0);
			dl_wmask_set16(lent, pos + PCI_EXP_DEVCTL, DL_DEVCTL_WMASK);
			lent->flr_pos = pos + PCI_EXP_DEVCTL;
			break;
		default:
			break;
		}
		pci_read_config_byte(pdev, pos + PCI_CAP_LIST_NEXT, &pos);
	}
}

#define DL_MAX_EXT_CAPS	64

static void dl_cfg_ext_caps(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	u16 pos[DL_MAX_EXT_CAPS];
	u8 id[DL_MAX_EXT_CAPS];
	unsigned int n = 0, i, j;
	int p = PCI_CFG_SPACE_SIZE;
	u32 header;

	if (lent->cfg_size <= PCI_CFG_SPACE_SIZE)
		return;
	/* Nothing is writable up there but the capabilities allowed below. */
	dl_wmask_set(lent, PCI_CFG_SPACE_SIZE,
		     lent->cfg_size - PCI_CFG_SPACE_SIZE, 0);

	while (n < DL_MAX_EXT_CAPS && p >= PCI_CFG_SPACE_SIZE &&
	       p < lent->cfg_size) {
		if (pci_read_config_dword(pdev, p, &header) ||
		    !header || header == ~0U)
			break;
		pos[n] = p;
		id[n++] = PCI_EXT_CAP_ID(header);
		p = PCI_EXT_CAP_NEXT(header);
	}

	for (i = 0; i < n; i++) {
		unsigned int end = lent->cfg_size;

		if (id[i] != PCI_EXT_CAP_ID_ERR && id[i] != PCI_EXT_CAP_ID_VNDR)
			continue;
		/* It runs up to the next capability above it, or the end. */
		for (j = 0; j < n; j++)
			if (pos[j] > pos[i] && pos[j] < end)
				end = pos[j];
		dl_wmask_set(lent, pos[i] + 4, end - pos[i] - 4, 0xff);
	}
}

/**
 * dl_lent_cfg_init() - work out which config bits a borrower may write.
 * @lent: the device being lent.
 *
 * Return: 0 or -ENOMEM.
 */
int dl_lent_cfg_init(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;

	lent->cfg_size = pdev->cfg_size;
	lent->wmask = kmalloc(lent->cfg_size, GFP_KERNEL);
	if (!lent->wmask)
		return -ENOMEM;

	/* Device-specific registers are the device's; the header is not. */
	memset(lent->wmask, 0xff, lent->cfg_size);
	dl_wmask_set(lent, 0, PCI_STD_HEADER_SIZEOF, 0);
	dl_wmask_set16(lent, PCI_COMMAND, DL_CMD_WMASK);
	dl_wmask_set(lent, PCI_CACHE_LINE_SIZE, 1, 0xff);
	dl_wmask_set(lent, PCI_LATENCY_TIMER, 1, 0xff);
	dl_wmask_set(lent, PCI_INTERRUPT_LINE, 1, 0xff);

	dl_cfg_std_caps(lent);
	dl_cfg_ext_caps(lent);
	return 0;
}

/**
 * dl_lent_cfg_free() - free what dl_lent_cfg_init() allocated.
 * @lent: the device.
 */
void dl_lent_cfg_free(struct dl_lent *lent)
{
	kfree(lent->wmask);
	lent->wmask = NULL;
}

/**
 * dl_lent_cfg_write() - a config write from the holder, filtered.
 * @lent: the device; its device lock and @lent->lock held.
 * @pos: offset, checked: naturally aligned, inside config space.
 * @size: 1, 2 or 4.
 * @val: the value.
 *
 * Bits the borrower may not write keep the hardware's value; bytes with no
 * writable bit are not written at all (so write-1-to-clear registers next
 * to writable ones are not cleared by accident).
 *
 * Return: 0, 1 if (part of) the write was kept from the hardware, or
 * -errno if the hardware access or a requested reset failed.
 */
int dl_lent_cfg_write(struct dl_lent *lent, unsigned int pos,
		      unsigned int size, u32 val)
{
	struct pci_dev *pdev = lent->pdev;
	bool filtered = false, flr = false;
	unsigned int i;
	int ret = 0;

	device_lock_assert(&pdev->dev);
	lockdep_assert_held(&lent->lock);

	/* Function-level reset: not written, done properly instead. */
	if (lent->flr_pos && pos <= lent->flr_pos + 1 &&
	    pos + size > lent->flr_pos + 1 &&
	    ((val >> ((lent->flr_pos + 1 - pos) * 8)) & 0xff) &
	    (PCI_EXP_DEVCTL_BCR_FLR >> 8))
		flr = true;

	for (i = 0; i < size; ) {
		u8 m = lent->wmask[pos + i];
		u8 cur;

		if (!m) {
			if ((val >> (i * 8)) & 0xff)
				filtered = true;
			i++;
			continue;
		}
		/* Registers of 16 bits are written at once. */
		if (!((pos + i) & 1) && i + 1 < size &&
		    lent->wmask[pos + i + 1]) {
			u16 m16 = m | (lent->wmask[pos + i + 1] << 8);
			u16 v = val >> (i * 8);
			u16 c;

			ret = pci_read_config_word(pdev, pos + i, &c);
			if (ret)
				break;
			if ((v & ~m16) != (c & ~m16))
				filtered = true;
			ret = pci_write_config_word(pdev, pos + i,
						    (c & ~m16) | (v & m16));
			if (ret)
				break;
			i += 2;
			continue;
		}
		ret = pci_read_config_byte(pdev, pos + i, &cur);
		if (ret)
			break;
		if ((((val >> (i * 8)) & 0xff) & ~m) != (cur & ~m))
			filtered = true;
		ret = pci_write_config_byte(pdev, pos + i,
					    (cur & ~m) | ((val >> (i * 8)) & m));
		if (ret)
			break;
		i++;
	}
	if (ret)
		return pcibios_err_to_errno(ret);

	if (pos < PCI_COMMAND + 2 && pos + size > PCI_COMMAND)
		pci_read_config_word(pdev, PCI_COMMAND, &lent->cmd);

	if (flr) {
		dl_lent_count(lent, DL_LCNT_RESETS);
		ret = pci_reset_function_locked(pdev);
		pci_read_config_word(pdev, PCI_COMMAND, &lent->cmd);
		if (ret)
			return ret;
	}
	return filtered ? 1 : 0;
}
