// SPDX-License-Identifier: GPL-2.0
/*
 * DMA from one lent device to a BAR of another that the same holder holds
 * (%DL_MSG_P2P_DMA): peer-to-peer between two devices of one guest.
 *
 * The guest gives device X the address where it put a BAR of device Y.
 * X's domain maps that IOVA onto Y's BAR here (IOMMU_MMIO), as bar_dma.c
 * maps a device's own BARs, and under the same rules; Y's MSI-X table and
 * PBA pages are left out.
 *
 * What must never happen is X reaching Y's BAR once Y is reset for, or
 * given to, someone else. So every take-back of Y revokes every mapping
 * onto Y first, before Y's reset (dl_lent_p2p_revoke_target(), from
 * dl_lent_reclaim()). That walk runs under Y's lock and must not take
 * another device's: two take-backs of X and Y at once, each mapped onto
 * the other, would deadlock. Hence two leaf locks per device:
 *  - lent->p2p_lock (mutex, inside any lent->lock): the device's P2P
 *    mappings; never held while taking another lock but holder_lock;
 *  - lent->holder_lock (spinlock, innermost): the holder as published for
 *    other devices' maps (dl_lent_holder_publish()).
 * A map checks Y's published holder and adds its mapping under X's
 * p2p_lock; a take-back of Y unpublishes Y's holder and then visits every
 * X under its p2p_lock: a map racing with it is either seen by that walk
 * or sees Y held by nobody. X's domain is only ever replaced once X has
 * no mapping at all, P2P ones included (dl_lent_unmap_all()), so while a
 * P2P mapping exists the walk finds it in X's current domain.
 */
#include <linux/iommu.h>
#include <linux/slab.h>

#include "internal.h"

/**
 * dl_lent_holder_publish() - show the device's holder to other devices'
 *	P2P maps: at acquire, once the holder is set.
 * @lent: the device; @lent->lock held.
 */
void dl_lent_holder_publish(struct dl_lent *lent)
{
	lockdep_assert_held(&lent->lock);

	spin_lock(&lent->holder_lock);
	lent->pub_fab = lent->fab;
	lent->pub_peer = lent->borrower;
	lent->pub_inc = lent->borrower_inc;
	spin_unlock(&lent->holder_lock);
}

/* Whether @y is published as held by @x's holder. */
static bool dl_lent_same_holder(struct dl_lent *x, struct dl_lent *y)
{
	bool same;

	spin_lock(&y->holder_lock);
	same = y->pub_fab && y->pub_fab == x->fab &&
	       y->pub_peer == x->borrower && y->pub_inc == x->borrower_inc;
	spin_unlock(&y->holder_lock);
	return same;
}

/* Take mapping @i of @x away; @x->p2p_lock held. */
static void dl_p2p_remove(struct dl_lent *x, unsigned int i)
{
	struct dl_lent_p2p *m = &x->p2p[i];
	const struct dl_bar_dma_span *p;
	unsigned int k;

	lockdep_assert_held(&x->p2p_lock);

	for (k = 0; k < m->npieces; k++) {
		p = &m->pieces[k];
		iommu_unmap(x->domain, m->iova + p->start, p->end - p->start);
	}
	dl_lent_put(m->target);
	x->p2p[i] = x->p2p[x->np2p - 1];
	WRITE_ONCE(x->np2p, x->np2p - 1);
	dl_lent_count(x, DL_LCNT_P2P_UNMAPS);
}

/* The mapping of @y's BAR @bar in @x, or -1; @x->p2p_lock held. */
static int dl_p2p_find(struct dl_lent *x, struct dl_lent *y, unsigned int bar)
{
	unsigned int i;

	for (i = 0; i < x->np2p; i++)
		if (x->p2p[i].target == y && x->p2p[i].bar == bar)
			return i;
	return -1;
}

/*
 * Map @y's BAR @bar, which @x does not map, at @iova in @x's domain, if
 * @y is held by @x's holder; @x->lock and @x->p2p_lock held.
 */
static int dl_p2p_map(struct dl_lent *x, struct dl_fabric *fab, u32 peer,
		      struct dl_lent *y, unsigned int bar, u64 iova)
{
	struct iommu_domain_geometry *geo = &x->domain->geometry;
	phys_addr_t start = pci_resource_start(y->pdev, bar);
	struct dl_bar_dma_span skip[DL_BAR_DMA_MAX_SKIPS];
	struct dl_fabric_peer_info info;
	struct dl_lent_p2p *m;
	struct dl_lent_bar *b;
	unsigned int k;
	u64 last;
	int ret;

	ret = dl_lent_mem_bar(y, bar, &b);
	if (ret)
		return ret;
	/* The rest of a small BAR's page may be another device's. */
	if (!PAGE_ALIGNED(b->size))
		return -EOPNOTSUPP;
	ret = dl_bar_dma_check(start, b->size, iova);
	if (ret)
		return ret;
	if (x->np2p >= DL_P2P_MAX)
		return -ENOSPC;
	last = iova + b->size - 1;
	if (x->dma_detached)
		return -EIO;
	if (iova < geo->aperture_start || last > geo->aperture_end ||
	    dl_dma_in_resv(x, iova, last) || dl_dma_busy(&x->dma, iova, last) ||
	    dl_lent_bar_dma_busy(x, iova, last) ||
	    dl_lent_p2p_busy_locked(x, iova, last))
		return -EINVAL;
	/* Checked here, under the lock the take-back of @y walks under. */
	if (!dl_lent_same_holder(x, y))
		return -EINVAL;
	ret = dl_fabric_peer_info(fab, peer, &info);
	if (ret)
		return ret;
	if (!dl_dma_tables_room(x, iova, last, info.ram_size))
		return -ENOSPC;
	ret = dl_dma_tables_note(x, iova, last);
	if (ret)
		return ret;
	m = &x->p2p[x->np2p];
	m->npieces = dl_bar_dma_pieces(b->size, skip,
				       dl_lent_msix_skips(y, bar, skip),
				       m->pieces);
	for (k = 0; k < m->npieces; k++) {
		ret = dl_dma_iommu_map(x, iova + m->pieces[k].start,
				       start + m->pieces[k].start,
				       m->pieces[k].end - m->pieces[k].start,
				       IOMMU_READ | IOMMU_WRITE | IOMMU_MMIO);
		if (ret)
			goto err_unmap;
	}
	kref_get(&y->ref);
	m->target = y;
	m->bar = bar;
	m->iova = iova;
	m->len = b->size;
	WRITE_ONCE(x->np2p, x->np2p + 1);
	dl_lent_count(x, DL_LCNT_P2P_MAPS);
	return 0;

err_unmap:
	while (k--)
		dl_dma_iommu_unmap(x, iova + m->pieces[k].start,
				   m->pieces[k].end - m->pieces[k].start);
	return ret;
}

/**
 * dl_lent_p2p_dma() - map a BAR of another device of the same holder for
 *	the device's DMA where the holder's guest put it, or unmap it
 *	(%DL_MSG_P2P_DMA).
 * @x: the device whose DMA is to reach the BAR; @x->lock held; @peer on
 *	@fab is its holder.
 * @fab: the holder's fabric.
 * @peer: the holder.
 * @target_id: the device whose BAR it is, from the holder: anything.
 * @bar: the BAR, from the holder: anything.
 * @map: map at @iova, else unmap.
 * @iova: from the holder: anything.
 *
 * A map where the BAR is mapped already changes nothing; a map elsewhere
 * moves it (and if the new place is refused, it is mapped nowhere); an
 * unmap of a BAR not mapped changes nothing.
 *
 * Return: 0; -EINVAL (no such device, the device itself, held by another
 * holder, no such BAR, an @iova not page aligned, outside the aperture,
 * reserved or overlapping a mapping); -EOPNOTSUPP (an I/O BAR, a BAR not
 * page aligned); -ENOSPC (too many such mappings, or the page-table
 * budget); -EIO (the device is in no domain of ours); or what
 * iommu_map() said.
 */
int dl_lent_p2p_dma(struct dl_lent *x, struct dl_fabric *fab, u32 peer,
		    u32 target_id, unsigned int bar, bool map, u64 iova)
{
	struct dl_lent *y;
	int i, ret = 0;

	lockdep_assert_held(&x->lock);

	if (target_id == x->dev_id)
		return -EINVAL;	/* its own BARs: DL_MSG_BAR_DMA */
	y = dl_lent_get(target_id);
	if (!y)
		return map ? -EINVAL : 0;
	mutex_lock(&x->p2p_lock);
	i = dl_p2p_find(x, y, bar);
	if (map && i >= 0 && x->p2p[i].iova == iova)
		goto out_unlock;
	if (i >= 0)
		dl_p2p_remove(x, i);
	if (map)
		ret = dl_p2p_map(x, fab, peer, y, bar, iova);
out_unlock:
	mutex_unlock(&x->p2p_lock);
	if (map && ret)
		pci_info_ratelimited(x->pdev,
				     "lender: BAR%u of device %u not mapped for this device's DMA at IOVA %#llx for host %u: %d\n",
				     bar, target_id, iova, peer, ret);
	dl_lent_put(y);
	return ret;
}

/**
 * dl_lent_p2p_unmap_all() - take every P2P mapping of the device away.
 * @x: the device; @x->lock held.
 */
void dl_lent_p2p_unmap_all(struct dl_lent *x)
{
	lockdep_assert_held(&x->lock);

	mutex_lock(&x->p2p_lock);
	while (x->np2p)
		dl_p2p_remove(x, x->np2p - 1);
	mutex_unlock(&x->p2p_lock);
}

/**
 * dl_lent_p2p_revoke_target() - the device is being taken back: no other
 *	device may reach its BARs any more. Unpublishes its holder, then
 *	takes every mapping onto it out of every other device's domain.
 * @y: the device; its device lock and @y->lock held, before its reset.
 */
void dl_lent_p2p_revoke_target(struct dl_lent *y)
{
	unsigned long idx = 0;
	struct dl_lent *x;
	unsigned int i;

	lockdep_assert_held(&y->lock);

	spin_lock(&y->holder_lock);
	y->pub_fab = NULL;
	spin_unlock(&y->holder_lock);

	while ((x = dl_lent_next(&idx))) {
		if (x != y) {
			mutex_lock(&x->p2p_lock);
			for (i = x->np2p; i--;) {
				if (x->p2p[i].target != y)
					continue;
				dl_p2p_remove(x, i);
				dl_lent_count(y, DL_LCNT_P2P_REVOKES);
			}
			mutex_unlock(&x->p2p_lock);
		}
		dl_lent_put(x);
	}
}
