// SPDX-License-Identifier: GPL-2.0
/*
 * The emulated port's ntb_dev_ops: what Linux's NTB clients call.
 *
 * Local registers are read and written under ne->lock. What reaches a
 * peer is a posted message: doorbells, scratchpad and message writes go
 * without sleeping (clients such as ntb_pingpong ring from a timer), so a
 * full ring fails them with -EAGAIN, as a busy register would; setting a
 * translation and enabling the link may sleep.
 */
#include <linux/dma-direct.h>
#include <linux/iommu.h>
#include <linux/pci.h>

#include "hook.h"
#include "internal.h"

static int dl_ntbe_port_number(struct ntb_dev *ntb)
{
	return dl_ntbe_of(ntb)->self;
}

static int dl_ntbe_peer_port_count(struct ntb_dev *ntb)
{
	return dl_ntbe_of(ntb)->hosts - 1;
}

static int dl_ntbe_peer_port_number(struct ntb_dev *ntb, int pidx)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);

	return dl_ntbe_pidx_ok(ne, pidx) ? dl_ntbe_host(ne, pidx) : -EINVAL;
}

static int dl_ntbe_peer_port_idx(struct ntb_dev *ntb, int port)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);

	if (port < 0 || port >= ne->hosts || port == ne->self)
		return -EINVAL;
	return dl_ntbe_pidx(ne, port);
}

static u64 dl_ntbe_link_is_up(struct ntb_dev *ntb, enum ntb_speed *speed,
			      enum ntb_width *width)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;
	u64 linked;

	spin_lock_irqsave(&ne->lock, flags);
	linked = ne->linked;
	spin_unlock_irqrestore(&ne->lock, flags);
	/* Nothing is trained: report a plain link when there is one. */
	if (speed)
		*speed = linked ? NTB_SPEED_GEN3 : NTB_SPEED_NONE;
	if (width)
		*width = linked ? NTB_WIDTH_4 : NTB_WIDTH_NONE;
	return linked;
}

/* Tell every peer whose link is up how our side of the link stands. */
static void dl_ntbe_link_set(struct dl_ntbe *ne, bool on)
{
	unsigned long flags;
	u32 host;

	spin_lock_irqsave(&ne->lock, flags);
	ne->link_on = on;
	spin_unlock_irqrestore(&ne->lock, flags);
	for (host = 0; host < ne->hosts; host++)
		if (host != ne->self && dl_fabric_link_is_up(ne->fab, host))
			dl_ntbe_hello(ne, host, DL_NTB_F_PRESENT |
				      (on ? DL_NTB_F_LINK : 0), false);
	dl_ntbe_link_update(ne);
}

static int dl_ntbe_link_enable(struct ntb_dev *ntb, enum ntb_speed max_speed,
			       enum ntb_width max_width)
{
	dl_ntbe_link_set(dl_ntbe_of(ntb), true);
	return 0;
}

static int dl_ntbe_link_disable(struct ntb_dev *ntb)
{
	dl_ntbe_link_set(dl_ntbe_of(ntb), false);
	return 0;
}

static int dl_ntbe_mw_count(struct ntb_dev *ntb, int pidx)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);

	return dl_ntbe_pidx_ok(ne, pidx) ? ne->mws : -EINVAL;
}

static bool dl_ntbe_widx_ok(const struct dl_ntbe *ne, int widx)
{
	return widx >= 0 && widx < ne->mws;
}

static int dl_ntbe_mw_get_align(struct ntb_dev *ntb, int pidx, int widx,
				resource_size_t *addr_align,
				resource_size_t *size_align,
				resource_size_t *size_max)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);

	if (!dl_ntbe_pidx_ok(ne, pidx) || !dl_ntbe_widx_ok(ne, widx))
		return -EINVAL;
	if (addr_align)
		*addr_align = PAGE_SIZE;
	if (size_align)
		*size_align = PAGE_SIZE;
	/* At most this host's RAM, which a peer's window shows. */
	if (size_max)
		*size_max = ne->mw_size_max;
	return 0;
}

/*
 * Where an inbound write at bus address @addr lands in this host's RAM,
 * without a translating IOMMU: the same address.
 */
static phys_addr_t dl_ntbe_bus_to_phys(struct dl_ntbe *ne, dma_addr_t addr)
{
	return dma_to_phys(&ne->ntb.pdev->dev, addr);
}

static int dl_ntbe_mw_trans(struct dl_ntbe *ne, int pidx, int widx,
			    u64 addr, u64 size, bool bus)
{
	struct dl_ntb_mw m = {
		.index = cpu_to_le32(widx),
		.flags = cpu_to_le32(bus ? DL_NTB_MW_F_BUS : 0),
		.addr = cpu_to_le64(addr),
		.size = cpu_to_le64(size),
	};
	u32 host = dl_ntbe_host(ne, pidx);
	unsigned long flags;

	spin_lock_irqsave(&ne->lock, flags);
	ne->peers[host].in[widx].addr = addr;
	ne->peers[host].in[widx].size = size;
	ne->peers[host].in[widx].bus = bus;
	spin_unlock_irqrestore(&ne->lock, flags);
	/* A peer not up now learns it when it says hello. */
	if (!dl_fabric_link_is_up(ne->fab, host))
		return 0;
	return dl_fabric_send(ne->fab, host, DL_MSG_NTB_MW, &m, sizeof(m));
}

/*
 * A real adapter's inbound writes go through the IOMMU as the adapter's
 * DMA, store by store. The emulated peer writes RAM directly: without a
 * translating IOMMU the window is one physical range, told to the peer;
 * behind one, the peer is told the bus address and asks where each
 * offset lands when it maps the window (DL_MSG_NTB_XLATE, hook.h), so
 * the run need not be mapped, nor contiguous, now.
 */
static int dl_ntbe_mw_set_trans(struct ntb_dev *ntb, int pidx, int widx,
				dma_addr_t addr, resource_size_t size)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);

	if (!dl_ntbe_pidx_ok(ne, pidx) || !dl_ntbe_widx_ok(ne, widx))
		return -EINVAL;
	/* What a window this size could not translate, it refuses. */
	if (!size || !IS_ALIGNED(addr, PAGE_SIZE) ||
	    !IS_ALIGNED(size, PAGE_SIZE) || size > ne->mw_size_max)
		return -EINVAL;
	if (dl_ntbe_translating(ne))
		return dl_ntbe_mw_trans(ne, pidx, widx, addr, size, true);
	return dl_ntbe_mw_trans(ne, pidx, widx, dl_ntbe_bus_to_phys(ne, addr),
				size, false);
}

static int dl_ntbe_mw_clear_trans(struct ntb_dev *ntb, int pidx, int widx)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);

	if (!dl_ntbe_pidx_ok(ne, pidx) || !dl_ntbe_widx_ok(ne, widx))
		return -EINVAL;
	return dl_ntbe_mw_trans(ne, pidx, widx, 0, 0, false);
}

static int dl_ntbe_peer_mw_count(struct ntb_dev *ntb)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);

	return (ne->hosts - 1) * ne->mws;
}

/*
 * Outbound window pidx * mws + w: the part of our window onto the
 * peer's RAM that its inbound window w for us translates to. Known only
 * once the peer has set that translation: before, there is no window.
 */
static int dl_ntbe_peer_mw_get_addr(struct ntb_dev *ntb, int widx,
				    phys_addr_t *base, resource_size_t *size)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	int pidx = widx / ne->mws;
	struct dl_ntbe_mw mw;
	unsigned long flags;
	phys_addr_t at;
	u32 host;
	int ret;

	if (widx < 0 || !dl_ntbe_pidx_ok(ne, pidx))
		return -EINVAL;
	host = dl_ntbe_host(ne, pidx);
	spin_lock_irqsave(&ne->lock, flags);
	mw = ne->peers[host].out[widx % ne->mws];
	spin_unlock_irqrestore(&ne->lock, flags);
	/* Translated page by page by the peer: no linear range (hook.h). */
	if (!mw.size || mw.bus)
		return -ENXIO;
	ret = dl_fabric_peer_mw_xlate(ne->fab, host, mw.addr, mw.size, &at,
				      NULL);
	if (ret)
		return ret;
	if (base)
		*base = at;
	if (size)
		*size = mw.size;
	return 0;
}

/**
 * dl_ntbe_peer_mw_resolve() - emulation hook (hook.h): where stores through
 *	outbound window @widx at @off land, as a CPU physical address in the
 *	fabric's window onto the peer.
 * @ntb: an NTB device.
 * @widx: the outbound window.
 * @off: offset in it.
 * @len: bytes; 0 to learn @size only.
 * @phys: set to where @off lands.
 * @run: set to the bytes from @phys that are contiguous (at most @len).
 * @size: set to the window's size.
 *
 * Asks the peer (DL_MSG_NTB_XLATE) where its window is translated by its
 * adapter's IOMMU; process context, sleeps then.
 *
 * Return: 0; -ENODEV if @ntb is not an emulated port; -ENXIO if the peer
 * set no translation; -EINVAL, -ERANGE (outside the window or the peer's
 * RAM), -EPROTO (a malformed answer), or the request's error.
 */
int dl_ntbe_peer_mw_resolve(struct ntb_dev *ntb, int widx, u64 off, u64 len,
			    phys_addr_t *phys, u64 *run, u64 *size)
{
	struct dl_ntbe *ne;
	struct dl_ntb_xlate req = {}, resp;
	struct dl_ntbe_mw mw;
	unsigned long flags;
	size_t resp_len;
	u64 got, addr, end, head;
	int pidx, ret;
	u32 host;

	if (ntb->ops != &dl_ntbe_ops)
		return -ENODEV;
	ne = dl_ntbe_of(ntb);
	pidx = widx / ne->mws;
	if (widx < 0 || !dl_ntbe_pidx_ok(ne, pidx))
		return -EINVAL;
	host = dl_ntbe_host(ne, pidx);
	spin_lock_irqsave(&ne->lock, flags);
	mw = ne->peers[host].out[widx % ne->mws];
	spin_unlock_irqrestore(&ne->lock, flags);
	if (!mw.size)
		return -ENXIO;
	*size = mw.size;
	if (!len)
		return 0;
	if (check_add_overflow(off, len, &end) || end > mw.size)
		return -ERANGE;
	if (!mw.bus) {
		*run = len;
		return dl_fabric_peer_mw_xlate(ne->fab, host, mw.addr + off,
					       len, phys, NULL);
	}
	/* The peer translates whole pages; @off need not start one. */
	head = offset_in_page(off);
	req.index = cpu_to_le32(widx % ne->mws);
	req.off = cpu_to_le64(off - head);
	req.len = cpu_to_le64(PAGE_ALIGN(head + len));
	spin_lock_irqsave(&ne->lock, flags);
	ne->xlate_tx++;
	spin_unlock_irqrestore(&ne->lock, flags);
	ret = dl_fabric_request(ne->fab, host, DL_MSG_NTB_XLATE, &req,
				sizeof(req), &resp, sizeof(resp), &resp_len,
				DL_FABRIC_REQ_TIMEOUT_MS);
	if (ret)
		return ret;
	got = le64_to_cpu(resp.len);
	addr = le64_to_cpu(resp.addr);
	/* The peer's answer is checked like anything it sends. */
	if (resp_len != sizeof(resp) || resp.index != req.index ||
	    resp.off != req.off || got <= head ||
	    got > le64_to_cpu(req.len) ||
	    !IS_ALIGNED(got, PAGE_SIZE) || !IS_ALIGNED(addr, PAGE_SIZE))
		return -EPROTO;
	/* And where it lands must be its RAM, inside our window onto it. */
	ret = dl_fabric_peer_mw_xlate(ne->fab, host, addr, got, phys, NULL);
	if (ret)
		return ret;
	*phys += head;
	*run = min(got - head, len);
	return 0;
}
EXPORT_SYMBOL_GPL(dl_ntbe_peer_mw_resolve);

static u64 dl_ntbe_db_valid_mask(struct ntb_dev *ntb)
{
	return DL_NTBE_DB_VALID;
}

static u64 dl_ntbe_db_read(struct ntb_dev *ntb)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;
	u64 db;

	spin_lock_irqsave(&ne->lock, flags);
	db = ne->db;
	spin_unlock_irqrestore(&ne->lock, flags);
	return db;
}

static int dl_ntbe_db_set(struct ntb_dev *ntb, u64 bits)
{
	dl_ntbe_db_change(dl_ntbe_of(ntb), bits, 0, 0, 0);
	return 0;
}

static int dl_ntbe_db_clear(struct ntb_dev *ntb, u64 bits)
{
	dl_ntbe_db_change(dl_ntbe_of(ntb), 0, bits, 0, 0);
	return 0;
}

static u64 dl_ntbe_db_read_mask(struct ntb_dev *ntb)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;
	u64 mask;

	spin_lock_irqsave(&ne->lock, flags);
	mask = ne->db_mask;
	spin_unlock_irqrestore(&ne->lock, flags);
	return mask;
}

static int dl_ntbe_db_set_mask(struct ntb_dev *ntb, u64 bits)
{
	dl_ntbe_db_change(dl_ntbe_of(ntb), 0, 0, bits, 0);
	return 0;
}

static int dl_ntbe_db_clear_mask(struct ntb_dev *ntb, u64 bits)
{
	dl_ntbe_db_change(dl_ntbe_of(ntb), 0, 0, 0, bits);
	return 0;
}

/*
 * With one peer every bit goes to it, as on a two-port adapter; with
 * more, bit i rings port i, as a switch routes them (ntb_pingpong rings
 * bit <peer port>). A ring full now does not lose a doorbell: its bits
 * wait, merged, for dl_ntbe_db_work().
 */
static int dl_ntbe_peer_db_set(struct ntb_dev *ntb, u64 bits)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;
	struct dl_ntb_db db;
	bool later = false;
	u32 host;

	if (bits & ~DL_NTBE_DB_VALID)
		return -EINVAL;
	for (host = 0; host < ne->hosts; host++) {
		u64 send = ne->hosts == 2 ? bits : bits & BIT_ULL(host);

		if (host == ne->self || !send)
			continue;
		spin_lock_irqsave(&ne->lock, flags);
		if (ne->db_pending[host]) {
			/* Behind bits that wait already: keep the order. */
			ne->db_pending[host] |= send;
			later = true;
			spin_unlock_irqrestore(&ne->lock, flags);
			continue;
		}
		spin_unlock_irqrestore(&ne->lock, flags);
		db.bits = cpu_to_le64(send);
		if (!dl_fabric_send_atomic(ne->fab, host, DL_MSG_NTB_DB, &db,
					   sizeof(db)))
			continue;
		spin_lock_irqsave(&ne->lock, flags);
		ne->db_pending[host] |= send;
		spin_unlock_irqrestore(&ne->lock, flags);
		later = true;
	}
	if (later)
		mod_delayed_work(system_wq, &ne->db_work, 0);
	return 0;
}

static int dl_ntbe_spad_count(struct ntb_dev *ntb)
{
	return DL_NTB_SPADS;
}

static u32 dl_ntbe_spad_read(struct ntb_dev *ntb, int sidx)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;
	u32 val;

	if (sidx < 0 || sidx >= DL_NTB_SPADS)
		return 0;
	spin_lock_irqsave(&ne->lock, flags);
	val = ne->spad[sidx];
	spin_unlock_irqrestore(&ne->lock, flags);
	return val;
}

static int dl_ntbe_spad_write(struct ntb_dev *ntb, int sidx, u32 val)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;

	if (sidx < 0 || sidx >= DL_NTB_SPADS)
		return -EINVAL;
	spin_lock_irqsave(&ne->lock, flags);
	ne->spad[sidx] = val;
	spin_unlock_irqrestore(&ne->lock, flags);
	return 0;
}

static int dl_ntbe_peer_reg_send(struct dl_ntbe *ne, int pidx, u16 type,
				 int idx, int nr, u32 val)
{
	struct dl_ntb_reg r = {
		.index = cpu_to_le32(idx),
		.value = cpu_to_le32(val),
	};

	if (!dl_ntbe_pidx_ok(ne, pidx) || idx < 0 || idx >= nr)
		return -EINVAL;
	return dl_fabric_send_atomic(ne->fab, dl_ntbe_host(ne, pidx), type,
				     &r, sizeof(r));
}

static int dl_ntbe_peer_spad_write(struct ntb_dev *ntb, int pidx, int sidx,
				   u32 val)
{
	return dl_ntbe_peer_reg_send(dl_ntbe_of(ntb), pidx, DL_MSG_NTB_SPAD,
				     sidx, DL_NTB_SPADS, val);
}

/* A round trip to the peer: process context only. ~0 when it fails. */
static u32 dl_ntbe_peer_spad_read(struct ntb_dev *ntb, int pidx, int sidx)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	struct dl_ntb_reg req = { .index = cpu_to_le32(sidx) }, resp;
	size_t len;
	int ret;

	might_sleep();
	if (!dl_ntbe_pidx_ok(ne, pidx) || sidx < 0 || sidx >= DL_NTB_SPADS)
		return ~0U;
	ret = dl_fabric_request(ne->fab, dl_ntbe_host(ne, pidx),
				DL_MSG_NTB_SPAD_READ, &req, sizeof(req),
				&resp, sizeof(resp), &len,
				DL_FABRIC_REQ_TIMEOUT_MS);
	if (ret || len != sizeof(resp) || le32_to_cpu(resp.index) != sidx)
		return ~0U;
	return le32_to_cpu(resp.value);
}

static int dl_ntbe_msg_count(struct ntb_dev *ntb)
{
	return DL_NTB_MSGS;
}

static u64 dl_ntbe_msg_inbits(struct ntb_dev *ntb)
{
	return DL_NTBE_MSG_INBITS;
}

/* No outbound status: a message that finds its register full is lost. */
static u64 dl_ntbe_msg_outbits(struct ntb_dev *ntb)
{
	return 0;
}

static u64 dl_ntbe_msg_read_sts(struct ntb_dev *ntb)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;
	u64 sts;

	spin_lock_irqsave(&ne->lock, flags);
	sts = ne->msg_sts;
	spin_unlock_irqrestore(&ne->lock, flags);
	return sts;
}

static int dl_ntbe_msg_clear_sts(struct ntb_dev *ntb, u64 bits)
{
	dl_ntbe_msg_change(dl_ntbe_of(ntb), 0, bits, 0, 0);
	return 0;
}

static int dl_ntbe_msg_set_mask(struct ntb_dev *ntb, u64 bits)
{
	dl_ntbe_msg_change(dl_ntbe_of(ntb), 0, 0, bits, 0);
	return 0;
}

static int dl_ntbe_msg_clear_mask(struct ntb_dev *ntb, u64 bits)
{
	dl_ntbe_msg_change(dl_ntbe_of(ntb), 0, 0, 0, bits);
	return 0;
}

static u32 dl_ntbe_msg_read(struct ntb_dev *ntb, int *pidx, int midx)
{
	struct dl_ntbe *ne = dl_ntbe_of(ntb);
	unsigned long flags;
	u32 val;

	if (midx < 0 || midx >= DL_NTB_MSGS)
		return ~0U;
	spin_lock_irqsave(&ne->lock, flags);
	val = ne->msg[midx];
	if (pidx)
		*pidx = ne->msg_src[midx];
	spin_unlock_irqrestore(&ne->lock, flags);
	return val;
}

static int dl_ntbe_peer_msg_write(struct ntb_dev *ntb, int pidx, int midx,
				  u32 msg)
{
	return dl_ntbe_peer_reg_send(dl_ntbe_of(ntb), pidx, DL_MSG_NTB_MSG,
				     midx, DL_NTB_MSGS, msg);
}

const struct ntb_dev_ops dl_ntbe_ops = {
	.port_number = dl_ntbe_port_number,
	.peer_port_count = dl_ntbe_peer_port_count,
	.peer_port_number = dl_ntbe_peer_port_number,
	.peer_port_idx = dl_ntbe_peer_port_idx,
	.link_is_up = dl_ntbe_link_is_up,
	.link_enable = dl_ntbe_link_enable,
	.link_disable = dl_ntbe_link_disable,
	.mw_count = dl_ntbe_mw_count,
	.mw_get_align = dl_ntbe_mw_get_align,
	.mw_set_trans = dl_ntbe_mw_set_trans,
	.mw_clear_trans = dl_ntbe_mw_clear_trans,
	.peer_mw_count = dl_ntbe_peer_mw_count,
	.peer_mw_get_addr = dl_ntbe_peer_mw_get_addr,
	.db_valid_mask = dl_ntbe_db_valid_mask,
	.db_read = dl_ntbe_db_read,
	.db_set = dl_ntbe_db_set,
	.db_clear = dl_ntbe_db_clear,
	.db_read_mask = dl_ntbe_db_read_mask,
	.db_set_mask = dl_ntbe_db_set_mask,
	.db_clear_mask = dl_ntbe_db_clear_mask,
	.peer_db_set = dl_ntbe_peer_db_set,
	.spad_count = dl_ntbe_spad_count,
	.spad_read = dl_ntbe_spad_read,
	.spad_write = dl_ntbe_spad_write,
	.peer_spad_read = dl_ntbe_peer_spad_read,
	.peer_spad_write = dl_ntbe_peer_spad_write,
	.msg_count = dl_ntbe_msg_count,
	.msg_inbits = dl_ntbe_msg_inbits,
	.msg_outbits = dl_ntbe_msg_outbits,
	.msg_read_sts = dl_ntbe_msg_read_sts,
	.msg_clear_sts = dl_ntbe_msg_clear_sts,
	.msg_set_mask = dl_ntbe_msg_set_mask,
	.msg_clear_mask = dl_ntbe_msg_clear_mask,
	.msg_read = dl_ntbe_msg_read,
	.peer_msg_write = dl_ntbe_peer_msg_write,
};
