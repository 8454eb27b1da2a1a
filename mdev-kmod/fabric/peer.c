// SPDX-License-Identifier: GPL-2.0
/*
 * Peers: liveness, protocol negotiation, window binding, link up and down.
 *
 * Every DL_HEARTBEAT_MS a timer bumps this host's heartbeat (hostinfo.c),
 * and the liveness work reads every other host's slot. A peer comes up
 * when its info is valid and says UP, its heartbeat has moved since we
 * started watching this incarnation, a window showing its RAM has been
 * found, the two hosts share a protocol version (the highest common one
 * is used) and each has bound a ring pair to the other's incarnation. It
 * goes down when its heartbeat stands still for DL_PEER_TIMEOUT_MS, when
 * its slot stops saying UP, becomes malformed or no longer binds us (or a
 * check before a store into its inbox found so), or when its incarnation
 * changes; then it is watched afresh and its window found again. Going
 * down fails every request in flight to the peer at once and stops every
 * store into its inbox.
 *
 * A binding lasts as long as the peer's incarnation: it is dropped, and
 * our bound[] entry for the peer cleared, only when the peer left, is
 * attaching anew or shows another incarnation, or when we leave. So the
 * indices of a ring pair never restart under a peer that still uses them.
 *
 * The work also drains the receive rings, because a doorbell can be lost
 * (ivshmem drops doorbells rung before the receiver's interrupts are set
 * up, and so may a real adapter that resets).
 */
#include <linux/device.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/lockdep.h>
#include <linux/minmax.h>
#include <linux/overflow.h>
#include <linux/printk.h>
#include <linux/string.h>

#include "internal.h"

/**
 * dl_peer_init() - set up the state kept about one host.
 * @fab: the fabric being created.
 * @peer: the peer's entry in @fab.
 * @id: its host id.
 */
void dl_peer_init(struct dl_fabric *fab, struct dl_peer *peer, u32 id)
{
	peer->fab = fab;
	peer->id = id;
	spin_lock_init(&peer->link_lock);
	spin_lock_init(&peer->tx.lock);
	atomic_set(&peer->reqs_out, 0);
	init_waitqueue_head(&peer->req_wq);
}

static void dl_peer_set_up(struct dl_fabric *fab, struct dl_peer *peer,
			   u16 proto)
{
	unsigned long flags;

	lockdep_assert_held(&fab->lock);

	spin_lock_irqsave(&peer->link_lock, flags);
	peer->proto = proto;
	peer->epoch = lower_32_bits(peer->incarnation);
	peer->up = true;
	spin_unlock_irqrestore(&peer->link_lock, flags);

	dl_peer_count(peer, DL_CNT_LINK_UPS);
	dev_info(fab->dev, "peer %u (%s) up: protocol %u, window %s\n",
		 peer->id, peer->name, proto, dev_name(peer->win->dev));
	dl_fabric_notify(fab, DL_FABRIC_EV_PEER_UP, peer->id, proto);

	/* It may have sent requests already; they wait in the ring. */
	queue_work(fab->wq, &fab->rx_work);
}

/* Stop storing into the peer's inbox and unmap our entry there. */
static void dl_peer_close_out(struct dl_fabric *fab, struct dl_peer *peer)
{
	void *map = dl_ring_close(fab, peer);

	if (map)
		memunmap(map);
}

static void dl_peer_set_down(struct dl_fabric *fab, struct dl_peer *peer,
			     const char *why)
{
	unsigned long flags;

	lockdep_assert_held(&fab->lock);

	if (!peer->up)
		return;
	spin_lock_irqsave(&peer->link_lock, flags);
	peer->up = false;
	peer->proto = 0;
	spin_unlock_irqrestore(&peer->link_lock, flags);
	/* A peer that stopped beating may be rebooting: not one more store. */
	dl_peer_close_out(fab, peer);

	/*
	 * Only after the link reads down: a request submitted from now on
	 * sees it down and fails by itself; one submitted before is in the
	 * xarray and is failed here. See dl_fabric_req_submit().
	 */
	dl_req_fail(fab, peer->id, -ENOTCONN);

	dl_peer_count(peer, DL_CNT_LINK_DOWNS);
	dev_info(fab->dev, "peer %u (%s) down: %s\n", peer->id, peer->name,
		 why);
	dl_fabric_notify(fab, DL_FABRIC_EV_PEER_DOWN, peer->id, 0);
}

/* The window belongs to one incarnation of the peer; give it back. */
static void dl_peer_drop_window(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_fabric_window *win = peer->win;
	unsigned long flags;

	lockdep_assert_held(&fab->lock);

	if (!win)
		return;
	spin_lock_irqsave(&peer->link_lock, flags);
	peer->win = NULL;
	spin_unlock_irqrestore(&peer->link_lock, flags);
	fab->ops->window_put(fab, win);
}

/*
 * Drop the ring pair bound to the peer: no store of ours goes into its
 * inbox after this, and our slot says so, which is what a peer that
 * leaves waits for before it frees its inbox.
 */
static void dl_peer_unbind(struct dl_fabric *fab, struct dl_peer *peer)
{
	lockdep_assert_held(&fab->lock);

	if (!peer->bound)
		return;
	dl_peer_close_out(fab, peer);
	/* Where the adapter can, what that incarnation still sends stops. */
	if (fab->ops->peer_inbound)
		fab->ops->peer_inbound(fab, peer->id, false);
	dl_hostinfo_set_bound(fab, peer->id, 0);
	peer->bound = false;
}

/* Stop watching the current incarnation: down, and forget its window. */
static void dl_peer_forget(struct dl_fabric *fab, struct dl_peer *peer,
			   const char *why)
{
	dl_peer_set_down(fab, peer, why);
	dl_peer_drop_window(fab, peer);
	peer->tracking = false;
}

/* Start watching a new incarnation: nothing about it is trusted yet. */
static void dl_peer_track(struct dl_fabric *fab, struct dl_peer *peer,
			  const struct dl_peer_snap *snap)
{
	unsigned long flags;
	u64 off = 0;

	peer->tracking = true;
	peer->last_hb = snap->heartbeat;
	peer->hb_jiffies = jiffies;
	peer->hb_moved = false;
	peer->warned = false;
	peer->proto_min = snap->proto_min;
	peer->proto_max = snap->proto_max;
	peer->ident_ok = !dl_layout_xlate(&snap->layout, snap->ident_phys, 8,
					  &off);
	peer->ident.offset = off;
	peer->ident.token = snap->ident_token;
	peer->ident.min_size = snap->layout.ram_size;
	peer->inbox_phys = snap->inbox_phys;
	peer->inbound = snap->inbound;

	spin_lock_irqsave(&peer->link_lock, flags);
	peer->incarnation = snap->incarnation;
	peer->layout = snap->layout;
	spin_unlock_irqrestore(&peer->link_lock, flags);
}

/* Within one incarnation only the heartbeat and the name may change. */
static bool dl_peer_same_incarnation(struct dl_peer *peer,
				     const struct dl_peer_snap *snap)
{
	return snap->incarnation == peer->incarnation &&
	       snap->proto_min == peer->proto_min &&
	       snap->proto_max == peer->proto_max &&
	       snap->ident_token == peer->ident.token &&
	       snap->inbox_phys == peer->inbox_phys &&
	       snap->inbound == peer->inbound &&
	       !memcmp(&snap->layout, &peer->layout, sizeof(snap->layout));
}

static void dl_peer_set_name(struct dl_peer *peer, const char *name)
{
	unsigned long flags;

	if (!strcmp(peer->name, name))
		return;
	spin_lock_irqsave(&peer->link_lock, flags);
	strscpy(peer->name, name, sizeof(peer->name));
	spin_unlock_irqrestore(&peer->link_lock, flags);
}

/* Log once per incarnation why a live peer cannot come up. */
static __printf(3, 4) void dl_peer_warn_once(struct dl_fabric *fab,
					     struct dl_peer *peer,
					     const char *fmt, ...)
{
	struct va_format vaf;
	va_list args;

	if (peer->warned)
		return;
	peer->warned = true;

	va_start(args, fmt);
	vaf.fmt = fmt;
	vaf.va = &args;
	dev_warn_ratelimited(fab->dev, "peer %u: %pV", peer->id, &vaf);
	va_end(args);
}

/*
 * Map our entry in the peer's inbox through the window onto its RAM,
 * write-combining as stores across a bridge want; NULL if the inbox the
 * peer names is not in its RAM.
 */
static void *dl_peer_map_out(struct dl_fabric *fab, struct dl_peer *peer)
{
	u64 len = fab->geom.ring_stride;
	phys_addr_t at;
	u64 addr, off;

	if (check_add_overflow(peer->inbox_phys, (u64)fab->host_id * len,
			       &addr) ||
	    dl_layout_xlate(&peer->layout, addr, len, &off) ||
	    dl_peer_win_xlate(fab, peer->win, peer->layout.ram_size, off, len,
			      &at, NULL))
		return NULL;
	return memremap(at, len, MEMREMAP_WC);
}

static void dl_peer_try_up(struct dl_fabric *fab, struct dl_peer *peer,
			   const struct dl_peer_snap *snap)
{
	struct dl_fabric_window *win;
	unsigned long flags;
	void *map;
	u16 proto;

	lockdep_assert_held(&fab->lock);

	proto = min_t(u16, DL_PROTO_MAX, peer->proto_max);
	if (proto < max_t(u16, DL_PROTO_MIN, peer->proto_min)) {
		dl_peer_warn_once(fab, peer,
				  "speaks protocol %u..%u, this host %u..%u: no common version\n",
				  peer->proto_min, peer->proto_max,
				  DL_PROTO_MIN, DL_PROTO_MAX);
		return;
	}
	if (!peer->ident_ok) {
		dl_peer_warn_once(fab, peer,
				  "its ident page is outside its RAM layout\n");
		return;
	}
	if (!peer->win) {
		win = fab->ops->window_find(fab, &peer->ident);
		if (!win) {
			dl_peer_warn_once(fab, peer,
					  "no memory window shows its RAM (yet)\n");
			return;
		}
		spin_lock_irqsave(&peer->link_lock, flags);
		peer->win = win;
		spin_unlock_irqrestore(&peer->link_lock, flags);
	}
	if (!peer->bound) {
		if (fab->ops->peer_inbound)
			fab->ops->peer_inbound(fab, peer->id, true);
		dl_ring_bind(fab, peer);
		peer->bound = true;
		peer->bound_inc = peer->incarnation;
		dl_hostinfo_set_bound(fab, peer->id, peer->incarnation);
	}
	/* It stores into our inbox only once bound: wait for that too. */
	if (snap->bound_me != fab->incarnation)
		return;
	map = dl_peer_map_out(fab, peer);
	if (!map) {
		dl_peer_warn_once(fab, peer,
				  "its inbox at %#llx is outside its RAM or the window\n",
				  peer->inbox_phys);
		return;
	}
	dl_ring_open(fab, peer, map, peer->incarnation);
	dl_peer_set_up(fab, peer, proto);
}

static void dl_peer_scan(struct dl_fabric *fab, struct dl_peer *peer)
{
	struct dl_peer_snap snap;
	int ret;

	lockdep_assert_held(&fab->lock);

	ret = dl_hostinfo_read(fab, peer->id, &snap);
	/* Log when it turns malformed, not at every scan while it stays so. */
	if (ret == -EINVAL && !peer->info_bad)
		dev_warn_ratelimited(fab->dev, "peer %u: malformed host info\n",
				     peer->id);
	peer->info_bad = ret == -EINVAL;
	if (ret || snap.state != DL_HOST_UP) {
		if (peer->tracking)
			dl_peer_forget(fab, peer,
				       ret ? "host info invalid" :
				       snap.state == DL_HOST_ABSENT ? "left" :
				       "re-attaching");
		/* Its incarnation is over: it takes no more messages. */
		if (!ret)
			dl_peer_unbind(fab, peer);
		return;
	}

	peer->known = true;
	dl_peer_set_name(peer, snap.name);
	if (peer->tracking && !dl_peer_same_incarnation(peer, &snap))
		dl_peer_forget(fab, peer,
			       snap.incarnation != peer->incarnation ?
			       "restarted" : "host info changed");
	if (peer->bound && snap.incarnation != peer->bound_inc)
		dl_peer_unbind(fab, peer);
	if (!peer->tracking) {
		dl_peer_track(fab, peer, &snap);
		return;		/* up only once the heartbeat moves */
	}

	if (snap.heartbeat != peer->last_hb) {
		peer->last_hb = snap.heartbeat;
		peer->hb_jiffies = jiffies;
		peer->hb_moved = true;
	} else if (time_after(jiffies, peer->hb_jiffies +
			      msecs_to_jiffies(DL_PEER_TIMEOUT_MS))) {
		dl_peer_set_down(fab, peer, "heartbeat timeout");
		peer->hb_moved = false;	/* it must move again first */
		return;
	}

	if (peer->up && snap.bound_me != fab->incarnation) {
		dl_peer_set_down(fab, peer, "it no longer takes our messages");
		return;
	}
	/*
	 * A check before a store found its slot not vouching, though it
	 * does again now (it was changing, or it is hostile): down, and up
	 * at the next scan with the ring open again, rather than a link
	 * that reads up while every send fails.
	 */
	if (peer->up && !dl_ring_is_open(peer)) {
		dl_peer_set_down(fab, peer, "its slot stopped vouching for its inbox");
		return;
	}
	if (!peer->up && peer->hb_moved)
		dl_peer_try_up(fab, peer, &snap);
}

/**
 * dl_peer_live_work() - the liveness work: scan the peers, drain.
 * @work: &dl_fabric.live_work.
 */
void dl_peer_live_work(struct work_struct *work)
{
	struct dl_fabric *fab = container_of(to_delayed_work(work),
					     struct dl_fabric, live_work);
	u32 id;

	dl_hostinfo_refresh(fab);

	mutex_lock(&fab->lock);
	for (id = 0; id < fab->geom.max_hosts && !fab->stopping; id++)
		if (id != fab->host_id)
			dl_peer_scan(fab, &fab->peers[id]);
	mutex_unlock(&fab->lock);

	/* In case a doorbell was lost. */
	queue_work(fab->wq, &fab->rx_work);
	queue_delayed_work(fab->wq, &fab->live_work,
			   msecs_to_jiffies(DL_HEARTBEAT_MS));
}

/**
 * dl_peers_down_all() - take every peer down, drop every binding and give
 *	back the windows.
 * @fab: the fabric, stopping; the liveness work must be stopped.
 */
void dl_peers_down_all(struct dl_fabric *fab)
{
	u32 id;

	mutex_lock(&fab->lock);
	for (id = 0; id < fab->geom.max_hosts; id++) {
		if (id == fab->host_id)
			continue;
		dl_peer_forget(fab, &fab->peers[id],
			       "fabric adapter going away");
		dl_peer_unbind(fab, &fab->peers[id]);
	}
	mutex_unlock(&fab->lock);
}

/**
 * dl_fabric_window_lost() - a backend's window is going away.
 * @fab: the fabric.
 * @win: the window, claimed through &dl_fabric_backend_ops.window_find.
 *
 * Takes the peer it shows down; it comes up again when another window
 * shows it. Returns after @win has been given back with window_put.
 */
void dl_fabric_window_lost(struct dl_fabric *fab, struct dl_fabric_window *win)
{
	u32 id;

	mutex_lock(&fab->lock);
	for (id = 0; id < fab->geom.max_hosts; id++) {
		struct dl_peer *peer = &fab->peers[id];

		if (id == fab->host_id || peer->win != win)
			continue;
		dl_peer_set_down(fab, peer, "memory window removed");
		dl_peer_drop_window(fab, peer);
	}
	mutex_unlock(&fab->lock);
}
EXPORT_SYMBOL_GPL(dl_fabric_window_lost);
