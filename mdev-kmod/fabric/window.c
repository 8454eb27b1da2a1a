// SPDX-License-Identifier: GPL-2.0
/*
 * Inbound windows: how peers reach this host's RAM, and the addresses
 * this host hands them for it (docs/ntb.md, docs/fabric-protocol.md).
 *
 * Two kinds (struct dl_host_info.inbound):
 *  - the RAM layout (the emulated fabric: each peer's window is a fixed
 *    view of the whole RAM file; an NTB adapter without a translating
 *    IOMMU, whose window shows bus addresses one to one): the address a
 *    peer is given is the physical address, which it turns into a window
 *    offset with the published layout. Nothing is allocated.
 *  - a bounded window per peer (an NTB memory window behind the adapter's
 *    IOMMU): each peer's window has a fixed number of bytes, this host
 *    hands out its offsets from an allocator of its own per peer, and the
 *    backend makes each offset reach the page it was handed out for. The
 *    published layout is then the identity of [0, window size), so a peer
 *    checks an offset exactly as it checks a physical address.
 *
 * The start of every peer's bounded window is the same for all of them:
 * this host's ident page and its inbox (dl_inbound_reserve()), so that
 * one address in the host info slot serves every peer.
 *
 * Window space is a budget: a map that finds no room fails with -ENOSPC
 * and is counted. An offset goes back to the allocator only through
 * dl_fabric_inbound_unmap(), which its user calls only once no peer
 * mapping may reach it any more (docs/model.md, the DMA ownership rule).
 */
#include <linux/bitmap.h>
#include <linux/device.h>
#include <linux/io.h>
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/seq_file.h>
#include <linux/sizes.h>
#include <linux/slab.h>

#include "internal.h"

/**
 * dl_win_init() - an empty allocator of window pages.
 * @w: the allocator.
 * @size: bytes of the window, page aligned.
 * @reserved: bytes at its start that are never handed out.
 *
 * Return: 0, -EINVAL, or -ENOMEM.
 */
int dl_win_init(struct dl_win *w, u64 size, u64 reserved)
{
	memset(w, 0, sizeof(*w));
	if (!size || !PAGE_ALIGNED(size) || !PAGE_ALIGNED(reserved) ||
	    reserved > size)
		return -EINVAL;
	w->pages = size >> PAGE_SHIFT;
	w->map = kvcalloc(BITS_TO_LONGS(w->pages), sizeof(unsigned long),
			  GFP_KERNEL);
	if (!w->map)
		return -ENOMEM;
	w->reserved = reserved >> PAGE_SHIFT;
	bitmap_set(w->map, 0, w->reserved);
	w->used = w->reserved;
	w->next = w->reserved;
	return 0;
}

/**
 * dl_win_destroy() - free an allocator.
 * @w: the allocator, or one dl_win_init() failed on.
 */
void dl_win_destroy(struct dl_win *w)
{
	kvfree(w->map);
	w->map = NULL;
	w->pages = 0;
}

/**
 * dl_win_alloc() - hand out @len bytes of window.
 * @w: the allocator.
 * @len: bytes, page aligned, nonzero.
 * @off: the offset handed out.
 *
 * Next fit: consecutive calls get consecutive offsets while there is
 * room after the last one, so the runs a borrower sends coalesce.
 *
 * Return: 0, -EINVAL, or -ENOSPC when no run of @len bytes is free.
 */
int dl_win_alloc(struct dl_win *w, u64 len, u64 *off)
{
	unsigned long n, start;

	if (!len || !PAGE_ALIGNED(len) || !w->map ||
	    (len >> PAGE_SHIFT) > w->pages)
		return -EINVAL;
	n = len >> PAGE_SHIFT;
	start = bitmap_find_next_zero_area(w->map, w->pages, w->next, n, 0);
	if (start >= w->pages)
		start = bitmap_find_next_zero_area(w->map, w->pages,
						   w->reserved, n, 0);
	if (start >= w->pages) {
		w->refused++;
		return -ENOSPC;
	}
	bitmap_set(w->map, start, n);
	w->used += n;
	w->next = start + n;
	*off = (u64)start << PAGE_SHIFT;
	return 0;
}

/**
 * dl_win_free() - take back what dl_win_alloc() handed out.
 * @w: the allocator.
 * @off: offset, page aligned.
 * @len: bytes, page aligned; a part of one or more handed-out runs.
 *
 * Return: 0, or -EINVAL (and nothing freed) if any page of the range is
 * reserved, outside the window or not handed out.
 */
int dl_win_free(struct dl_win *w, u64 off, u64 len)
{
	unsigned long first, n;
	u64 end;

	if (!len || !PAGE_ALIGNED(off) || !PAGE_ALIGNED(len) || !w->map ||
	    check_add_overflow(off, len, &end) ||
	    (end >> PAGE_SHIFT) > w->pages ||
	    (off >> PAGE_SHIFT) < w->reserved)
		return -EINVAL;
	first = off >> PAGE_SHIFT;
	n = len >> PAGE_SHIFT;
	if (find_next_zero_bit(w->map, first + n, first) < first + n)
		return -EINVAL;
	bitmap_clear(w->map, first, n);
	w->used -= n;
	return 0;
}

/**
 * dl_win_check() - whether [@off, @off + @len) lies in a window of @size.
 * @size: bytes of the window.
 * @off: offset.
 * @len: bytes, at least one.
 *
 * Return: true if so.
 */
bool dl_win_check(u64 size, u64 off, u64 len)
{
	u64 end;

	return len && !check_add_overflow(off, len, &end) && end <= size;
}

/**
 * dl_layout_xlate() - translate a host's address to a window offset.
 * @l: the host's RAM layout, as it published it.
 * @addr: an address the host handed out (physical, or with a bounded
 *	window, an offset: its layout is then the window's identity).
 * @len: bytes from @addr, at least one; the range must not cross the split.
 * @offset: the offset of @addr in the window onto the host's RAM.
 *
 * Return: 0, -EINVAL for an empty range, -ERANGE if the range is not RAM
 * of the layout.
 */
int dl_layout_xlate(const struct dl_ram_layout *l, u64 addr, u64 len,
		    u64 *offset)
{
	u64 off, end;

	if (!len)
		return -EINVAL;
	if (addr < l->ram_low_size) {
		if (check_add_overflow(addr, len, &end) ||
		    end > l->ram_low_size)
			return -ERANGE;
		off = addr;
	} else if (addr >= l->ram_high_base) {
		off = addr - l->ram_high_base + l->ram_low_size;
	} else {
		return -ERANGE;	/* the hole between low and high RAM */
	}
	if (check_add_overflow(off, len, &end) || end > l->ram_size)
		return -ERANGE;
	*offset = off;
	return 0;
}

/* Whether this host hands out offsets of bounded windows. */
static bool dl_inbound_windowed(struct dl_fabric *fab)
{
	return fab->inbound_size && fab->ops->inbound_map;
}

/**
 * dl_inbound_init() - how peers will reach this host's RAM.
 * @fab: the fabric being created, its RAM layout computed and
 *	@fab->inbound_size set from &dl_fabric_config.inbound_size.
 *
 * With a bounded window, the layout published becomes the window's
 * identity: offsets (a windowed backend) or bus addresses (one without
 * translation) below its size.
 *
 * Return: 0 or -EINVAL.
 */
int dl_inbound_init(struct dl_fabric *fab)
{
	u64 size = fab->inbound_size, end;

	mutex_init(&fab->inbound_lock);
	if (!size)
		return 0;
	if (!PAGE_ALIGNED(size)) {
		dev_err(fab->dev, "inbound window of %llu bytes: not whole pages\n",
			size);
		return -EINVAL;
	}
	/* Where RAM ends in the physical address space. */
	end = fab->layout.ram_size > fab->layout.ram_low_size ?
	      fab->layout.ram_high_base + fab->layout.ram_size -
	      fab->layout.ram_low_size : fab->layout.ram_low_size;
	if (!fab->ops->inbound_map && end > size) {
		dev_err(fab->dev, "inbound window of %llu bytes shows bus addresses one to one, but this host's RAM ends at %#llx: it needs a translating IOMMU, or a window that large\n",
			size, end);
		return -ENOSPC;
	}
	fab->layout.ram_size = size;
	fab->layout.ram_low_size = size;
	fab->layout.ram_high_base = size;
	return 0;
}

/*
 * Map this host's ident page and inbox at the start of @peer's window:
 * the same offsets for every peer, published once in the slot.
 */
static int dl_inbound_reserve_one(struct dl_fabric *fab, u32 peer)
{
	int ret;

	ret = fab->ops->inbound_map(fab, peer, 0,
				    page_to_phys(fab->ident_page), PAGE_SIZE);
	if (ret)
		return ret;
	ret = fab->ops->inbound_map(fab, peer, PAGE_SIZE,
				    virt_to_phys(fab->inbox),
				    PAGE_ALIGN(fab->geom.inbox_size));
	if (ret)
		fab->ops->inbound_unmap(fab, peer, 0, PAGE_SIZE);
	return ret;
}

/**
 * dl_inbound_reserve() - set up each peer's window, with this host's ident
 *	page and inbox at its start; or check that the RAM layout reaches them.
 * @fab: the fabric being created, its ident page and inbox allocated.
 * @ident: set to the address of the ident page peers are given.
 * @inbox: set to the address of the inbox peers are given.
 *
 * Return: 0 or -errno (the windows are then torn down again).
 */
int dl_inbound_reserve(struct dl_fabric *fab, u64 *ident, u64 *inbox)
{
	u64 rsvd = PAGE_SIZE + PAGE_ALIGN((u64)fab->geom.inbox_size);
	u64 off;
	u32 id;
	int ret;

	if (!dl_inbound_windowed(fab)) {
		/* The addresses handed out are physical (DL_INBOUND_RAM). */
		*ident = page_to_phys(fab->ident_page);
		*inbox = virt_to_phys(fab->inbox);
		if (dl_layout_xlate(&fab->layout, *ident, PAGE_SIZE, &off) ||
		    dl_layout_xlate(&fab->layout, *inbox, fab->geom.inbox_size,
				    &off)) {
			dev_err(fab->dev, "ident page %#llx or inbox %#llx is outside what peers' windows show (%llu bytes)\n",
				*ident, *inbox, fab->layout.ram_size);
			return -ENODEV;
		}
		return 0;
	}
	if (rsvd >= fab->inbound_size) {
		dev_err(fab->dev, "inbound window of %llu bytes: the inbox alone takes %llu\n",
			fab->inbound_size, rsvd);
		return -ENOSPC;
	}
	for (id = 0; id < fab->geom.max_hosts; id++) {
		if (id == fab->host_id)
			continue;
		ret = dl_win_init(&fab->inbound[id], fab->inbound_size, rsvd);
		if (ret)
			goto err_undo;
		ret = dl_inbound_reserve_one(fab, id);
		if (ret) {
			dl_win_destroy(&fab->inbound[id]);
			goto err_undo;
		}
	}
	*ident = 0;
	*inbox = PAGE_SIZE;
	return 0;

err_undo:
	dev_err(fab->dev, "cannot show the inbox in host %u's window: %d\n",
		id, ret);
	while (id--) {
		if (id == fab->host_id)
			continue;
		fab->ops->inbound_unmap(fab, id, 0, rsvd);
		dl_win_destroy(&fab->inbound[id]);
	}
	return ret;
}

/**
 * dl_inbound_release() - tear down what dl_inbound_reserve() set up.
 * @fab: the fabric; no peer writes into the inbox any more, or it is
 *	leaked, and then its window stays too.
 */
void dl_inbound_release(struct dl_fabric *fab)
{
	u64 rsvd = PAGE_SIZE + PAGE_ALIGN((u64)fab->geom.inbox_size);
	u32 id;

	if (!dl_inbound_windowed(fab))
		return;
	for (id = 0; id < fab->geom.max_hosts; id++) {
		if (id == fab->host_id || !fab->inbound[id].map)
			continue;
		if (fab->inbound[id].used > fab->inbound[id].reserved)
			dev_warn(fab->dev, "%lu pages of host %u's window still handed out\n",
				 fab->inbound[id].used - fab->inbound[id].reserved,
				 id);
		if (!fab->inbox_leaked)
			fab->ops->inbound_unmap(fab, id, 0, rsvd);
		dl_win_destroy(&fab->inbound[id]);
	}
}

/**
 * dl_fabric_inbound_map() - let @peer reach this host's physical range.
 * @fab: the fabric.
 * @peer: the peer that will reach it (NTB windows are per peer).
 * @phys: physical address, page aligned.
 * @len: bytes, page aligned; physically contiguous.
 * @addr: set to the address to give @peer for it (a DMA run's @addr).
 *
 * On a fabric whose peers see all of this host's RAM (DL_INBOUND_RAM)
 * nothing is allocated: the address is @phys, checked against what the
 * peers' windows show. Otherwise window space is handed out from @peer's
 * window and the backend translates it to @phys. Every successful call
 * is matched by one dl_fabric_inbound_unmap() of the same @addr range
 * (or of parts of it), once no mapping of @peer may reach it any more.
 * Process context, may sleep.
 *
 * Return: 0; -EINVAL (alignment, peer); -ERANGE (not reachable: outside
 * what the windows show); -ENOSPC (the window is full, counted); or
 * what the backend said.
 */
int dl_fabric_inbound_map(struct dl_fabric *fab, u32 peer, phys_addr_t phys,
			  u64 len, u64 *addr)
{
	struct dl_win *w;
	u64 off;
	int ret;

	if (!len || !PAGE_ALIGNED(phys) || !PAGE_ALIGNED(len) ||
	    !dl_fabric_is_peer(fab, peer))
		return -EINVAL;
	if (!dl_inbound_windowed(fab)) {
		ret = dl_layout_xlate(&fab->layout, phys, len, &off);
		if (ret) {
			atomic64_inc(&fab->inbound_refused);
			return ret;
		}
		*addr = phys;
		return 0;
	}
	w = &fab->inbound[peer];
	mutex_lock(&fab->inbound_lock);
	ret = dl_win_alloc(w, len, &off);
	mutex_unlock(&fab->inbound_lock);
	if (ret) {
		atomic64_inc(&fab->inbound_refused);
		dev_dbg_ratelimited(fab->dev, "host %u's window is full: %lu of %lu pages handed out\n",
				    peer, w->used, w->pages);
		return ret;
	}
	ret = fab->ops->inbound_map(fab, peer, off, phys, len);
	if (ret) {
		mutex_lock(&fab->inbound_lock);
		dl_win_free(w, off, len);
		mutex_unlock(&fab->inbound_lock);
		return ret;
	}
	/* What a window onto all RAM by physical address could not show. */
	if (phys >= SZ_4G)
		atomic64_add(len, &fab->inbound_high_bytes);
	*addr = off;
	return 0;
}
EXPORT_SYMBOL_GPL(dl_fabric_inbound_map);

/**
 * dl_fabric_inbound_unmap() - give back what dl_fabric_inbound_map() gave.
 * @fab: the fabric.
 * @peer: the peer it was given to.
 * @addr: the address it gave, or an address inside it, page aligned.
 * @len: bytes, page aligned.
 *
 * Only once no mapping of @peer may reach the pages any more: the offset
 * may be handed out again at once. Process context, may sleep.
 */
void dl_fabric_inbound_unmap(struct dl_fabric *fab, u32 peer, u64 addr,
			     u64 len)
{
	struct dl_win *w;
	int ret;

	if (!dl_inbound_windowed(fab) || !dl_fabric_is_peer(fab, peer))
		return;
	w = &fab->inbound[peer];
	/* The translation goes first: the offset is free only after. */
	fab->ops->inbound_unmap(fab, peer, addr, len);
	mutex_lock(&fab->inbound_lock);
	ret = dl_win_free(w, addr, len);
	mutex_unlock(&fab->inbound_lock);
	WARN_ONCE(ret, "devlend: unmap of window %#llx+%#llx for host %u, not handed out\n",
		  addr, len, peer);
}
EXPORT_SYMBOL_GPL(dl_fabric_inbound_unmap);

/**
 * dl_fabric_inbound_windowed() - whether this host hands out window space.
 * @fab: the fabric.
 *
 * Return: true if dl_fabric_inbound_map() allocates (its addresses must
 * then be kept to be given back); false if they are physical addresses.
 */
bool dl_fabric_inbound_windowed(struct dl_fabric *fab)
{
	return dl_inbound_windowed(fab);
}
EXPORT_SYMBOL_GPL(dl_fabric_inbound_windowed);

/**
 * dl_fabric_bar_expose() - show a memory BAR of a device of this host to
 *	@peer, so that the peer maps it instead of relaying each access.
 * @fab: the fabric.
 * @peer: the peer that will reach it.
 * @pdev: the device, its BAR mapped and claimed by the caller.
 * @bar: the BAR, a memory BAR.
 * @skip: page-aligned spans of the BAR that must not be reachable (the
 *	MSI-X table and PBA), or NULL.
 * @nskip: entries of @skip.
 * @token: set to what names the window for the peer (the answer to its
 *	%DL_MSG_BAR_WINDOW).
 * @len: set to the bytes of the BAR, from its start, the window shows.
 *
 * Every success is matched by one dl_fabric_bar_revoke() before the
 * device goes to anyone else. Process context, may sleep.
 *
 * Return: 0; -EINVAL (peer); -EOPNOTSUPP (the backend cannot show this
 * BAR: no such window, or it cannot keep @skip out); -ENOSPC (no window
 * room); or what the backend said.
 */
int dl_fabric_bar_expose(struct dl_fabric *fab, u32 peer,
			 struct pci_dev *pdev, int bar,
			 const struct dl_fabric_span *skip, unsigned int nskip,
			 u64 *token, u64 *len)
{
	int ret;

	if (!dl_fabric_is_peer(fab, peer))
		return -EINVAL;
	if (!fab->ops->bar_expose)
		return -EOPNOTSUPP;
	ret = fab->ops->bar_expose(fab, peer, pdev, bar, skip, nskip, token,
				   len);
	if (!ret && (!*len || !PAGE_ALIGNED(*len))) {
		/* A backend bug: never hand the peer a partial page. */
		if (fab->ops->bar_revoke)
			fab->ops->bar_revoke(fab, peer, *token, *len);
		return -EIO;
	}
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_bar_expose);

/**
 * dl_fabric_bar_revoke() - undo dl_fabric_bar_expose().
 * @fab: the fabric.
 * @peer: the peer it was shown to.
 * @token: the window it was given.
 * @len: the bytes shown.
 *
 * Afterwards the peer's accesses reach nothing of this host where the
 * backend can stop them (NTB); the emulated fabric's windows are files
 * that stay shared (docs/lending.md). Process context, may sleep.
 */
void dl_fabric_bar_revoke(struct dl_fabric *fab, u32 peer, u64 token,
			  u64 len)
{
	if (dl_fabric_is_peer(fab, peer) && fab->ops->bar_revoke)
		fab->ops->bar_revoke(fab, peer, token, len);
}
EXPORT_SYMBOL_GPL(dl_fabric_bar_revoke);

/**
 * dl_fabric_peer_bar() - where a BAR @peer showed this host is.
 * @fab: the fabric.
 * @peer: the peer that showed it.
 * @token: the window it named (from the peer: anything).
 * @len: bytes wanted from its start, at least one.
 * @phys: set to the physical address on this host of its first byte:
 *	MMIO, to be mapped uncached.
 *
 * Return: 0, -EINVAL (peer, length), -EOPNOTSUPP (the backend cannot),
 * -ENOENT (no such window, or smaller than @len), or what the backend
 * said.
 */
int dl_fabric_peer_bar(struct dl_fabric *fab, u32 peer, u64 token, u64 len,
		       phys_addr_t *phys)
{
	if (!len || !dl_fabric_is_peer(fab, peer))
		return -EINVAL;
	if (!fab->ops->peer_bar)
		return -EOPNOTSUPP;
	return fab->ops->peer_bar(fab, peer, token, len, phys);
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_bar);

/**
 * dl_fabric_peer_bar_capable() - whether BARs @peer shows could be found.
 * @fab: the fabric.
 * @peer: the peer.
 *
 * So that a borrower asks a lender for BAR windows only where it could
 * use the answer. Process context, may sleep.
 *
 * Return: true if dl_fabric_peer_bar() may succeed.
 */
bool dl_fabric_peer_bar_capable(struct dl_fabric *fab, u32 peer)
{
	if (!dl_fabric_is_peer(fab, peer) || !fab->ops->peer_bar)
		return false;
	return !fab->ops->peer_bar_capable ||
	       fab->ops->peer_bar_capable(fab, peer);
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_bar_capable);

/**
 * dl_inbound_show() - the windows' use, for debugfs.
 * @fab: the fabric.
 * @s: where to.
 */
void dl_inbound_show(struct dl_fabric *fab, struct seq_file *s)
{
	u32 id;

	seq_printf(s, "inbound=%s\n",
		   dl_inbound_windowed(fab) ? "window" : "ram");
	seq_printf(s, "inbound_size=%llu\n", fab->layout.ram_size);
	seq_printf(s, "inbound_refused=%lld\n",
		   atomic64_read(&fab->inbound_refused));
	seq_printf(s, "inbound_high_bytes=%lld\n",
		   atomic64_read(&fab->inbound_high_bytes));
	if (!dl_inbound_windowed(fab))
		return;
	mutex_lock(&fab->inbound_lock);
	for (id = 0; id < fab->geom.max_hosts; id++) {
		const struct dl_win *w = &fab->inbound[id];

		if (id == fab->host_id || !w->map)
			continue;
		seq_printf(s, "inbound_host%u_pages=%lu used=%lu reserved=%lu refused=%llu\n",
			   id, w->pages, w->used, w->reserved, w->refused);
	}
	mutex_unlock(&fab->inbound_lock);
}
