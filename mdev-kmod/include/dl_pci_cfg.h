/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The config-space model the lender and the borrower share, after
 * vfio_pci_config.c, so that both sides read a device's config space the
 * same way. It has one shape, struct dl_cfg_perm: a register (or a run of
 * bytes) of the standard header or of a capability, with how the
 * borrower serves it (its view: the device's bytes, or a virtual field
 * with its own handler), which bits of the borrower's copy a guest may
 * write, and which bits the borrower may write at the device. The header
 * has one table of them (dl_cfg_header_perms()), each capability another
 * (dl_cfg_cap_perms(); MSI one per layout, as its flags say), and a
 * capability's length comes from dl_std_cap_len().
 *
 * Neither side searches the tables on an access: each lays them once per
 * device over a per-byte map (struct dl_cfg_byte, dl_cfg_map_init() and
 * dl_cfg_map_rows()), as vfio-pci builds pci_config_map, and finds a
 * byte's permissions by its offset. A virtual capability (its first row
 * covers it whole with a virtual view: MSI, MSI-X) has no writable bit at
 * the device: what a guest writes to it never reaches the device.
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
 * enum dl_cfg_view - how the borrower serves a config byte.
 * @DL_VIEW_DEV: the device's own bytes, read and written through.
 * @DL_VIEW_ID: vendor, device, revision, class: from the lender's device
 *	description (DEV_INFO), as vfio-pci virtualizes them; writes dropped.
 * @DL_VIEW_COMMAND: a copy, written through (with bus master's side
 *	effects on the borrower; INTx disable is virtual at the lender).
 * @DL_VIEW_BAR: virtual BARs with sizing; the lender's addresses never show.
 * @DL_VIEW_ROM: no ROM is offered: reads 0, writes dropped.
 * @DL_VIEW_INTX_PIN: the pin, 0 where the lender cannot mask INTx.
 * @DL_VIEW_VCAP: a virtual capability's byte: from the copy, a guest's
 *	write takes only its @vwmask bits.
 * @DL_VIEW_MSI_FLAGS: the low byte of MSI's Message Control, virtual as
 *	%DL_VIEW_VCAP; a write also clamps Multiple Message Enable to what
 *	the device can do.
 */
enum dl_cfg_view {
	DL_VIEW_DEV,
	DL_VIEW_ID,
	DL_VIEW_COMMAND,
	DL_VIEW_BAR,
	DL_VIEW_ROM,
	DL_VIEW_INTX_PIN,
	DL_VIEW_VCAP,
	DL_VIEW_MSI_FLAGS,
};

/**
 * struct dl_cfg_perm - the permissions of a register of the standard
 *	header or of a capability: the one shape of the model.
 * @off: its first byte, from the start of the header or capability.
 * @len: 1, 2 or 4: a register, whose masks are little-endian; 0: every
 *	byte from @off to the capability's end, each with the masks' low
 *	byte.
 * @view: how the borrower serves these bytes, an &enum dl_cfg_view.
 * @vwmask: the bits of the borrower's copy a guest may write, for the
 *	virtual capabilities' views (the header's virtual fields have
 *	handlers of their own: command, BAR sizing; or drop writes).
 * @wmask: the bits the borrower may write at the device (the lender's
 *	filter).
 */
struct dl_cfg_perm {
	u16 off;
	u8 len;
	u8 view;
	u32 vwmask;
	u32 wmask;
};

/**
 * struct dl_cfg_byte - one byte of a device's per-byte map, laid from
 *	&struct dl_cfg_perm rows.
 * @view: how the borrower serves it, an &enum dl_cfg_view.
 * @vwmask: the bits of the borrower's copy a guest may write.
 * @wmask: the bits the borrower may write at the device.
 */
struct dl_cfg_byte {
	u8 view;
	u8 vwmask;
	u8 wmask;
};

/**
 * dl_cfg_header_perms() - the standard (type 0) header's table.
 * @n: set to the number of rows.
 *
 * Of the device's bytes the borrower may write only the command
 * register's memory, I/O and bus master bits, cache line size, latency
 * timer and interrupt line; status (write 1 to clear), BIST and the rest
 * stay the lender's. A header byte that no row covers is the device's,
 * read-only.
 *
 * Return: the rows.
 */
static inline const struct dl_cfg_perm *dl_cfg_header_perms(unsigned int *n)
{
	static const struct dl_cfg_perm rows[] = {
		{ PCI_VENDOR_ID, 4, DL_VIEW_ID, 0, 0 },
		{ PCI_COMMAND, 2, DL_VIEW_COMMAND, 0, PCI_COMMAND_IO |
		  PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER },
		{ PCI_CLASS_REVISION, 4, DL_VIEW_ID, 0, 0 },
		{ PCI_CACHE_LINE_SIZE, 1, DL_VIEW_DEV, 0, 0xff },
		{ PCI_LATENCY_TIMER, 1, DL_VIEW_DEV, 0, 0xff },
		{ PCI_BASE_ADDRESS_0, 4, DL_VIEW_BAR, 0, 0 },
		{ PCI_BASE_ADDRESS_1, 4, DL_VIEW_BAR, 0, 0 },
		{ PCI_BASE_ADDRESS_2, 4, DL_VIEW_BAR, 0, 0 },
		{ PCI_BASE_ADDRESS_3, 4, DL_VIEW_BAR, 0, 0 },
		{ PCI_BASE_ADDRESS_4, 4, DL_VIEW_BAR, 0, 0 },
		{ PCI_BASE_ADDRESS_5, 4, DL_VIEW_BAR, 0, 0 },
		{ PCI_ROM_ADDRESS, 4, DL_VIEW_ROM, 0, 0 },
		{ PCI_INTERRUPT_LINE, 1, DL_VIEW_DEV, 0, 0xff },
		{ PCI_INTERRUPT_PIN, 1, DL_VIEW_INTX_PIN, 0, 0 },
	};

	*n = ARRAY_SIZE(rows);
	return rows;
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

/* Device control bits a borrower may write: not payload sizes, not FLR. */
#define DL_DEVCTL_WMASK	(PCI_EXP_DEVCTL_CERE | PCI_EXP_DEVCTL_NFERE | \
			 PCI_EXP_DEVCTL_FERE | PCI_EXP_DEVCTL_URRE | \
			 PCI_EXP_DEVCTL_RELAX_EN | PCI_EXP_DEVCTL_EXT_TAG | \
			 PCI_EXP_DEVCTL_AUX_PME | PCI_EXP_DEVCTL_NOSNOOP_EN)

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
 * dl_cfg_cap_perms() - a capability's table.
 * @ext: an extended capability.
 * @id: its id.
 * @reg2: a standard capability's 16-bit register at offset 2
 *	(PCI_CAP_FLAGS): MSI's Message Control picks its layout.
 * @n: set to the number of rows.
 *
 * Virtual, served from the borrower's copy: MSI and MSI-X (the VMM drives
 * the vectors through VFIO's SET_IRQS and the lender owns the device's).
 * A guest writes of MSI enable and Multiple Message Enable, the address,
 * the data and the mask bits; of MSI-X enable and function mask; the rest
 * (header, the bits that say how long the capability is, pending bits,
 * the table and PBA locations) is read-only.
 *
 * Writable at the device: PCIe device control's safe bits (FLR is
 * virtual: the lender resets); vendor-specific capabilities past their
 * header; AER's defined error bits of its status, mask and severity
 * registers and its ECRC enables, bit for bit as vfio-pci's
 * init_pci_ext_cap_err_perm() (the header log, root port registers and
 * reserved bits stay read-only). Every byte of a capability that no row
 * makes writable is read-only at the device, the virtual ones included.
 *
 * Return: the capability's rows, or NULL with *@n 0 for a capability
 * without one (the device's bytes, read-only).
 */
static inline const struct dl_cfg_perm *dl_cfg_cap_perms(bool ext, u16 id,
							 u16 reg2,
							 unsigned int *n)
{
	/* MSI: all of it virtual; a guest writes all but the pending bits. */
	static const struct dl_cfg_perm msi32[] = {
		{ 0, 0, DL_VIEW_VCAP, 0, 0 },
		{ PCI_MSI_FLAGS, 1, DL_VIEW_MSI_FLAGS,
		  PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE, 0 },
		{ PCI_MSI_ADDRESS_LO, 4, DL_VIEW_VCAP, ~0U, 0 },
		{ PCI_MSI_DATA_32, 2, DL_VIEW_VCAP, 0xffff, 0 },
	};
	static const struct dl_cfg_perm msi64[] = {
		{ 0, 0, DL_VIEW_VCAP, 0, 0 },
		{ PCI_MSI_FLAGS, 1, DL_VIEW_MSI_FLAGS,
		  PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE, 0 },
		{ PCI_MSI_ADDRESS_LO, 4, DL_VIEW_VCAP, ~0U, 0 },
		{ PCI_MSI_ADDRESS_HI, 4, DL_VIEW_VCAP, ~0U, 0 },
		{ PCI_MSI_DATA_64, 2, DL_VIEW_VCAP, 0xffff, 0 },
	};
	static const struct dl_cfg_perm msi32_mask[] = {
		{ 0, 0, DL_VIEW_VCAP, 0, 0 },
		{ PCI_MSI_FLAGS, 1, DL_VIEW_MSI_FLAGS,
		  PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE, 0 },
		{ PCI_MSI_ADDRESS_LO, 4, DL_VIEW_VCAP, ~0U, 0 },
		{ PCI_MSI_DATA_32, 2, DL_VIEW_VCAP, 0xffff, 0 },
		{ PCI_MSI_MASK_32, 4, DL_VIEW_VCAP, ~0U, 0 },
	};
	static const struct dl_cfg_perm msi64_mask[] = {
		{ 0, 0, DL_VIEW_VCAP, 0, 0 },
		{ PCI_MSI_FLAGS, 1, DL_VIEW_MSI_FLAGS,
		  PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE, 0 },
		{ PCI_MSI_ADDRESS_LO, 4, DL_VIEW_VCAP, ~0U, 0 },
		{ PCI_MSI_ADDRESS_HI, 4, DL_VIEW_VCAP, ~0U, 0 },
		{ PCI_MSI_DATA_64, 2, DL_VIEW_VCAP, 0xffff, 0 },
		{ PCI_MSI_MASK_64, 4, DL_VIEW_VCAP, ~0U, 0 },
	};
	static const struct dl_cfg_perm msix[] = {
		{ 0, 0, DL_VIEW_VCAP, 0, 0 },
		{ PCI_MSIX_FLAGS, 2, DL_VIEW_VCAP,
		  PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL, 0 },
	};
	static const struct dl_cfg_perm exp[] = {
		{ PCI_EXP_DEVCTL, 2, DL_VIEW_DEV, 0, DL_DEVCTL_WMASK },
	};
	static const struct dl_cfg_perm vndr[] = {
		{ PCI_CAP_SIZEOF, 0, DL_VIEW_DEV, 0, 0xff },
	};
	static const struct dl_cfg_perm aer[] = {
		{ PCI_ERR_UNCOR_STATUS, 4, DL_VIEW_DEV, 0, DL_AER_UNCOR_WMASK },
		{ PCI_ERR_UNCOR_MASK, 4, DL_VIEW_DEV, 0, DL_AER_UNCOR_WMASK },
		{ PCI_ERR_UNCOR_SEVER, 4, DL_VIEW_DEV, 0, DL_AER_UNCOR_WMASK },
		{ PCI_ERR_COR_STATUS, 4, DL_VIEW_DEV, 0, DL_AER_COR_WMASK },
		{ PCI_ERR_COR_MASK, 4, DL_VIEW_DEV, 0, DL_AER_COR_WMASK },
		{ PCI_ERR_CAP, 4, DL_VIEW_DEV, 0, DL_AER_CAP_WMASK },
	};
	static const struct dl_cfg_perm ext_vndr[] = {
		{ PCI_VNDR_HEADER, 0, DL_VIEW_DEV, 0, 0xff },
	};
	/* MSI by its flags: 64-bit address, per-vector masking. */
	static const struct {
		const struct dl_cfg_perm *rows;
		unsigned int n;
	} msi[] = {
		{ msi32, ARRAY_SIZE(msi32) },
		{ msi64, ARRAY_SIZE(msi64) },
		{ msi32_mask, ARRAY_SIZE(msi32_mask) },
		{ msi64_mask, ARRAY_SIZE(msi64_mask) },
	};
	static const struct {
		bool ext;
		u16 id;
		const struct dl_cfg_perm *rows;
		unsigned int n;
	} caps[] = {
		{ false, PCI_CAP_ID_MSIX, msix, ARRAY_SIZE(msix) },
		{ false, PCI_CAP_ID_EXP, exp, ARRAY_SIZE(exp) },
		{ false, PCI_CAP_ID_VNDR, vndr, ARRAY_SIZE(vndr) },
		{ true, PCI_EXT_CAP_ID_ERR, aer, ARRAY_SIZE(aer) },
		{ true, PCI_EXT_CAP_ID_VNDR, ext_vndr, ARRAY_SIZE(ext_vndr) },
	};
	unsigned int i;

	if (!ext && id == PCI_CAP_ID_MSI) {
		i = (reg2 & PCI_MSI_FLAGS_64BIT ? 1 : 0) |
		    (reg2 & PCI_MSI_FLAGS_MASKBIT ? 2 : 0);
		*n = msi[i].n;
		return msi[i].rows;
	}
	for (i = 0; i < ARRAY_SIZE(caps); i++) {
		if (caps[i].ext == ext && caps[i].id == id) {
			*n = caps[i].n;
			return caps[i].rows;
		}
	}
	*n = 0;
	return NULL;
}

/**
 * dl_cap_is_virtual() - whether the borrower serves a standard capability
 *	from its copy.
 * @id: the capability's id.
 *
 * Return: true if the capability's table starts with a row that covers it
 * whole with a virtual view (MSI and MSI-X).
 */
static inline bool dl_cap_is_virtual(u8 id)
{
	const struct dl_cfg_perm *rows;
	unsigned int n;

	rows = dl_cfg_cap_perms(false, id, 0, &n);
	return n && !rows[0].off && !rows[0].len &&
	       rows[0].view != DL_VIEW_DEV;
}

/**
 * dl_cfg_map_rows() - lay a table over a device's per-byte map.
 * @map: the map, @size bytes of config space.
 * @size: bytes of config space.
 * @pos: where the header (0) or the capability starts.
 * @len: its bytes.
 * @rows: its table (dl_cfg_header_perms(), dl_cfg_cap_perms()).
 * @n: rows in @rows.
 *
 * Its bytes become the device's, read-only: at least its id and next
 * pointer, however short it says it is; then each row that fits in @len
 * sets its own bytes, later rows over earlier ones. Nothing is laid past
 * @size.
 */
static inline void dl_cfg_map_rows(struct dl_cfg_byte *map, unsigned int size,
				   unsigned int pos, unsigned int len,
				   const struct dl_cfg_perm *rows,
				   unsigned int n)
{
	unsigned int i, at, end, shift;

	end = pos + (len < PCI_CAP_SIZEOF ? PCI_CAP_SIZEOF : len);
	for (at = pos; at < end && at < size; at++)
		map[at] = (struct dl_cfg_byte){ .view = DL_VIEW_DEV };
	for (i = 0; i < n; i++) {
		const struct dl_cfg_perm *r = &rows[i];

		if (r->off + r->len > len)
			continue;
		end = r->len ? r->off + r->len : len;
		for (at = r->off; at < end && pos + at < size; at++) {
			/* A register's masks go byte by byte, low first. */
			shift = r->len ? 8 * (at - r->off) : 0;
			map[pos + at] = (struct dl_cfg_byte){
				.view = r->view,
				.vwmask = r->vwmask >> shift,
				.wmask = r->wmask >> shift,
			};
		}
	}
}

/**
 * dl_cfg_map_init() - start a device's per-byte map: the header's table,
 *	and every other byte the device's, writable.
 * @map: the map.
 * @size: bytes of config space (at least %PCI_STD_HEADER_SIZEOF).
 *
 * Device-specific registers are the device's; the capabilities found are
 * laid over this with dl_cfg_map_rows().
 */
static inline void dl_cfg_map_init(struct dl_cfg_byte *map, unsigned int size)
{
	const struct dl_cfg_perm *rows;
	unsigned int i, n;

	for (i = 0; i < size; i++)
		map[i] = (struct dl_cfg_byte){ .view = DL_VIEW_DEV,
					       .wmask = 0xff };
	rows = dl_cfg_header_perms(&n);
	dl_cfg_map_rows(map, size, 0, PCI_STD_HEADER_SIZEOF, rows, n);
}

#endif /* DL_PCI_CFG_H */
