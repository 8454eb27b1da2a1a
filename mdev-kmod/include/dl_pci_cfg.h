/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The config-space model the lender and the borrower share, after
 * vfio_pci_config.c's permission tables, so that both sides read a
 * device's config space the same way. Per field of the standard header
 * (dl_header_field()): whether the borrower serves it from its copy, and
 * which bits the borrower may write at the device. Per capability:
 *  - its length (dl_std_cap_len());
 *  - whether the borrower serves it from its own copy ("virtual":
 *    dl_cap_is_virtual()), and then which bits of the copy a guest may
 *    write (dl_cap_virt_wmask());
 *  - otherwise, which bits of the device the borrower may write through
 *    the lender (dl_cap_perms()); everything else is read-only there.
 * A virtual capability has no row in the device's tables: what a guest
 * writes to it never reaches the device.
 *
 * Kernel-internal: not part of the wire format. Tables live in static
 * inline functions, so a file that does not use one carries no copy.
 */
#ifndef DL_PCI_CFG_H
#define DL_PCI_CFG_H

#include <linux/array_size.h>
#include <linux/pci_regs.h>
#include <linux/types.h>

/**
 * enum dl_hdr_view - how the borrower serves a header field.
 * @DL_HDR_DEV: the device's own bytes, read and written through.
 * @DL_HDR_ID: vendor, device, revision, class: from the lender's device
 *	description (DEV_INFO), as vfio-pci virtualizes them; writes dropped.
 * @DL_HDR_COMMAND: a copy, written through (with bus master's side effects
 *	on the borrower; INTx disable is virtual at the lender).
 * @DL_HDR_BAR: virtual BARs with sizing; the lender's addresses never show.
 * @DL_HDR_ROM: no ROM is offered: reads 0, writes dropped.
 * @DL_HDR_INTX_PIN: the pin, 0 where the lender cannot mask INTx.
 */
enum dl_hdr_view {
	DL_HDR_DEV,
	DL_HDR_ID,
	DL_HDR_COMMAND,
	DL_HDR_BAR,
	DL_HDR_ROM,
	DL_HDR_INTX_PIN,
};

/**
 * struct dl_hdr_field - a field of the standard (type 0) header.
 * @off: its first byte.
 * @len: its bytes.
 * @view: how the borrower serves it.
 * @wmask: the bits of each of its bytes, low byte first, that the
 *	borrower may write at the device (the lender's filter).
 */
struct dl_hdr_field {
	u8 off;
	u8 len;
	u8 view;
	u16 wmask;
};

/**
 * dl_header_field() - the header field a byte belongs to.
 * @off: a byte offset below %PCI_STD_HEADER_SIZEOF.
 *
 * Of the device's bytes the borrower may write only the command
 * register's memory, I/O and bus master bits, cache line size, latency
 * timer and interrupt line; status (write 1 to clear), BIST and the rest
 * stay the lender's.
 *
 * Return: the field (for an offset past the header, a read-only one of
 * the device).
 */
static inline struct dl_hdr_field dl_header_field(unsigned int off)
{
	static const struct dl_hdr_field fields[] = {
		{ PCI_VENDOR_ID, 4, DL_HDR_ID, 0 },
		{ PCI_COMMAND, 2, DL_HDR_COMMAND, PCI_COMMAND_IO |
		  PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER },
		{ PCI_CLASS_REVISION, 4, DL_HDR_ID, 0 },
		{ PCI_CACHE_LINE_SIZE, 1, DL_HDR_DEV, 0xff },
		{ PCI_LATENCY_TIMER, 1, DL_HDR_DEV, 0xff },
		{ PCI_BASE_ADDRESS_0, PCI_BASE_ADDRESS_5 + 4 - PCI_BASE_ADDRESS_0,
		  DL_HDR_BAR, 0 },
		{ PCI_ROM_ADDRESS, 4, DL_HDR_ROM, 0 },
		{ PCI_INTERRUPT_LINE, 1, DL_HDR_DEV, 0xff },
		{ PCI_INTERRUPT_PIN, 1, DL_HDR_INTX_PIN, 0 },
	};
	struct dl_hdr_field ro = { off, 1, DL_HDR_DEV, 0 };
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(fields); i++)
		if (off >= fields[i].off && off < fields[i].off + fields[i].len)
			return fields[i];
	return ro;
}

/**
 * dl_header_wmask() - the bits of one header byte the borrower may write
 *	at the device.
 * @off: a byte offset below %PCI_STD_HEADER_SIZEOF.
 *
 * Return: the writable bits of that byte.
 */
static inline u8 dl_header_wmask(unsigned int off)
{
	struct dl_hdr_field f = dl_header_field(off);
	unsigned int at = off - f.off;

	/* Wider fields repeat one byte's mask; 16-bit ones have two. */
	if (f.len == 2)
		return at ? f.wmask >> 8 : f.wmask & 0xff;
	return f.wmask & 0xff;
}

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

/**
 * dl_std_cap_len() - bytes of a standard capability.
 * @id: its id.
 * @reg2: its 16-bit register at offset 2 (PCI_CAP_FLAGS): MSI's Message
 *	Control, or in its low byte a vendor-specific capability's length.
 * @room: bytes up to the next capability or the end of config space.
 *
 * Return: the capability's length where the specification fixes it or
 * @reg2 says it, else @room; never more than @room.
 */
static inline unsigned int dl_std_cap_len(u8 id, u16 reg2, unsigned int room)
{
	unsigned int len;

	switch (id) {
	case PCI_CAP_ID_PM:
		len = PCI_PM_SIZEOF;
		break;
	case PCI_CAP_ID_VPD:
		len = PCI_CAP_VPD_SIZEOF;
		break;
	case PCI_CAP_ID_MSI:
		len = dl_msi_cap_len(reg2);
		break;
	case PCI_CAP_ID_MSIX:
		len = PCI_CAP_MSIX_SIZEOF;
		break;
	case PCI_CAP_ID_EXP:
		len = PCI_CAP_EXP_ENDPOINT_SIZEOF_V2;
		break;
	case PCI_CAP_ID_AF:
		len = PCI_CAP_AF_SIZEOF;
		break;
	case PCI_CAP_ID_VNDR:
		len = reg2 & 0xff;
		break;
	default:
		len = room;
		break;
	}
	return len < room ? len : room;
}

/**
 * dl_cap_is_virtual() - whether the borrower serves a standard capability
 *	from its copy.
 * @id: the capability's id.
 *
 * MSI and MSI-X: the VMM drives the vectors through VFIO's SET_IRQS and
 * the lender owns the device's; a guest's writes to these registers must
 * not reach the device.
 *
 * Return: true for a virtual capability.
 */
static inline bool dl_cap_is_virtual(u8 id)
{
	return id == PCI_CAP_ID_MSI || id == PCI_CAP_ID_MSIX;
}

/**
 * dl_cap_virt_wmask() - the bits a guest may write of one byte of a
 *	virtual capability's copy, after vfio_pci_config.c.
 * @id: the capability's id (dl_cap_is_virtual()).
 * @reg2: its 16-bit register at offset 2 (MSI's Message Control).
 * @rel: the byte's offset in the capability.
 *
 * MSI: enable and Multiple Message Enable, the address, the data and the
 * mask bits. MSI-X: enable and function mask. The rest (header, the bits
 * that say how long the capability is, pending bits, the table and PBA
 * locations) is read-only.
 *
 * Return: the writable bits of that byte.
 */
static inline u8 dl_cap_virt_wmask(u8 id, u16 reg2, unsigned int rel)
{
	bool is64 = reg2 & PCI_MSI_FLAGS_64BIT;
	unsigned int data = is64 ? PCI_MSI_DATA_64 : PCI_MSI_DATA_32;
	unsigned int mask = is64 ? PCI_MSI_MASK_64 : PCI_MSI_MASK_32;

	if (id == PCI_CAP_ID_MSIX)
		return rel == PCI_MSIX_FLAGS + 1 ?
		       (PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL) >> 8 : 0;
	if (id != PCI_CAP_ID_MSI)
		return 0;
	if (rel == PCI_MSI_FLAGS)
		return PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE;
	if (rel >= PCI_MSI_ADDRESS_LO && rel < PCI_MSI_ADDRESS_LO + 4)
		return 0xff;
	if (is64 && rel >= PCI_MSI_ADDRESS_HI && rel < PCI_MSI_ADDRESS_HI + 4)
		return 0xff;
	if (rel >= data && rel < data + 2)
		return 0xff;
	if ((reg2 & PCI_MSI_FLAGS_MASKBIT) && rel >= mask && rel < mask + 4)
		return 0xff;
	return 0;
}

/* Device control bits a borrower may write: not payload sizes, not FLR. */
#define DL_DEVCTL_WMASK	(PCI_EXP_DEVCTL_CERE | PCI_EXP_DEVCTL_NFERE | \
			 PCI_EXP_DEVCTL_FERE | PCI_EXP_DEVCTL_URRE | \
			 PCI_EXP_DEVCTL_RELAX_EN | PCI_EXP_DEVCTL_EXT_TAG | \
			 PCI_EXP_DEVCTL_AUX_PME | PCI_EXP_DEVCTL_NOSNOOP_EN)

/**
 * struct dl_cap_perm - bits of a capability the borrower may write at the
 *	device.
 * @ext: the capability is an extended one.
 * @id: its id.
 * @off: offset in the capability.
 * @len: 2 or 4: the register of that size at @off; 0: every byte from @off
 *	to the capability's end.
 * @wmask: the writable bits (of each byte, with @len 0).
 */
struct dl_cap_perm {
	bool ext;
	u16 id;
	u8 off;
	u8 len;
	u32 wmask;
};

/* AER's error bits a borrower may write (status RW1C, mask, severity). */
#define DL_AER_UNCOR_WMASK (PCI_ERR_UNC_UND | PCI_ERR_UNC_DLP | \
			    PCI_ERR_UNC_SURPDN | PCI_ERR_UNC_POISON_TLP | \
			    PCI_ERR_UNC_FCP | PCI_ERR_UNC_COMP_TIME | \
			    PCI_ERR_UNC_COMP_ABORT | PCI_ERR_UNC_UNX_COMP | \
			    PCI_ERR_UNC_RX_OVER | PCI_ERR_UNC_MALF_TLP | \
			    PCI_ERR_UNC_ECRC | PCI_ERR_UNC_UNSUP | \
			    PCI_ERR_UNC_ACSV | PCI_ERR_UNC_INTN | \
			    PCI_ERR_UNC_MCBTLP | PCI_ERR_UNC_ATOMEG | \
			    PCI_ERR_UNC_TLPPRE)
#define DL_AER_COR_WMASK (PCI_ERR_COR_RCVR | PCI_ERR_COR_BAD_TLP | \
			  PCI_ERR_COR_BAD_DLLP | PCI_ERR_COR_REP_ROLL | \
			  PCI_ERR_COR_REP_TIMER | PCI_ERR_COR_ADV_NFAT | \
			  PCI_ERR_COR_INTERNAL | PCI_ERR_COR_LOG_OVER)
/* Only ECRC generation and checking: not the first-error pointer. */
#define DL_AER_CAP_WMASK (PCI_ERR_CAP_ECRC_GENE | PCI_ERR_CAP_ECRC_CHKE)

/**
 * dl_cap_perms() - a capability's permission table at the device.
 * @ext: an extended capability.
 * @id: its id.
 * @n: set to the number of rows.
 *
 * PCIe device control's safe bits (FLR is virtual: the lender resets);
 * vendor-specific capabilities; AER's defined error bits of its status,
 * mask and severity registers and its ECRC enables, bit for bit as
 * vfio-pci's init_pci_ext_cap_err_perm() (the header log, root port
 * registers and reserved bits stay read-only). Every other capability is
 * read-only at the device, virtual ones (dl_cap_is_virtual()) included.
 *
 * Return: the capability's rows, or NULL with *@n 0.
 */
static inline const struct dl_cap_perm *dl_cap_perms(bool ext, u16 id,
						     unsigned int *n)
{
	/* A capability's rows are next to each other. */
	static const struct dl_cap_perm rows[] = {
		{ false, PCI_CAP_ID_EXP, PCI_EXP_DEVCTL, 2, DL_DEVCTL_WMASK },
		{ false, PCI_CAP_ID_VNDR, PCI_CAP_SIZEOF, 0, 0xff },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_UNCOR_STATUS, 4,
		  DL_AER_UNCOR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_UNCOR_MASK, 4,
		  DL_AER_UNCOR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_UNCOR_SEVER, 4,
		  DL_AER_UNCOR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_COR_STATUS, 4,
		  DL_AER_COR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_COR_MASK, 4,
		  DL_AER_COR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_CAP, 4, DL_AER_CAP_WMASK },
		{ true, PCI_EXT_CAP_ID_VNDR, PCI_VNDR_HEADER, 0, 0xff },
	};
	unsigned int i, k;

	for (i = 0; i < ARRAY_SIZE(rows); i++) {
		if (rows[i].ext != ext || rows[i].id != id)
			continue;
		for (k = i; k < ARRAY_SIZE(rows) && rows[k].ext == ext &&
		     rows[k].id == id; k++)
			;
		*n = k - i;
		return &rows[i];
	}
	*n = 0;
	return NULL;
}

#endif /* DL_PCI_CFG_H */
