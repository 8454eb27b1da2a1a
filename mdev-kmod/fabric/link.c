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
 * dl_fabric_peer_mw_xlate() - where a peer's RAM appears in our window.
 * @fab: the fabric.
 * @peer: the peer's host id.
 * @peer_addr: a physical address in the peer, as the peer gave it.
 * @len: bytes from @peer_addr; the range must lie in one RAM part.
 * @mw_addr: set to the CPU physical address of @peer_addr in the window.
 *
 * Any context.
 *
 * Return: 0, -EINVAL, -ENOTCONN if the peer is not up, -ERANGE if the
 * range is not the peer's RAM or not inside the window.
 */
int dl_fabric_peer_mw_xlate(struct dl_fabric *fab, u32 peer, u64 peer_addr,
			    u64 len, phys_addr_t *mw_addr)
{
	struct dl_peer *p = dl_fabric_peer(fab, peer);
	unsigned long flags;
	u64 off;
	int ret;

	if (!p)
		return -EINVAL;
	spin_lock_irqsave(&p->link_lock, flags);
	if (!p->up) {
		ret = -ENOTCONN;
		goto out_unlock;
	}
	ret = dl_layout_xlate(&p->layout, peer_addr, len, &off);
	if (ret)
		goto out_unlock;
	if (off + len > p->win->size) {
		ret = -ERANGE;
		goto out_unlock;
	}
	*mw_addr = p->win->phys_addr + off;
out_unlock:
	spin_unlock_irqrestore(&p->link_lock, flags);
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_mw_xlate);
