// SPDX-License-Identifier: GPL-2.0
/*
 * The link snapshot of each peer, and everything that reads it: senders,
 * the receive engine, the client registry and the clients themselves
 * (link state, peer info, memory windows).
 *
 * The liveness work (peer.c) writes the snapshot under fab->lock and
 * peer->link_lock; everything here reads it under peer->link_lock alone,
 * so it may be called in any context, and calls nothing above it.
 */
#include <linux/export.h>
#include <linux/spinlock.h>
#include <linux/string.h>

#include "internal.h"

/**
 * dl_peer_link() - read the link state of a peer.
 * @peer: the peer.
 * @proto: if not NULL, set to the negotiated protocol version.
 * @epoch: if not NULL, set to the low 32 bits of the peer's incarnation.
 *
 * Any context.
 *
 * Return: whether the link is up.
 */
bool dl_peer_link(struct dl_peer *peer, u16 *proto, u32 *epoch)
{
	unsigned long flags;
	bool up;

	spin_lock_irqsave(&peer->link_lock, flags);
	up = peer->up;
	if (proto)
		*proto = peer->proto;
	if (epoch)
		*epoch = peer->epoch;
	spin_unlock_irqrestore(&peer->link_lock, flags);
	return up;
}

/**
 * dl_fabric_link_is_up() - whether a peer is up.
 * @fab: the fabric.
 * @peer: the peer's host id.
 *
 * Any context.
 *
 * Return: true if messages can be sent to @peer.
 */
bool dl_fabric_link_is_up(struct dl_fabric *fab, u32 peer)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);

	return p && dl_peer_link(p, NULL, NULL);
}
EXPORT_SYMBOL_GPL(dl_fabric_link_is_up);

/**
 * dl_fabric_peer_info() - what a peer published about itself.
 * @fab: the fabric.
 * @peer: the peer's host id.
 * @info: filled in; valid for the incarnation last seen.
 *
 * Any context.
 *
 * Return: 0 or -EINVAL for a bad peer.
 */
int dl_fabric_peer_info(struct dl_fabric *fab, u32 peer,
			struct dl_fabric_peer_info *info)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);
	unsigned long flags;

	if (!p)
		return -EINVAL;
	spin_lock_irqsave(&p->link_lock, flags);
	info->up = p->up;
	info->proto = p->proto;
	info->incarnation = p->incarnation;
	info->ram_size = p->layout.ram_size;
	strscpy(info->name, p->name, sizeof(info->name));
	spin_unlock_irqrestore(&p->link_lock, flags);
	return 0;
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_info);

/**
 * dl_fabric_peer_mw() - the memory window onto an up peer's RAM.
 * @fab: the fabric.
 * @peer: the peer's host id.
 * @mw: filled in.
 *
 * Any context. The window may be used until the peer goes down.
 *
 * Return: 0, -EINVAL for a bad peer, -ENOTCONN if it is not up.
 */
int dl_fabric_peer_mw(struct dl_fabric *fab, u32 peer,
		      struct dl_fabric_mw *mw)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);
	unsigned long flags;
	int ret = 0;

	if (!p)
		return -EINVAL;
	spin_lock_irqsave(&p->link_lock, flags);
	if (p->up) {
		mw->dev = p->win->dev;
		mw->phys_addr = p->win->phys_addr;
		mw->size = p->win->size;
	} else {
		ret = -ENOTCONN;
	}
	spin_unlock_irqrestore(&p->link_lock, flags);
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_mw);

/**
 * dl_peer_win_xlate() - where offset @off of a peer's window is, for us.
 * @fab: the fabric.
 * @win: the window onto the peer.
 * @size: bytes the peer said its window has (its layout's size).
 * @off: offset in the window.
 * @len: bytes from @off.
 * @at: set to the CPU physical address of @off in @win.
 * @run: if not NULL, set to the bytes from @at that are contiguous (at
 *	least a page, at most @len); if NULL, all @len bytes must be.
 *
 * A window is one linear range of our physical address space, unless the
 * backend says otherwise (window_xlate: the emulated NTB port, whose
 * peers translate where real adapters' hardware would). May sleep then.
 *
 * Return: 0, -ERANGE if the range is outside the window or (@run NULL)
 * not contiguous, or what the backend said.
 */
int dl_peer_win_xlate(struct dl_fabric *fab, struct dl_fabric_window *win,
		      u64 size, u64 off, u64 len, phys_addr_t *at, u64 *run)
{
	u64 got;
	int ret;

	if (!dl_win_check(min_t(u64, size, win->size), off, len))
		return -ERANGE;
	if (!fab->ops->window_xlate) {
		*at = win->phys_addr + off;
		if (run)
			*run = len;
		return 0;
	}
	ret = fab->ops->window_xlate(fab, win, off, len, at, &got);
	if (ret)
		return ret;
	if (!got || got > len || (!run && got != len))
		return -ERANGE;
	if (run)
		*run = got;
	return 0;
}

/**
 * dl_fabric_peer_mw_xlate() - where a peer's RAM appears in our window.
 * @fab: the fabric.
 * @peer: the peer's host id.
 * @peer_addr: an address the peer handed out for its RAM (physical, or an
 *	offset of its bounded window for us: its host info says which).
 * @len: bytes from @peer_addr; the range must lie in one RAM part.
 * @mw_addr: set to the CPU physical address of @peer_addr in the window.
 * @run: if not NULL, set to how many bytes from @mw_addr are contiguous
 *	(at least a page, at most @len: call again for the rest); if NULL,
 *	all @len bytes must be, else -ERANGE.
 *
 * Any context on a backend whose windows are linear ranges (all but the
 * emulated NTB port's, where a translation may ask the peer: process
 * context).
 *
 * Return: 0, -EINVAL, -ENOTCONN if the peer is not up, -ERANGE if the
 * range is not the peer's RAM or not inside the window.
 */
int dl_fabric_peer_mw_xlate(struct dl_fabric *fab, u32 peer, u64 peer_addr,
			    u64 len, phys_addr_t *mw_addr, u64 *run)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);
	struct dl_fabric_window *win;
	unsigned long flags;
	u64 off, size;
	int ret;

	if (!p)
		return -EINVAL;
	spin_lock_irqsave(&p->link_lock, flags);
	if (!p->up) {
		ret = -ENOTCONN;
		goto out_unlock;
	}
	ret = dl_layout_xlate(&p->layout, peer_addr, len, &off);
	win = p->win;
	size = p->layout.ram_size;
out_unlock:
	spin_unlock_irqrestore(&p->link_lock, flags);
	if (ret)
		return ret;
	/* The backend's window objects outlive the fabric's use of them. */
	return dl_peer_win_xlate(fab, win, size, off, len, mw_addr, run);
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_mw_xlate);
