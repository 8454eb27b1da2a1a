// SPDX-License-Identifier: GPL-2.0
/*
 * The port's state as both sides change it: what Linux's NTB clients do
 * (ops.c) and what peers send (main.c) end up here, and nothing here
 * calls either back.
 *
 * Here are the link as the NTB clients are told of it, the hellos that
 * tell peers how this port stands (with the translations it holds for
 * them), the latched doorbell and message registers that raise the NTB
 * core's events, and the work that sends what found a ring full.
 */
#include <linux/iommu.h>
#include <linux/jiffies.h>
#include <linux/pci.h>
#include <linux/workqueue.h>

#include "internal.h"

/**
 * dl_ntbe_link_update() - recompute which peers the link is up to, and
 *	tell the NTB clients if that changed.
 * @ne: the port.
 */
void dl_ntbe_link_update(struct dl_ntbe *ne)
{
	unsigned long flags;
	u64 linked = 0;
	bool changed;
	u32 host;

	for (host = 0; host < ne->hosts; host++) {
		struct dl_ntbe_peer *p = &ne->peers[host];

		if (host == ne->self || !dl_fabric_link_is_up(ne->fab, host))
			continue;
		spin_lock_irqsave(&ne->lock, flags);
		if (ne->link_on && p->present && p->link)
			linked |= BIT_ULL(dl_ntbe_pidx(ne, host));
		spin_unlock_irqrestore(&ne->lock, flags);
	}
	spin_lock_irqsave(&ne->lock, flags);
	changed = ne->linked != linked;
	ne->linked = linked;
	spin_unlock_irqrestore(&ne->lock, flags);
	if (changed && READ_ONCE(ne->registered))
		ntb_link_event(&ne->ntb);
}

/**
 * dl_ntbe_hello() - tell a peer how this port stands.
 * @ne: the port.
 * @host: the peer.
 * @flags: DL_NTB_F_*.
 * @atomic: do not sleep (then a full ring loses it: the peer's own hello,
 *	when it sees us up, asks again).
 *
 * Return: 0 or an error of the send.
 */
int dl_ntbe_hello(struct dl_ntbe *ne, u32 host, u32 flags, bool atomic)
{
	struct dl_ntb_hello h = { .flags = cpu_to_le32(flags) };

	if (atomic)
		return dl_fabric_send_atomic(ne->fab, host, DL_MSG_NTB_HELLO,
					     &h, sizeof(h));
	return dl_fabric_send(ne->fab, host, DL_MSG_NTB_HELLO, &h, sizeof(h));
}

/*
 * Send a peer the translations we hold for it (it just said hello),
 * without waiting for ring room. Return: 0 or the first error.
 */
static int dl_ntbe_send_trans(struct dl_ntbe *ne, u32 host)
{
	struct dl_ntbe_mw in[DL_NTB_MWS];
	unsigned long flags;
	int w, ret;

	spin_lock_irqsave(&ne->lock, flags);
	memcpy(in, ne->peers[host].in, sizeof(in));
	spin_unlock_irqrestore(&ne->lock, flags);
	for (w = 0; w < DL_NTB_MWS; w++) {
		struct dl_ntb_mw m = {
			.index = cpu_to_le32(w),
			.flags = cpu_to_le32(in[w].bus ? DL_NTB_MW_F_BUS : 0),
			.addr = cpu_to_le64(in[w].addr),
			.size = cpu_to_le64(in[w].size),
		};

		if (!in[w].size)
			continue;
		ret = dl_fabric_send_atomic(ne->fab, host, DL_MSG_NTB_MW, &m,
					    sizeof(m));
		if (ret)
			return ret;
	}
	return 0;
}

/**
 * dl_ntbe_answer_hello() - send a host that asked our hello and the
 *	translations we hold for it, without waiting for ring room.
 * @ne: the port.
 * @host: the host.
 *
 * Both are states, not events: sending them again is harmless, so a
 * partial send is simply retried whole.
 *
 * Return: 0, or -EAGAIN if the host's ring had no room (try again later),
 * or another error of the send (the host is gone: its own hello will ask
 * again when it is back).
 */
int dl_ntbe_answer_hello(struct dl_ntbe *ne, u32 host)
{
	unsigned long flags;
	bool on;
	int ret;

	spin_lock_irqsave(&ne->lock, flags);
	on = ne->link_on;
	spin_unlock_irqrestore(&ne->lock, flags);
	ret = dl_ntbe_hello(ne, host, DL_NTB_F_PRESENT |
			    (on ? DL_NTB_F_LINK : 0), true);
	if (!ret)
		ret = dl_ntbe_send_trans(ne, host);
	return ret;
}

/*
 * A latched register and its mask, as interrupt hardware has them: @set
 * and @clear change the register, @mask_set and @mask_clear the mask; only
 * bits of @valid are ever set. Returns whether bits just became pending
 * and unmasked, an interrupt. Caller holds ne->lock.
 */
static bool dl_ntbe_latch(u64 *reg, u64 *mask, u64 valid, u64 set, u64 clear,
			  u64 mask_set, u64 mask_clear)
{
	*reg = (*reg | (set & valid)) & ~clear;
	*mask = (*mask | (mask_set & valid)) & ~mask_clear;
	return (set | mask_clear) & *reg & ~*mask;
}

/**
 * dl_ntbe_db_change() - change the doorbell register or its mask, and
 *	raise the doorbell event if unmasked bits are pending afterwards.
 * @ne: the port.
 * @set: bits to set in the register.
 * @clear: bits to clear in the register.
 * @mask_set: bits to mask.
 * @mask_clear: bits to unmask.
 *
 * Any context; also the receive path of %DL_MSG_NTB_DB.
 */
void dl_ntbe_db_change(struct dl_ntbe *ne, u64 set, u64 clear, u64 mask_set,
		       u64 mask_clear)
{
	unsigned long flags;
	bool event;

	spin_lock_irqsave(&ne->lock, flags);
	event = dl_ntbe_latch(&ne->db, &ne->db_mask, DL_NTBE_DB_VALID, set,
			      clear, mask_set, mask_clear);
	spin_unlock_irqrestore(&ne->lock, flags);
	if (event && READ_ONCE(ne->registered))
		ntb_db_event(&ne->ntb, 0);
}

/**
 * dl_ntbe_msg_change() - change the message status or its mask, and raise
 *	the message event if unmasked status is pending afterwards.
 * @ne: the port.
 * @set: status bits that just became set (a message arrived).
 * @clear: status bits to clear.
 * @mask_set: bits to mask.
 * @mask_clear: bits to unmask.
 */
void dl_ntbe_msg_change(struct dl_ntbe *ne, u64 set, u64 clear, u64 mask_set,
			u64 mask_clear)
{
	unsigned long flags;
	bool event;

	spin_lock_irqsave(&ne->lock, flags);
	event = dl_ntbe_latch(&ne->msg_sts, &ne->msg_mask, DL_NTBE_MSG_INBITS,
			      set, clear, mask_set, mask_clear);
	spin_unlock_irqrestore(&ne->lock, flags);
	if (event && READ_ONCE(ne->registered))
		ntb_msg_event(&ne->ntb);
}

/* Answer the hellos that asked; keep those whose ring had no room. */
static void dl_ntbe_send_owed_hellos(struct dl_ntbe *ne)
{
	unsigned long flags;
	u64 owed;
	u32 host;

	spin_lock_irqsave(&ne->lock, flags);
	owed = ne->hello_owed;
	ne->hello_owed = 0;
	spin_unlock_irqrestore(&ne->lock, flags);
	for (host = 0; host < ne->hosts; host++) {
		if (!(owed & BIT_ULL(host)) ||
		    dl_ntbe_answer_hello(ne, host) != -EAGAIN)
			continue;
		spin_lock_irqsave(&ne->lock, flags);
		ne->hello_owed |= BIT_ULL(host);
		spin_unlock_irqrestore(&ne->lock, flags);
		queue_delayed_work(system_wq, &ne->db_work,
				   msecs_to_jiffies(10));
	}
}

/**
 * dl_ntbe_db_work() - send the doorbell bits that found a ring full, and
 *	the hellos peers asked for.
 * @work: &dl_ntbe.db_work.
 */
void dl_ntbe_db_work(struct work_struct *work)
{
	struct dl_ntbe *ne = container_of(to_delayed_work(work),
					  struct dl_ntbe, db_work);
	unsigned long flags;
	struct dl_ntb_db db;
	u64 bits;
	u32 host;

	dl_ntbe_send_owed_hellos(ne);
	for (host = 0; host < ne->hosts; host++) {
		spin_lock_irqsave(&ne->lock, flags);
		bits = ne->db_pending[host];
		ne->db_pending[host] = 0;
		spin_unlock_irqrestore(&ne->lock, flags);
		if (!bits)
			continue;
		db.bits = cpu_to_le64(bits);
		if (!dl_fabric_send(ne->fab, host, DL_MSG_NTB_DB, &db,
				    sizeof(db)))
			continue;
		/* The peer is gone or stuck: its doorbells wait for it. */
		if (!dl_fabric_link_is_up(ne->fab, host))
			continue;
		spin_lock_irqsave(&ne->lock, flags);
		ne->db_pending[host] |= bits;
		spin_unlock_irqrestore(&ne->lock, flags);
		queue_delayed_work(system_wq, &ne->db_work,
				   msecs_to_jiffies(10));
	}
}

/**
 * dl_ntbe_translating() - whether the adapter sits behind a translating
 *	IOMMU domain (its DMA API's, or one its NTB client attached).
 * @ne: the port.
 *
 * Return: true if bus addresses of the adapter are IOVAs.
 */
bool dl_ntbe_translating(struct dl_ntbe *ne)
{
	struct iommu_domain *dom = iommu_get_domain_for_dev(&ne->ntb.pdev->dev);

	return dom && dom->type != IOMMU_DOMAIN_IDENTITY &&
	       (dom->type & __IOMMU_DOMAIN_PAGING);
}

/**
 * dl_ntbe_bus_walk() - where an inbound store at bus address @addr lands,
 *	as the adapter's IOMMU would translate it.
 * @ne: the port, its adapter behind a translating domain.
 * @addr: the bus address, page aligned.
 * @len: bytes wanted, page aligned, nonzero.
 * @phys: set to the physical address @addr translates to.
 * @run: set to the bytes from there that are physically contiguous (at
 *	most @len).
 *
 * Return: 0, or -EINVAL if @addr is not mapped (a store there would fault).
 */
int dl_ntbe_bus_walk(struct dl_ntbe *ne, u64 addr, u64 len, phys_addr_t *phys,
		     u64 *run)
{
	struct iommu_domain *dom = iommu_get_domain_for_dev(&ne->ntb.pdev->dev);
	phys_addr_t first;
	u64 off;

	if (!dom || !(dom->type & __IOMMU_DOMAIN_PAGING))
		return -EINVAL;
	first = iommu_iova_to_phys(dom, addr);
	if (!first)
		return -EINVAL;
	for (off = PAGE_SIZE; off < len; off += PAGE_SIZE) {
		if (iommu_iova_to_phys(dom, addr + off) != first + off)
			break;
		cond_resched();
	}
	*phys = first;
	*run = min(off, len);
	return 0;
}
