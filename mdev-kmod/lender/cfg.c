// SPDX-License-Identifier: GPL-2.0
/*
 * Config space accesses from the borrower, filtered, and the lender's
 * function reset.
 *
 * The borrower (and the guest behind it) may drive the device, but must
 * not move it in the lender's address space, take its interrupts, change
 * how it sits on the link, reset it behind the lender's back or create
 * new functions. Like vfio-pci (drivers/vfio/pci/vfio_pci_config.c), each
 * config byte has its permissions in a per-byte map laid once at probe
 * from the tables of the model shared with the borrower (dl_pci_cfg.h):
 * the header's, and each capability's (dl_cfg_cap_perms()), writable
 * only where its table says so.
 * What is kept from the hardware:
 *  - the BARs, the expansion ROM BAR, the status register (write 1 to
 *    clear), BIST and the read-only header fields;
 *  - in the command register every bit but memory and I/O space and bus
 *    master (the header's table: dl_cfg_header_perms());
 *  - every capability without a permission table: MSI, MSI-X and power
 *    management among them (the lender owns the vectors; D3 would take
 *    the BARs away); where its length is not known, everything up to the
 *    next capability;
 *  - every capability's id and next pointer;
 *  - in the PCIe capability all but the safe bits of device control
 *    (not max payload, max read request, phantom functions);
 *  - extended capabilities other than AER and vendor-specific ones
 *    (SR-IOV would create functions on the lender, resizable BAR would
 *    move BARs, ATS/PRI/PASID would let the device bypass translation).
 * Some bits are virtual: the lender acts on them instead of writing them.
 *  - INTx disable in the command register is the borrower's copy: reads
 *    return it, and it masks the INTx relay; INTx at the device is the
 *    lender's (irq.c);
 *  - function-level reset, in PCIe device control or in the Advanced
 *    Features capability, is dl_lent_reset(), where the device can do it.
 * Memory decode is the holder's to turn off, but the lender's own accesses
 * to the MSI-X table and PBA, which lie in a BAR, turn it on for their
 * while (dl_lent_memory_enable()).
 * Reads are not filtered otherwise: the borrower builds its guest's view
 * itself.
 */
#include <linux/pci.h>
#include <linux/slab.h>

#include "../include/dl_pci_cfg.h"
#include "internal.h"

/* A capability found in config space. */
struct dl_cap {
	u16 pos;
	u16 id;
};

#define DL_MAX_CAPS	64

/* Where the device says it can do a function-level reset, note the bit. */
static void dl_cfg_flr(struct dl_lent *lent, u16 id, unsigned int pos)
{
	struct pci_dev *pdev = lent->pdev;
	u8 cap;

	if (id == PCI_CAP_ID_EXP && (pdev->devcap & PCI_EXP_DEVCAP_FLR)) {
		lent->flr_pos = pos + PCI_EXP_DEVCTL + 1;
	} else if (id == PCI_CAP_ID_AF) {
		pci_read_config_byte(pdev, pos + PCI_AF_CAP, &cap);
		if ((cap & PCI_AF_CAP_TP) && (cap & PCI_AF_CAP_FLR))
			lent->af_flr_pos = pos + PCI_AF_CTRL;
	}
}

/*
 * Lay the tables of the @n capabilities at @caps over the map: read-only
 * but where a table says otherwise. Each ends at its length, but no
 * further than the next capability above it, or @end.
 */
static void dl_cfg_caps(struct dl_lent *lent, const struct dl_cap *caps,
			unsigned int n, bool ext, unsigned int end)
{
	const struct dl_cfg_perm *rows;
	unsigned int i, j, nrows;

	for (i = 0; i < n; i++) {
		unsigned int pos = caps[i].pos, next = end, len;
		u16 reg2 = 0;

		for (j = 0; j < n; j++)
			if (caps[j].pos > pos && caps[j].pos < next)
				next = caps[j].pos;
		len = next - pos;
		if (!ext) {
			pci_read_config_word(lent->pdev, pos + PCI_CAP_FLAGS,
					     &reg2);
			len = dl_std_cap_len(caps[i].id, reg2, len);
		}
		rows = dl_cfg_cap_perms(ext, caps[i].id, reg2, &nrows);
		dl_cfg_map_rows(lent->cfg_map, lent->cfg_size, pos, len, rows,
				nrows);
		if (!ext)
			dl_cfg_flr(lent, caps[i].id, pos);
	}
}

static void dl_cfg_std_caps(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	int ttl = (PCI_CFG_SPACE_SIZE - PCI_STD_HEADER_SIZEOF) / PCI_CAP_SIZEOF;
	struct dl_cap caps[DL_MAX_CAPS];
	unsigned int n = 0;
	u8 pos, id;

	pci_read_config_byte(pdev, PCI_CAPABILITY_LIST, &pos);
	while (n < DL_MAX_CAPS && pos >= PCI_STD_HEADER_SIZEOF && ttl--) {
		pos &= ~3;
		pci_read_config_byte(pdev, pos + PCI_CAP_LIST_ID, &id);
		if (id == 0xff)
			break;
		caps[n].pos = pos;
		caps[n++].id = id;
		pci_read_config_byte(pdev, pos + PCI_CAP_LIST_NEXT, &pos);
	}
	dl_cfg_caps(lent, caps, n, false, PCI_CFG_SPACE_SIZE);
}

static void dl_cfg_ext_caps(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	struct dl_cap caps[DL_MAX_CAPS];
	unsigned int n = 0;
	int p = PCI_CFG_SPACE_SIZE;
	unsigned int off;
	u32 header;

	if (lent->cfg_size <= PCI_CFG_SPACE_SIZE)
		return;
	/* Nothing is writable up there but what the tables allow. */
	for (off = PCI_CFG_SPACE_SIZE; off < lent->cfg_size; off++)
		lent->cfg_map[off].wmask = 0;

	while (n < DL_MAX_CAPS && p >= PCI_CFG_SPACE_SIZE &&
	       p < lent->cfg_size) {
		if (pci_read_config_dword(pdev, p, &header) ||
		    !header || header == ~0U)
			break;
		caps[n].pos = p;
		caps[n++].id = PCI_EXT_CAP_ID(header);
		p = PCI_EXT_CAP_NEXT(header);
	}
	dl_cfg_caps(lent, caps, n, true, lent->cfg_size);
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
	unsigned int off;

	lent->cfg_size = pdev->cfg_size;
	lent->cfg_map = kcalloc(lent->cfg_size, sizeof(*lent->cfg_map),
				GFP_KERNEL);
	lent->cfg_orig = kzalloc(lent->cfg_size, GFP_KERNEL);
	if (!lent->cfg_map || !lent->cfg_orig) {
		dl_lent_cfg_free(lent);
		return -ENOMEM;
	}
	for (off = 0; off < lent->cfg_size; off++)
		pci_read_config_byte(pdev, off, &lent->cfg_orig[off]);

	/* Device-specific registers are the device's; the header is not. */
	dl_cfg_map_init(lent->cfg_map, lent->cfg_size);
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
	kfree(lent->cfg_map);
	lent->cfg_map = NULL;
	kfree(lent->cfg_orig);
	lent->cfg_orig = NULL;
}

/**
 * dl_lent_cfg_restore() - put back what a holder may have written past the
 *	standard header, as the device was lent.
 * @lent: the device, just reset and its saved state restored; its device
 *	lock and @lent->lock held.
 *
 * pci_restore_state() restores the header and the capabilities the PCI
 * core knows; a function reset clears what the device resets. Neither
 * covers bytes between capabilities (writable as vfio-pci leaves them:
 * devices hide registers there) or vendor-specific bodies, which QEMU's
 * devices keep across a reset: the next holder would read what the last
 * one wrote there. Only the writable bits of bytes that differ are
 * written, one byte at a time.
 */
void dl_lent_cfg_restore(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	unsigned int off;
	u8 cur, want;

	device_lock_assert(&pdev->dev);
	lockdep_assert_held(&lent->lock);

	for (off = PCI_STD_HEADER_SIZEOF; off < lent->cfg_size; off++) {
		u8 m = lent->cfg_map[off].wmask;

		if (!m || pci_read_config_byte(pdev, off, &cur))
			continue;
		want = (cur & ~m) | (lent->cfg_orig[off] & m);
		if (want != cur)
			pci_write_config_byte(pdev, off, want);
	}
}

/*
 * The bits @bits of config byte @at (none if 0), where an access of @size
 * bytes at @pos has them; 0 if the access does not cover @at.
 */
static u32 dl_cfg_bits(unsigned int pos, unsigned int size, unsigned int at,
		       u8 bits)
{
	if (!at || at < pos || at >= pos + size)
		return 0;
	return (u32)bits << ((at - pos) * 8);
}

/**
 * dl_lent_cfg_read() - a config read for a peer.
 * @lent: the device; @lent->lock held.
 * @pos: offset, checked: naturally aligned, inside config space.
 * @size: 1, 2 or 4.
 * @val: the value read (all ones on error).
 *
 * The hardware's value, but for the virtual INTx disable bit.
 *
 * Return: 0 or -errno.
 */
int dl_lent_cfg_read(struct dl_lent *lent, unsigned int pos,
		     unsigned int size, u32 *val)
{
	struct pci_dev *pdev = lent->pdev;
	u32 vintx = dl_cfg_bits(pos, size, PCI_COMMAND + 1,
				PCI_COMMAND_INTX_DISABLE >> 8);
	u16 v16;
	u8 v8;
	int ret;

	lockdep_assert_held(&lent->lock);

	switch (size) {
	case 1:
		ret = pci_read_config_byte(pdev, pos, &v8);
		*val = v8;
		break;
	case 2:
		ret = pci_read_config_word(pdev, pos, &v16);
		*val = v16;
		break;
	default:
		ret = pci_read_config_dword(pdev, pos, val);
		break;
	}
	if (ret)
		return pcibios_err_to_errno(ret);
	*val = (*val & ~vintx) | (lent->intx_vdis ? vintx : 0);
	return 0;
}

/**
 * dl_lent_reset() - reset the function, the lender's way.
 * @lent: the device; its device lock and @lent->lock held.
 *
 * For a reset the borrower asks for, in a message or by writing
 * function-level reset to config space, and for taking the device back.
 * pci_reset_function_locked() saves and restores config state around the
 * reset. INTx is masked meanwhile so that the relay's handler keeps off a
 * device being reset; what the lender caches of config space is read
 * back afterwards. With MSI-X on, the restore writes the vectors back into
 * the table: memory decode is on for it (dl_lent_memory_enable()), and
 * the holder's setting of it comes back afterwards. Direct vectors'
 * entries are the lender's, not Linux's: written again after it.
 *
 * Return: 0, -EOPNOTSUPP for a member of a group that only a bus reset
 * resets (done once the group is back), or the -errno of
 * pci_reset_function_locked().
 */
int dl_lent_reset(struct dl_lent *lent)
{
	struct pci_dev *pdev = lent->pdev;
	bool mem;
	int ret;

	device_lock_assert(&pdev->dev);
	lockdep_assert_held(&lent->lock);

	/* Only its bus's reset resets it, and its siblings with it: later. */
	if (lent->grp && !lent->resets_alone)
		return -EOPNOTSUPP;
	/* Nothing from the doorbell interrupt reaches it while it resets. */
	dl_lent_fast_close(lent);
	atomic_inc(&lent->slow_holds);
	dl_lent_count(lent, DL_LCNT_RESETS);
	dl_lent_intx_mask(lent);
	/* Saved with decode on, so restored with it: see above. */
	mem = pdev->msix_enabled && dl_lent_memory_enable(lent);
	ret = pci_reset_function_locked(pdev);
	dl_lent_irq_direct_restore(lent);
	dl_lent_memory_restore(lent, mem);
	pci_read_config_word(pdev, PCI_COMMAND, &lent->cmd);
	dl_lent_intx_eoi(lent);
	atomic_dec(&lent->slow_holds);
	return ret;
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
 * to writable ones are not cleared by accident, and the command
 * register's upper byte, where INTx disable is, stays the lender's).
 * Virtual bits are acted on instead, except function-level reset: it may
 * take long, so the caller does it (dl_lent_reset()) where waiting holds
 * nobody up.
 *
 * Return: 0; or DL_CFG_WRITE_FILTERED if (part of) the write was kept
 * from the hardware, and DL_CFG_WRITE_RESET if it asked for function-level
 * reset; or -errno if the hardware access failed.
 */
int dl_lent_cfg_write(struct dl_lent *lent, unsigned int pos,
		      unsigned int size, u32 val)
{
	struct pci_dev *pdev = lent->pdev;
	u32 vintx = dl_cfg_bits(pos, size, PCI_COMMAND + 1,
				PCI_COMMAND_INTX_DISABLE >> 8);
	u32 vflr = dl_cfg_bits(pos, size, lent->flr_pos,
			       PCI_EXP_DEVCTL_BCR_FLR >> 8) |
		   dl_cfg_bits(pos, size, lent->af_flr_pos, PCI_AF_CTRL_FLR);
	u32 virt = vintx | vflr;
	bool filtered = false;
	unsigned int i;
	int ret = 0;

	device_lock_assert(&pdev->dev);
	lockdep_assert_held(&lent->lock);

	for (i = 0; i < size; ) {
		unsigned int shift = i * 8;
		u8 m = lent->cfg_map[pos + i].wmask;
		u8 cur;

		if (!m) {
			if (((val & ~virt) >> shift) & 0xff)
				filtered = true;
			i++;
			continue;
		}
		/* Registers of 16 bits are written at once. */
		if (!((pos + i) & 1) && i + 1 < size &&
		    lent->cfg_map[pos + i + 1].wmask) {
			u16 m16 = m | (lent->cfg_map[pos + i + 1].wmask << 8);
			u16 v = val >> shift;
			u16 c;

			ret = pci_read_config_word(pdev, pos + i, &c);
			if (ret)
				break;
			if ((v ^ c) & ~(m16 | (u16)(virt >> shift)))
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
		if (((val >> shift) ^ cur) & ~(m | (u8)(virt >> shift)) & 0xff)
			filtered = true;
		ret = pci_write_config_byte(pdev, pos + i,
					    (cur & ~m) | ((val >> shift) & m));
		if (ret)
			break;
		i++;
	}
	if (ret)
		return pcibios_err_to_errno(ret);

	if (pos < PCI_COMMAND + 2 && pos + size > PCI_COMMAND)
		pci_read_config_word(pdev, PCI_COMMAND, &lent->cmd);
	if (vintx)
		dl_lent_intx_vdisable(lent, val & vintx);

	/* Not written: the device would reset behind the lender's back. */
	if (val & vflr)
		ret |= DL_CFG_WRITE_RESET;
	if (filtered)
		ret |= DL_CFG_WRITE_FILTERED;
	return ret;
}
