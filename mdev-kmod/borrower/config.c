// SPDX-License-Identifier: GPL-2.0
/*
 * The virtual config space of an mdev, after vfio_pci_config.c, scaled
 * down.
 *
 * Why this is needed at all: the guest must not move the lender's device
 * (BARs), run its ROM, or point its MSI/MSI-X messages anywhere; and some
 * writes have side effects on this host before they may reach the
 * device. So a copy of the config space is read at open, and these
 * fields are served from it (the "virtual" bytes):
 *   IDs         vendor, device, revision and class: from the lender's
 *               device description (DEV_INFO), as vfio-pci virtualizes
 *               them; writes dropped
 *   command     virtual copy; written through (the lender writes only I/O,
 *               memory and bus master; it virtualizes INTx disable), with
 *               side effects:
 *               bus master 0 -> 1 pins and maps guest memory first, then
 *               forwards; 1 -> 0 forwards first, then unmaps and unpins
 *               (the DMA layer, through &dl_config_ops)
 *   BAR0-5      virtual, with sizing (writable bits are the size mask);
 *               I/O BARs are not offered (no lender serves them) and
 *               read as absent
 *   ROM BAR     reads 0, writes dropped (no ROM is offered)
 *   MSI, MSI-X  whole capability virtual (dl_cap_is_virtual(), the
 *               model shared with the lender in dl_pci_cfg.h): QEMU drives
 *               the vectors through SET_IRQS, never through these
 *               registers; guests write only the bits its table lets
 *               them (dl_cfg_cap_perms())
 *   INTx pin    the device's pin where the lender can mask its INTx at the
 *               device (PCI 2.3 INTx disable, DL_DEV_F_INTX), else 0, so
 *               that the guest (and QEMU) use INTx only where it is
 *               relayed (irq.c); writes dropped
 * Which byte is what comes from a per-byte map laid at open from the
 * model's tables (dl_cfg_map_init(), dl_cfg_map_rows()), as vfio-pci's
 * pci_config_map: an access finds each byte's view and masks by offset.
 * A PCIe FLR written to the device control register takes the reset path
 * (&dl_config_ops.reset). The device is borrowed (session.c) before the
 * first write that reaches it.
 * Every other byte is read from and written to the device as it is; when
 * a read fails, those bytes read all-ones, as a function that went away
 * does on a real bus. Once the mdev is lost every byte reads all-ones, the
 * virtual IDs included: the guest's driver, asked to let go, then finds
 * its device absent (pci_device_is_present()) and fails its I/O at once,
 * instead of waiting out its own timeout (an NVMe driver's 30 s) for a
 * device that will never answer.
 *
 * Accesses are split into naturally aligned 1, 2 or 4 byte pieces; a
 * piece that mixes virtual and other bytes is read through and the
 * virtual bytes laid over it. A write is split further where a piece
 * spans regions (command and status, one capability and the next), so
 * that each byte takes the filter of its own region.
 */
#include <linux/bitfield.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/unaligned.h>

#include "../include/dl_pci_cfg.h"
#include "internal.h"

/* Config reads in flight while the copy is made. */
#define DL_CFG_BATCH		16

/*
 * What a byte of config space belongs to, and so which filter it takes:
 * its view in the model shared with the lender (dl_pci_cfg.h), with
 * MSI's flags one with the rest of its capability.
 */
enum dl_cfg_region {
	DL_CFG_DEV = DL_VIEW_DEV,
	DL_CFG_ID = DL_VIEW_ID,
	DL_CFG_COMMAND = DL_VIEW_COMMAND,
	DL_CFG_BAR = DL_VIEW_BAR,
	DL_CFG_ROM = DL_VIEW_ROM,
	DL_CFG_INTX_PIN = DL_VIEW_INTX_PIN,
	DL_CFG_VCAP = DL_VIEW_VCAP,	/* a virtual capability */
};

/**
 * dl_config_cap_pos() - where a virtual capability is.
 * @v: the mdev, open.
 * @id: the capability's id.
 *
 * Return: its offset in config space, or 0 if the mdev does not serve it.
 */
unsigned int dl_config_cap_pos(struct dl_vdev *v, u8 id)
{
	unsigned int i;

	for (i = 0; i < v->cfg.nvcaps; i++)
		if (v->cfg.vcaps[i].id == id)
			return v->cfg.vcaps[i].pos;
	return 0;
}

static enum dl_cfg_region dl_config_region(struct dl_vdev *v,
					   unsigned int off)
{
	u8 view = v->cfg.map[off].view;

	return view == DL_VIEW_MSI_FLAGS ? DL_CFG_VCAP :
	       (enum dl_cfg_region)view;
}

/* Whether the byte at @off is served from the virtual copy. */
static bool dl_config_virt(struct dl_vdev *v, unsigned int off)
{
	return dl_config_region(v, off) != DL_CFG_DEV;
}

static u32 dl_config_get(struct dl_vdev *v, unsigned int off,
			 unsigned int size)
{
	u32 val = 0;

	memcpy(&val, &v->cfg.vconfig[off], size);
	return le32_to_cpu((__force __le32)val);
}

static void dl_config_put(struct dl_vdev *v, unsigned int off,
			  unsigned int size, u32 val)
{
	__le32 le = cpu_to_le32(val);

	memcpy(&v->cfg.vconfig[off], &le, size);
}

static int dl_config_read_dev(struct dl_vdev *v, unsigned int off,
			      unsigned int size, u32 *val)
{
	struct dl_cfg_access acc = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.offset = cpu_to_le16(off),
		.size = size,
	};
	struct dl_cfg_access resp;
	int ret;

	ret = dl_session_request(v, DL_MSG_CFG_READ, &acc, sizeof(acc), &resp,
				 sizeof(resp));
	if (!ret)
		*val = le32_to_cpu(resp.value);
	return ret;
}

static int dl_config_write_dev(struct dl_vdev *v, unsigned int off,
			       unsigned int size, u32 val)
{
	struct dl_cfg_access acc = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.offset = cpu_to_le16(off),
		.size = size,
		.value = cpu_to_le32(val),
	};
	int ret;

	/*
	 * A migration's destination: its source's guest wrote the same to
	 * the device, which it takes over as it is.
	 */
	if (dl_session_incoming(v))
		return 0;
	ret = dl_session_borrow(v);
	if (!ret)
		ret = dl_session_request(v, DL_MSG_CFG_WRITE, &acc, sizeof(acc),
					 NULL, 0);
	if (ret)
		dev_err_ratelimited(dl_vdev_dev(v),
				    "config write of %u bytes at 0x%x failed: %d\n",
				    size, off, ret);
	return ret;
}

/* Reads the whole config space into the copy, DL_CFG_BATCH dwords at a time. */
static int dl_config_snapshot_dwords(struct dl_vdev *v)
{
	struct dl_fabric *fab = v->b->fab;
	struct dl_cfg_access *acc, *resp;
	struct dl_fabric_req *reqs;
	unsigned int off, i, n, sent;
	int ret = -ENOMEM, err;

	acc = kcalloc(DL_CFG_BATCH, sizeof(*acc), GFP_KERNEL);
	resp = kcalloc(DL_CFG_BATCH, sizeof(*resp), GFP_KERNEL);
	reqs = kcalloc(DL_CFG_BATCH, sizeof(*reqs), GFP_KERNEL);
	if (!acc || !resp || !reqs)
		goto out_free;

	ret = 0;
	for (off = 0; off < v->info.cfg_size && !ret; off += n * 4) {
		n = min_t(unsigned int, DL_CFG_BATCH,
			  (v->info.cfg_size - off) / 4);
		for (sent = 0; sent < n; sent++) {
			acc[sent].dev_id = cpu_to_le32(v->sess.dev_id);
			acc[sent].offset = cpu_to_le16(off + sent * 4);
			acc[sent].size = 4;
			reqs[sent].resp = &resp[sent];
			reqs[sent].resp_size = sizeof(resp[sent]);
			ret = dl_fabric_req_submit(fab, v->sess.host,
						   DL_MSG_CFG_READ, &acc[sent],
						   sizeof(acc[sent]),
						   &reqs[sent]);
			if (ret)
				break;
		}
		for (i = 0; i < sent; i++) {
			err = dl_fabric_req_wait(fab, &reqs[i],
						 DL_B_TIMEOUT_MS);
			if (!err && reqs[i].resp_len < sizeof(resp[i]))
				err = -EPROTO;
			if (err && !ret)
				ret = err;
			if (!err)
				dl_config_put(v, off + i * 4, 4,
					      le32_to_cpu(resp[i].value));
		}
	}
out_free:
	kfree(reqs);
	kfree(resp);
	kfree(acc);
	return ret;
}

/* Waits for one block read and copies it in; 0 or -errno. */
static int dl_config_block_done(struct dl_vdev *v, struct dl_fabric_req *req,
				const struct dl_cfg_block_req *ask,
				const struct dl_cfg_block *blk)
{
	unsigned int off = le16_to_cpu(ask->offset);
	unsigned int len = le16_to_cpu(ask->len);
	unsigned int i;
	int err;

	err = dl_fabric_req_wait(v->b->fab, req, DL_B_TIMEOUT_MS);
	if (err)
		return err;
	/* Only what was asked for goes in, where it was asked for. */
	if (req->resp_len < sizeof(*blk) || blk->dev_id != ask->dev_id ||
	    blk->offset != ask->offset || blk->len != ask->len)
		return -EPROTO;
	for (i = 0; i < len; i += 4)
		dl_config_put(v, off + i, 4, get_unaligned_le32(&blk->data[i]));
	return 0;
}

/*
 * Reads the whole config space into the copy by DL_MSG_CFG_READ_BLOCK,
 * DL_CFG_BATCH blocks in flight: 4 KiB in four round trips. -EOPNOTSUPP
 * from a lender that does not know the message.
 */
static int dl_config_snapshot_blocks(struct dl_vdev *v)
{
	struct dl_fabric *fab = v->b->fab;
	struct dl_cfg_block_req *ask;
	struct dl_fabric_req *reqs;
	struct dl_cfg_block *blk;
	unsigned int off, i, sent, at;
	int ret = -ENOMEM, err;

	ask = kcalloc(DL_CFG_BATCH, sizeof(*ask), GFP_KERNEL);
	blk = kcalloc(DL_CFG_BATCH, sizeof(*blk), GFP_KERNEL);
	reqs = kcalloc(DL_CFG_BATCH, sizeof(*reqs), GFP_KERNEL);
	if (!ask || !blk || !reqs)
		goto out_free;

	ret = 0;
	for (off = 0; off < v->info.cfg_size && !ret;
	     off += sent * DL_CFG_BLOCK_MAX) {
		for (sent = 0; sent < DL_CFG_BATCH; sent++) {
			at = off + sent * DL_CFG_BLOCK_MAX;
			if (at >= v->info.cfg_size)
				break;
			ask[sent].dev_id = cpu_to_le32(v->sess.dev_id);
			ask[sent].offset = cpu_to_le16(at);
			ask[sent].len = cpu_to_le16(min_t(unsigned int,
							  DL_CFG_BLOCK_MAX,
							  v->info.cfg_size - at));
			reqs[sent].resp = &blk[sent];
			reqs[sent].resp_size = sizeof(blk[sent]);
			ret = dl_fabric_req_submit(fab, v->sess.host,
						   DL_MSG_CFG_READ_BLOCK,
						   &ask[sent], sizeof(ask[sent]),
						   &reqs[sent]);
			if (ret)
				break;
		}
		for (i = 0; i < sent; i++) {
			err = dl_config_block_done(v, &reqs[i], &ask[i],
						   &blk[i]);
			if (err && !ret)
				ret = err;
		}
	}
out_free:
	kfree(reqs);
	kfree(blk);
	kfree(ask);
	return ret;
}

/* Reads the whole config space into the copy. */
static int dl_config_snapshot(struct dl_vdev *v)
{
	int ret;

	ret = dl_config_snapshot_blocks(v);
	if (ret != -EOPNOTSUPP)
		return ret;
	dev_info_ratelimited(dl_vdev_dev(v),
			     "host %u reads config space dword by dword only\n",
			     v->sess.host);
	return dl_config_snapshot_dwords(v);
}

/*
 * Finds the capabilities the copy virtualizes (dl_cap_is_virtual()), each
 * whole inside the standard config space (else its bytes stay the
 * device's, where the lender keeps them read-only), and PCI Express.
 */
static void dl_config_find_caps(struct dl_vdev *v)
{
	unsigned int pos, len, ttl = 48;
	u8 id;

	if (!(dl_config_get(v, PCI_STATUS, 2) & PCI_STATUS_CAP_LIST))
		return;
	pos = dl_config_get(v, PCI_CAPABILITY_LIST, 1) & ~3;
	while (pos >= PCI_STD_HEADER_SIZEOF && pos <= PCI_CFG_SPACE_SIZE - 4 &&
	       ttl--) {
		id = dl_config_get(v, pos + PCI_CAP_LIST_ID, 1);
		if (dl_cap_is_virtual(id) && v->cfg.nvcaps < DL_B_VCAPS &&
		    !dl_config_cap_pos(v, id)) {
			len = dl_std_cap_len(id, dl_config_get(v, pos + PCI_CAP_FLAGS, 2),
					     PCI_CFG_SPACE_SIZE);
			if (pos + len <= PCI_CFG_SPACE_SIZE)
				v->cfg.vcaps[v->cfg.nvcaps++] = (struct dl_vcap){
					.id = id, .pos = pos, .len = len,
				};
		} else if (id == PCI_CAP_ID_EXP &&
			   pos + PCI_EXP_DEVCTL + 2 <= PCI_CFG_SPACE_SIZE) {
			v->cfg.pcie_cap = pos;
		}
		pos = dl_config_get(v, pos + PCI_CAP_LIST_NEXT, 1) & ~3;
	}
}

/*
 * Lays the model's tables over the per-byte map: the header's, then each
 * virtual capability's, the first found last so that, should the lender's
 * capabilities overlap, each byte is the first one's.
 */
static void dl_config_map_caps(struct dl_vdev *v)
{
	const struct dl_cfg_perm *rows;
	const struct dl_vcap *cap;
	unsigned int i, n;

	dl_cfg_map_init(v->cfg.map, v->info.cfg_size);
	for (i = v->cfg.nvcaps; i--; ) {
		cap = &v->cfg.vcaps[i];
		rows = dl_cfg_cap_perms(false, cap->id,
					dl_config_get(v, cap->pos + PCI_CAP_FLAGS, 2),
					&n);
		dl_cfg_map_rows(v->cfg.map, v->info.cfg_size, cap->pos,
				cap->len, rows, n);
	}
}

/*
 * Sets up the virtual BARs: sizes from the lender, addresses zero. I/O
 * BARs read as absent: no lender serves them (dl_rinfo_decode() drops
 * them too, this is in case).
 */
static void dl_config_init_bars(struct dl_vdev *v)
{
	unsigned int i;
	u32 flags, lo;
	u64 mask;

	memset(v->cfg.bar_mask, 0, sizeof(v->cfg.bar_mask));
	for (i = 0; i < DL_NUM_BARS; i++) {
		unsigned int off = PCI_BASE_ADDRESS_0 + i * 4;

		flags = v->info.bar_flags[i];
		if (!v->info.bar_size[i] || (flags & DL_BAR_F_IO)) {
			if (!(i && (v->info.bar_flags[i - 1] & DL_BAR_F_MEM64)))
				dl_config_put(v, off, 4, 0);
			continue;
		}
		mask = ~(v->info.bar_size[i] - 1);
		lo = 0;
		if (flags & DL_BAR_F_MEM64)
			lo |= PCI_BASE_ADDRESS_MEM_TYPE_64;
		if (flags & DL_BAR_F_PREFETCH)
			lo |= PCI_BASE_ADDRESS_MEM_PREFETCH;
		v->cfg.bar_mask[i] = (u32)mask & PCI_BASE_ADDRESS_MEM_MASK;
		dl_config_put(v, off, 4, lo);
		if ((flags & DL_BAR_F_MEM64) && i + 1 < DL_NUM_BARS) {
			v->cfg.bar_mask[i + 1] = upper_32_bits(mask);
			dl_config_put(v, off + 4, 4, 0);
			i++;
		}
	}
	dl_config_put(v, PCI_ROM_ADDRESS, 4, 0);
}

/*
 * INTx is offered (the device's pin kept) only where the lender can mask
 * it at the device (PCI 2.3): a level interrupt it cannot mask would keep
 * firing while the guest has not served it, or be lost.
 */
static void dl_config_init_intx_pin(struct dl_vdev *v)
{
	u8 pin = v->cfg.vconfig[PCI_INTERRUPT_PIN];

	if (pin > 4)
		pin = 0;
	if (pin && !(v->info.flags & DL_DEV_F_INTX)) {
		dev_info(dl_vdev_dev(v),
			 "INTx not offered: the lender cannot mask this device's INTx (no PCI 2.3 INTx disable)\n");
		pin = 0;
	}
	dl_config_put(v, PCI_INTERRUPT_PIN, 1, pin);
}

/**
 * dl_config_init() - read the remote device's config space at open.
 * @v: the mdev; caller holds v->lock.
 *
 * Return: 0 or -errno.
 */
int dl_config_init(struct dl_vdev *v)
{
	int ret;

	lockdep_assert_held(&v->lock);

	v->cfg.vconfig = kzalloc(v->info.cfg_size, GFP_KERNEL);
	v->cfg.map = kcalloc(v->info.cfg_size, sizeof(*v->cfg.map),
			     GFP_KERNEL);
	if (!v->cfg.vconfig || !v->cfg.map) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = dl_config_snapshot(v);
	if (ret)
		goto err_free;
	v->cfg.nvcaps = 0;
	v->cfg.pcie_cap = 0;
	dl_config_find_caps(v);
	dl_config_map_caps(v);
	dl_config_init_bars(v);
	/* The IDs the remote table and the mdev types go by. */
	dl_config_put(v, PCI_VENDOR_ID, 2, v->info.vendor);
	dl_config_put(v, PCI_DEVICE_ID, 2, v->info.device);
	dl_config_put(v, PCI_CLASS_REVISION, 4, v->info.class_rev);
	dl_config_init_intx_pin(v);
	/* Whatever the lender left on, the guest starts with it off. */
	dl_config_after_reset(v);
	return 0;

err_free:
	kfree(v->cfg.map);
	v->cfg.map = NULL;
	kfree(v->cfg.vconfig);
	v->cfg.vconfig = NULL;
	return ret;
}

/**
 * dl_config_free() - drop the copy at close.
 * @v: the mdev; caller holds v->lock.
 */
void dl_config_free(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	kfree(v->cfg.map);
	v->cfg.map = NULL;
	kfree(v->cfg.vconfig);
	v->cfg.vconfig = NULL;
}

/**
 * dl_config_after_reset() - the virtual registers of a device just reset:
 *	decoding, bus mastering, MSI and MSI-X off.
 * @v: the mdev; caller holds v->lock.
 */
void dl_config_after_reset(struct dl_vdev *v)
{
	unsigned int msi = dl_config_cap_pos(v, PCI_CAP_ID_MSI);
	unsigned int msix = dl_config_cap_pos(v, PCI_CAP_ID_MSIX);
	u16 cmd;

	lockdep_assert_held(&v->lock);

	cmd = dl_config_get(v, PCI_COMMAND, 2);
	cmd &= ~(PCI_COMMAND_IO | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
	dl_config_put(v, PCI_COMMAND, 2, cmd);
	if (msi)
		dl_config_put(v, msi + PCI_MSI_FLAGS, 2,
			      dl_config_get(v, msi + PCI_MSI_FLAGS, 2) &
			      ~(PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE));
	if (msix)
		dl_config_put(v, msix + PCI_MSIX_FLAGS, 2,
			      dl_config_get(v, msix + PCI_MSIX_FLAGS, 2) &
			      ~(PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL));
}

static int dl_config_write_command(struct dl_vdev *v, u16 new)
{
	u16 old = dl_config_get(v, PCI_COMMAND, 2);
	bool bme_on = !(old & PCI_COMMAND_MASTER) && (new & PCI_COMMAND_MASTER);
	bool bme_off = (old & PCI_COMMAND_MASTER) && !(new & PCI_COMMAND_MASTER);
	int ret, refused = 0;

	/* A migration's destination maps and decodes once it takes over. */
	if (dl_session_incoming(v)) {
		dl_config_put(v, PCI_COMMAND, 2, new);
		return 0;
	}

	if (bme_on) {
		ret = dl_session_borrow(v);
		if (!ret)
			ret = v->config_ops->dma_enable(v);
		if (ret) {
			dev_err_ratelimited(dl_vdev_dev(v),
					    "cannot map guest memory for DMA: %d; bus master stays off\n",
					    ret);
			new &= ~PCI_COMMAND_MASTER;
			/*
			 * No room (the lender's window onto this host, its
			 * budget, the pinned page cap): the VMM is told, as
			 * by a VFIO DMA map that found none.
			 */
			if (ret == -ENOSPC)
				refused = ret;
		}
	}
	/* Mappings go before the device stops decoding (CVE-2020-12888). */
	if ((old & PCI_COMMAND_MEMORY) && !(new & PCI_COMMAND_MEMORY) &&
	    v->config_ops->mem_decode)
		v->config_ops->mem_decode(v, false);
	dl_config_put(v, PCI_COMMAND, 2, new);
	ret = dl_config_write_dev(v, PCI_COMMAND, 2, new);
	if (bme_off)
		v->config_ops->dma_disable(v);
	if (!ret && !(old & PCI_COMMAND_MEMORY) && (new & PCI_COMMAND_MEMORY) &&
	    v->config_ops->mem_decode)
		v->config_ops->mem_decode(v, true);
	if (v->config_ops->bars_changed)
		v->config_ops->bars_changed(v);
	return ret ?: refused;
}

/**
 * dl_config_bar_addr() - where the guest put a memory BAR.
 * @v: the mdev; caller holds v->lock.
 * @bar: the BAR, below %DL_NUM_BARS.
 *
 * Return: its address in the virtual BAR register(s), 0 for an absent or
 * I/O BAR, or the upper half of a 64-bit one.
 */
u64 dl_config_bar_addr(struct dl_vdev *v, unsigned int bar)
{
	unsigned int off = PCI_BASE_ADDRESS_0 + bar * 4;
	u32 flags = v->info.bar_flags[bar];
	u64 addr;

	lockdep_assert_held(&v->lock);

	if (!v->info.bar_size[bar] || (flags & DL_BAR_F_IO))
		return 0;
	addr = dl_config_get(v, off, 4) & PCI_BASE_ADDRESS_MEM_MASK;
	if ((flags & DL_BAR_F_MEM64) && bar + 1 < DL_NUM_BARS)
		addr |= (u64)dl_config_get(v, off + 4, 4) << 32;
	return addr;
}

/**
 * dl_config_command() - the virtual command register.
 * @v: the mdev; caller holds v->lock.
 *
 * Return: its value.
 */
u16 dl_config_command(struct dl_vdev *v)
{
	return dl_config_get(v, PCI_COMMAND, 2);
}

/*
 * A write to a BAR register: only the size mask's bits take. The copy
 * holds (address & mask) | type bits, so its bits outside the mask are
 * the type bits (all zero for an absent BAR or an upper half).
 */
static void dl_config_write_bar(struct dl_vdev *v, unsigned int off,
				unsigned int size, u32 val)
{
	unsigned int reg = (off - PCI_BASE_ADDRESS_0) / 4;
	unsigned int base = PCI_BASE_ADDRESS_0 + reg * 4;
	u32 type_bits = dl_config_get(v, base, 4) & ~v->cfg.bar_mask[reg];

	dl_config_put(v, off, size, val);
	dl_config_put(v, base, 4,
		      (dl_config_get(v, base, 4) & v->cfg.bar_mask[reg]) |
		      type_bits);
	if (v->config_ops->bars_changed)
		v->config_ops->bars_changed(v);
}

/* No more MSI vectors enabled than the device is capable of. */
static void dl_config_msi_clamp(struct dl_vdev *v, unsigned int flags_at)
{
	u16 flags = dl_config_get(v, flags_at, 2);

	if (FIELD_GET(PCI_MSI_FLAGS_QSIZE, flags) >
	    FIELD_GET(PCI_MSI_FLAGS_QMASK, flags)) {
		flags &= ~PCI_MSI_FLAGS_QSIZE;
		flags |= FIELD_PREP(PCI_MSI_FLAGS_QSIZE,
				    FIELD_GET(PCI_MSI_FLAGS_QMASK, flags));
		dl_config_put(v, flags_at, 2, flags);
	}
}

/*
 * A write to virtual capabilities: of each byte only the bits the shared
 * model lets a guest write take (the map's vwmask, from the table of the
 * capability that byte is in: a run may end one and start the next).
 */
static void dl_config_write_vcap(struct dl_vdev *v, unsigned int off,
				 unsigned int size, u32 val)
{
	const struct dl_cfg_byte *m;
	unsigned int i;

	for (i = 0; i < size; i++) {
		m = &v->cfg.map[off + i];
		v->cfg.vconfig[off + i] = (v->cfg.vconfig[off + i] & ~m->vwmask) |
				      ((val >> (8 * i)) & m->vwmask);
		if (m->view == DL_VIEW_MSI_FLAGS)
			dl_config_msi_clamp(v, off + i);
	}
}

/* A write to virtual bytes, all of @region. */
static int dl_config_write_virt(struct dl_vdev *v, enum dl_cfg_region region,
				unsigned int off, unsigned int size, u32 val)
{
	u16 cmd;
	unsigned int i;

	switch (region) {
	case DL_CFG_COMMAND:
		cmd = dl_config_get(v, PCI_COMMAND, 2);
		for (i = 0; i < size; i++) {
			unsigned int b = off + i;

			if (b == PCI_COMMAND)
				cmd = (cmd & 0xff00) | ((val >> (8 * i)) & 0xff);
			else if (b == PCI_COMMAND + 1)
				cmd = (cmd & 0x00ff) | (((val >> (8 * i)) & 0xff) << 8);
		}
		return dl_config_write_command(v, cmd);
	case DL_CFG_BAR:
		dl_config_write_bar(v, off, size, val);
		return 0;
	case DL_CFG_VCAP:
		dl_config_write_vcap(v, off, size, val);
		return 0;
	default:
		/* IDs, ROM and INTx pin: dropped. */
		return 0;
	}
}

/* A write of bytes that are not virtual; FLR takes the reset path. */
static int dl_config_write_through(struct dl_vdev *v, unsigned int off,
				   unsigned int size, u32 val)
{
	unsigned int devctl = v->cfg.pcie_cap + PCI_EXP_DEVCTL;

	if (v->cfg.pcie_cap && off <= devctl + 1 && off + size > devctl + 1 &&
	    (v->info.flags & DL_DEV_F_PCIE)) {
		unsigned int shift = (devctl + 1 - off) * 8;
		u32 flr = (PCI_EXP_DEVCTL_BCR_FLR >> 8) << shift;

		if (val & flr) {
			val &= ~flr;
			v->config_ops->reset(v);
		}
	}
	return dl_config_write_dev(v, off, size, val);
}

static int dl_config_read_piece(struct dl_vdev *v, unsigned int off,
				unsigned int size, u32 *val)
{
	unsigned int i, nvirt = 0;
	u32 dev;

	/* Lost: a function gone from the bus, every byte of it. */
	if (READ_ONCE(v->sess.state) == DL_VDEV_LOST) {
		*val = ~0U;
		return 0;
	}
	for (i = 0; i < size; i++)
		nvirt += dl_config_virt(v, off + i);
	*val = dl_config_get(v, off, size);
	if (nvirt == size)
		return 0;
	/* Unreachable: the device's bytes read as from a function gone. */
	if (dl_config_read_dev(v, off, size, &dev))
		dev = ~0U;
	for (i = 0; i < size; i++) {
		if (dl_config_virt(v, off + i))
			continue;
		*val &= ~(0xffU << (8 * i));
		*val |= dev & (0xffU << (8 * i));
	}
	return 0;
}

/*
 * A write of a run of bytes of one region, not virtual: in naturally
 * aligned pieces, as the device takes them.
 */
static int dl_config_write_through_run(struct dl_vdev *v, unsigned int off,
				       unsigned int size, u32 val)
{
	unsigned int i, n;
	int ret = 0, err;
	u32 piece;

	for (i = 0; i < size; i += n) {
		n = 4;
		while (n > 1 && (n > size - i || ((off + i) & (n - 1))))
			n >>= 1;
		piece = val >> (8 * i);
		if (n < 4)
			piece &= (1U << (8 * n)) - 1;
		err = dl_config_write_through(v, off + i, n, piece);
		if (err && !ret)
			ret = err;
	}
	return ret;
}

/*
 * A piece may span regions: command and status, the end of one
 * capability and the start of the next. Each run of bytes of one region
 * takes that region's filter, so that no byte escapes its own.
 */
static int dl_config_write_piece(struct dl_vdev *v, unsigned int off,
				 unsigned int size, u32 val)
{
	enum dl_cfg_region region;
	unsigned int i, n;
	u32 run;
	int ret = 0, err;

	for (i = 0; i < size; i += n) {
		region = dl_config_region(v, off + i);
		n = 1;
		while (i + n < size &&
		       dl_config_region(v, off + i + n) == region)
			n++;
		run = val >> (8 * i);
		if (n < 4)
			run &= (1U << (8 * n)) - 1;
		if (region == DL_CFG_DEV)
			err = dl_config_write_through_run(v, off + i, n, run);
		else
			err = dl_config_write_virt(v, region, off + i, n, run);
		if (err && !ret)
			ret = err;
	}
	return ret;
}

/**
 * dl_config_rw() - a read or write of the config region.
 * @v: the mdev, open; caller holds v->lock.
 * @buf: the user's buffer.
 * @count: bytes.
 * @pos: offset in config space.
 * @write: write rather than read.
 *
 * Return: bytes done, or -errno (-ENOSPC: bus mastering was refused for
 * want of room to map the guest's memory; the rest of the write took).
 */
ssize_t dl_config_rw(struct dl_vdev *v, char __user *buf, size_t count,
		     loff_t pos, bool write)
{
	unsigned int size;
	size_t done = 0;
	__le32 le;
	u32 val;

	lockdep_assert_held(&v->lock);

	if (pos < 0 || pos >= v->info.cfg_size ||
	    count > v->info.cfg_size - pos)
		return -EINVAL;
	while (done < count) {
		size = 4;
		while (size > 1 && (size > count - done || (pos & (size - 1))))
			size >>= 1;
		if (write) {
			le = 0;
			if (copy_from_user(&le, buf + done, size))
				return -EFAULT;
			/*
			 * Failures are logged; the guest sees a dropped write.
			 * But bus mastering refused for want of room (window
			 * space, pins) fails the VMM's write: it is told, as
			 * by a VFIO DMA map that found none.
			 */
			if (dl_config_write_piece(v, pos, size,
						  le32_to_cpu(le)) == -ENOSPC)
				return -ENOSPC;
		} else {
			dl_config_read_piece(v, pos, size, &val);
			le = cpu_to_le32(val);
			if (copy_to_user(buf + done, &le, size))
				return -EFAULT;
		}
		done += size;
		pos += size;
	}
	return done;
}
