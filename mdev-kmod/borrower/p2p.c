// SPDX-License-Identifier: GPL-2.0
/*
 * One device's DMA to a BAR of another device of the same VM: tell the
 * lender where the guest put that BAR (%DL_MSG_P2P_DMA; docs/p2p.md).
 *
 * A guest driver may hand device X the bus address of a BAR of device Y
 * (an NVMe's read into another device's memory). In the guest that is
 * where the guest put Y's BAR; X's lender maps it, in X's IOMMU domain,
 * onto Y's BAR (lender/p2p.c): with Y on the same lender, the BAR itself
 * (case 2 of docs/p2p.md); with Y on another, that lender is first asked
 * to show Y's BAR to X's lender through the fabric (%DL_MSG_P2P_EXPORT),
 * and X's lender maps its window onto it (case 3, lender/p2p_remote.c).
 * Only devices of one VM: mdevs opened with the same KVM, or without one
 * by the same process.
 *
 * Each mdev shows the others what they need (&struct dl_vdev_p2p: its VM,
 * its lender and device, whether its DMA may be mapped, where its BARs
 * are) under the borrower's p2p_lock, after every write to its command
 * register or a BAR, and this host then brings the lenders to the wanted
 * mappings for every pair that involves it, one message per BAR that
 * changed. An mdev's lock is held only for its own part: p2p_lock is
 * taken inside it, and no other mdev's lock is taken, so two mdevs that
 * change at once wait for each other only on p2p_lock. A message about
 * another mdev's device is sent while that mdev is shown, and it stops
 * being shown (dl_p2p_close()) under p2p_lock before it is released.
 *
 * A lender drops a device's P2P mappings with all of its mappings
 * (DL_DMA_UNMAP_F_ALL: bus mastering off or starting over, a reset, a
 * take-back; dl_p2p_forget()), and every mapping onto a device it takes
 * back: this host forgets those without a word. A refusal leaves the DMA
 * faulting as before, and the same place is not asked for again. An
 * export is never taken back from here: it lasts until Y goes back to its
 * lender, which then has X's lender drop its mappings onto Y.
 *
 * The same notion of a VM keeps the functions of a lent IOMMU group in one
 * VM (dl_p2p_group_join()): their lender maps the guest RAM of one of
 * them for the DMA of all (lender/group.c), so a function opened in
 * another VM would reach the first VM's memory.
 */
#include <linux/pci.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>

#include "internal.h"

/* Ask @x's lender to map @y's BAR @bar at @iova for @x, or to unmap it. */
static int dl_p2p_send(struct dl_vdev *x, struct dl_vdev *y, unsigned int bar,
		       bool map, u64 iova)
{
	struct dl_p2p_dma req = {
		.dev_id = cpu_to_le32(x->p2p.dev_id),
		.target_id = cpu_to_le32(y->p2p.dev_id),
		.bar = bar,
		.flags = map ? DL_P2P_DMA_F_MAP : 0,
		.target_host = cpu_to_le32(y->p2p.host),
		.iova = cpu_to_le64(map ? iova : 0),
	};

	return dl_session_request(x, DL_MSG_P2P_DMA, &req, sizeof(req), NULL,
				  0);
}

/*
 * Ask @y's lender to show @y's BAR @bar to @x's lender, which is another
 * (case 3): that lender asks it where before it maps. A replay is free.
 */
static int dl_p2p_export(struct dl_vdev *x, struct dl_vdev *y,
			 unsigned int bar)
{
	struct dl_p2p_export req = {
		.dev_id = cpu_to_le32(y->p2p.dev_id),
		.bar = bar,
		.to_host = cpu_to_le32(x->p2p.host),
	};

	return dl_session_request(y, DL_MSG_P2P_EXPORT, &req, sizeof(req),
				  NULL, 0);
}

/* Map @y's BAR @bar at @iova for @x: through @y's lender first if another. */
static int dl_p2p_map_send(struct dl_vdev *x, struct dl_vdev *y,
			   unsigned int bar, u64 iova)
{
	int ret;

	if (x->p2p.host != y->p2p.host) {
		ret = dl_p2p_export(x, y, bar);
		if (ret)
			return ret;
	}
	return dl_p2p_send(x, y, bar, true, iova);
}

/* The mapping of @y's BAR @bar for @x, or NULL; p2p_lock held. */
static struct dl_p2p_map *dl_p2p_find(struct dl_borrower *b, struct dl_vdev *x,
				      struct dl_vdev *y, unsigned int bar)
{
	struct dl_p2p_map *m;

	list_for_each_entry(m, &b->p2p_maps, node)
		if (m->x == x && m->y == y && m->bar == bar)
			return m;
	return NULL;
}

/* Where @y's BAR @bar is to be mapped for @x; 0: nowhere. */
static u64 dl_p2p_wanted(struct dl_vdev *x, struct dl_vdev *y,
			 unsigned int bar)
{
	if (x == y || !x->p2p.shown || !y->p2p.shown || !x->p2p.master ||
	    x->p2p.vm != y->p2p.vm)
		return 0;
	return y->p2p.bar[bar];
}

/* Bring @x's lender to the wanted mappings of @y's BARs; p2p_lock held. */
static void dl_p2p_pair(struct dl_borrower *b, struct dl_vdev *x,
			struct dl_vdev *y)
{
	struct dl_p2p_map *m;
	unsigned int bar;
	u64 want;
	int ret;

	lockdep_assert_held(&b->p2p_lock);

	for (bar = 0; bar < DL_NUM_BARS; bar++) {
		want = dl_p2p_wanted(x, y, bar);
		m = dl_p2p_find(b, x, y, bar);
		if (!want) {
			if (!m)
				continue;
			if (!m->refused && x->p2p.shown) {
				ret = dl_p2p_send(x, y, bar, false, 0);
				if (ret)
					dev_dbg_ratelimited(dl_vdev_dev(x),
							    "P2P: unmap of BAR%u of device %u: %d\n",
							    bar, y->p2p.dev_id, ret);
			}
			list_del(&m->node);
			kfree(m);
			continue;
		}
		if (m && m->iova == want)
			continue;	/* mapped there, or refused there */
		if (!m) {
			m = kzalloc(sizeof(*m), GFP_KERNEL);
			if (!m)
				continue;
			m->x = x;
			m->y = y;
			m->bar = bar;
			list_add(&m->node, &b->p2p_maps);
		}
		m->iova = want;
		ret = dl_p2p_map_send(x, y, bar, want);
		m->refused = ret;
		if (ret) {
			WRITE_ONCE(b->p2p_refused, b->p2p_refused + 1);
			dev_info_ratelimited(dl_vdev_dev(x),
					     "BAR%u of remote device %u at %#llx: the lender does not map it for this device's DMA (%d); DMA there faults\n",
					     bar, y->p2p.dev_id, want, ret);
		} else {
			WRITE_ONCE(b->p2p_sent, b->p2p_sent + 1);
		}
	}
}

/* What @v shows, from its config space and state; @v->lock held. */
static void dl_p2p_snapshot(struct dl_vdev *v, struct dl_vdev_p2p *s)
{
	u16 cmd = dl_config_command(v);
	unsigned int bar;
	u64 addr;

	s->vm = v->vdev.kvm ? (const void *)v->vdev.kvm : (const void *)v->p2p.mm;
	s->host = v->sess.host;
	s->dev_id = v->sess.dev_id;
	s->master = (cmd & PCI_COMMAND_MASTER) && v->dma.on &&
		    READ_ONCE(v->sess.state) == DL_VDEV_BORROWED;
	for (bar = 0; bar < DL_NUM_BARS; bar++) {
		addr = (cmd & PCI_COMMAND_MEMORY) ? dl_config_bar_addr(v, bar) : 0;
		s->bar[bar] = PAGE_ALIGNED(addr) ? addr : 0;
	}
}

/**
 * dl_p2p_sync() - show the other mdevs of the VM what changed of this one
 *	and bring the lenders' mappings between them to it
 *	(&dl_config_ops.bars_changed, with the device's own BAR DMA).
 * @v: the mdev; caller holds v->lock.
 */
void dl_p2p_sync(struct dl_vdev *v)
{
	struct dl_borrower *b = v->b;
	struct dl_vdev_p2p now;
	struct dl_vdev *u;

	lockdep_assert_held(&v->lock);

	if (!v->open || READ_ONCE(v->sess.state) != DL_VDEV_BORROWED)
		return;
	dl_p2p_snapshot(v, &now);
	mutex_lock(&b->p2p_lock);
	if (!v->p2p.shown) {
		list_add(&v->p2p.node, &b->p2p_vdevs);
		v->p2p.shown = true;
	}
	v->p2p.vm = now.vm;
	v->p2p.host = now.host;
	v->p2p.dev_id = now.dev_id;
	v->p2p.master = now.master;
	memcpy(v->p2p.bar, now.bar, sizeof(now.bar));
	list_for_each_entry(u, &b->p2p_vdevs, p2p.node) {
		if (u == v)
			continue;
		dl_p2p_pair(b, v, u);
		dl_p2p_pair(b, u, v);
	}
	mutex_unlock(&b->p2p_lock);
}

/* Forget the mappings for @x's DMA, or (@y) of @y's BARs; p2p_lock held. */
static void dl_p2p_drop(struct dl_borrower *b, struct dl_vdev *x,
			struct dl_vdev *y)
{
	struct dl_p2p_map *m, *tmp;

	list_for_each_entry_safe(m, tmp, &b->p2p_maps, node) {
		if (m->x != x && m->y != y)
			continue;
		list_del(&m->node);
		kfree(m);
	}
}

/**
 * dl_p2p_forget() - the lender dropped every mapping of the device, other
 *	devices' BARs too: nothing of them is left to undo.
 * @v: the mdev; caller holds v->lock.
 */
void dl_p2p_forget(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	mutex_lock(&v->b->p2p_lock);
	dl_p2p_drop(v->b, v, NULL);
	v->p2p.master = false;
	mutex_unlock(&v->b->p2p_lock);
}

/**
 * dl_p2p_open() - note the opener, whose other mdevs are of the same VM
 *	when the VMM gives VFIO no KVM (a userspace driver).
 * @v: the mdev, being opened; caller holds v->lock.
 */
void dl_p2p_open(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	v->p2p.mm = current->mm;
	if (v->p2p.mm)
		mmgrab(v->p2p.mm);
}

/**
 * dl_p2p_group_join() - at open, for a device lent with the other
 *	functions of its IOMMU group: refuse it if one of them is open in
 *	another VM.
 * @v: the mdev, being opened and its device borrowed; caller holds
 *	v->lock.
 *
 * Return: 0, or -EBUSY.
 */
int dl_p2p_group_join(struct dl_vdev *v)
{
	struct dl_borrower *b = v->b;
	u32 group = READ_ONCE(v->remote->info.group);
	const void *vm;
	struct dl_vdev *u;

	lockdep_assert_held(&v->lock);

	if (!group)
		return 0;
	vm = v->vdev.kvm ? (const void *)v->vdev.kvm : (const void *)current->mm;
	mutex_lock(&b->p2p_lock);
	list_for_each_entry(u, &b->p2p_groups, p2p.gnode) {
		if (u->p2p.ghost == v->sess.host && u->p2p.group == group &&
		    u->p2p.gvm != vm) {
			mutex_unlock(&b->p2p_lock);
			dev_err(dl_vdev_dev(v), "remote device %u:%u shares its IOMMU group with device %u:%u, open in another VM; give the functions of a group to one VM\n",
				v->sess.host, v->sess.dev_id, u->sess.host,
				u->sess.dev_id);
			return -EBUSY;
		}
	}
	v->p2p.group = group;
	v->p2p.ghost = v->sess.host;
	v->p2p.gvm = vm;
	list_add(&v->p2p.gnode, &b->p2p_groups);
	mutex_unlock(&b->p2p_lock);
	return 0;
}

/**
 * dl_p2p_group_leave() - undo dl_p2p_group_join().
 * @v: the mdev, closing; caller holds v->lock.
 */
void dl_p2p_group_leave(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	if (!v->p2p.group)
		return;
	mutex_lock(&v->b->p2p_lock);
	list_del(&v->p2p.gnode);
	mutex_unlock(&v->b->p2p_lock);
	v->p2p.group = 0;
}

/**
 * dl_p2p_close() - the mdev closes: the others stop seeing it, and this
 *	host forgets the mappings for its DMA and of its BARs. Its lender
 *	drops the former when the device goes back, and revokes the latter
 *	before it resets the device.
 * @v: the mdev, closing, before its device is released; caller holds
 *	v->lock.
 */
void dl_p2p_close(struct dl_vdev *v)
{
	struct dl_borrower *b = v->b;

	lockdep_assert_held(&v->lock);

	mutex_lock(&b->p2p_lock);
	dl_p2p_drop(b, v, v);
	if (v->p2p.shown) {
		list_del(&v->p2p.node);
		v->p2p.shown = false;
	}
	mutex_unlock(&b->p2p_lock);
	if (v->p2p.mm)
		mmdrop(v->p2p.mm);
	v->p2p.mm = NULL;
}
