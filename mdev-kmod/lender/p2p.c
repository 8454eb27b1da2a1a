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

/*
 * Bumped by every revocation of mappings onto another lender's devices,
 * before its walk (p2p_remote.c): a map that asked that lender before
 * sees it moved.
 */
atomic_t dl_p2p_revoke_gen = ATOMIC_INIT(0);

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
	if (m->target)
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

/**
 * dl_p2p_iova_claim() - check that a P2P mapping may go at [@iova, @last]
 *	of the device's domain, and count the page tables it may make.
 * @x: the device; @x->lock and @x->p2p_lock held.
 * @fab: the fabric of its holder.
 * @peer: its holder.
 * @y: the device whose BAR it is, checked to be held by @x's holder; or
 *	NULL, a device of another lender (checked by its lender).
 * @iova: the first IOVA, checked by dl_bar_dma_check().
 * @last: the last IOVA.
 *
 * Return: 0; -ENOSPC (too many such mappings, or the page-table budget);
 * -EIO (the device is in no domain of ours); -EINVAL (outside the
 * aperture, reserved, overlapping a mapping, or @y held by another
 * holder); or what dl_fabric_peer_info() or dl_dma_tables_note() said.
 */
static int dl_p2p_iova_claim(struct dl_lent *x, struct dl_fabric *fab,
			     u32 peer, struct dl_lent *y, u64 iova, u64 last)
{
	struct iommu_domain_geometry *geo = &x->domain->geometry;
	struct dl_fabric_peer_info info;
	int ret;

	lockdep_assert_held(&x->lock);
	lockdep_assert_held(&x->p2p_lock);

	if (x->np2p >= DL_P2P_MAX)
		return -ENOSPC;
	if (x->dma_detached)
		return -EIO;
	if (iova < geo->aperture_start || last > geo->aperture_end ||
	    dl_dma_in_resv(x, iova, last) || dl_dma_busy(&x->dma, iova, last) ||
	    dl_lent_bar_dma_busy(x, iova, last) ||
	    dl_lent_p2p_busy_locked(x, iova, last))
		return -EINVAL;
	/* Checked here, under the lock the take-back of @y walks under. */
	if (y && !dl_lent_same_holder(x, y))
		return -EINVAL;
	ret = dl_fabric_peer_info(fab, peer, &info);
	if (ret)
		return ret;
	if (!dl_dma_tables_room(x, iova, last, info.ram_size))
		return -ENOSPC;
	return dl_dma_tables_note(x, iova, last);
}

/*
 * Map @y's BAR @bar, which @x does not map, at @iova in @x's domain, if
 * @y is held by @x's holder; @x->lock and @x->p2p_lock held.
 */
static int dl_p2p_map(struct dl_lent *x, struct dl_fabric *fab, u32 peer,
		      struct dl_lent *y, unsigned int bar, u64 iova)
{
	phys_addr_t start = pci_resource_start(y->pdev, bar);
	struct dl_bar_dma_span skip[DL_BAR_DMA_MAX_SKIPS];
	struct dl_lent_p2p *m;
	struct dl_lent_bar *b;
	unsigned int k;
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
	ret = dl_p2p_iova_claim(x, fab, peer, y, iova, iova + b->size - 1);
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

/* Whether mapping @m of @x is onto BAR @bar of @rdev of @rhost. */
static bool dl_p2p_is_remote(const struct dl_lent_p2p *m, u32 rhost, u32 rdev,
			     unsigned int bar)
{
	return !m->target && m->rhost == rhost && m->rdev == rdev &&
	       m->bar == bar;
}

/**
 * dl_lent_p2p_map_remote() - map a BAR of a device of another lender,
 *	through this host's window onto it, at @iova for the device's DMA
 *	(case 3 of docs/p2p.md; p2p_remote.c asked that lender where).
 * @x: the device; @x->lock held, its holder checked by the caller.
 * @fab: the fabric of its holder and of the other lender.
 * @rhost: the other lender.
 * @rinc: its incarnation, read before it was asked.
 * @rdev: its device.
 * @bar: that device's BAR.
 * @iova: from the holder: anything.
 * @phys: where the window onto the BAR is on this host (MMIO).
 * @len: the bytes the window shows, page aligned.
 * @gen: dl_p2p_revoke_gen read before the other lender was asked: if a
 *	revocation came since, the answer may be stale.
 *
 * Under the same rules as dl_lent_p2p_dma(). A map where the BAR is
 * mapped already changes nothing; a map elsewhere moves it.
 *
 * Return: 0; -EAGAIN (a revocation came meanwhile); -EINVAL (@iova not
 * page aligned, outside the aperture, reserved or overlapping a mapping);
 * -ENOSPC (too many, or the page-table budget); -EIO (no domain of ours);
 * or what iommu_map() said.
 */
int dl_lent_p2p_map_remote(struct dl_lent *x, struct dl_fabric *fab,
			   u32 rhost, u64 rinc, u32 rdev, unsigned int bar,
			   u64 iova, phys_addr_t phys, u64 len, u32 gen)
{
	struct dl_lent_p2p *m;
	unsigned int i;
	int ret;

	lockdep_assert_held(&x->lock);

	if (!len || !PAGE_ALIGNED(len))
		return -EINVAL;
	ret = dl_bar_dma_check(phys, len, iova);
	if (ret)
		return ret;
	mutex_lock(&x->p2p_lock);
	for (i = 0; i < x->np2p; i++)
		if (dl_p2p_is_remote(&x->p2p[i], rhost, rdev, bar))
			break;
	if (i < x->np2p) {
		if (x->p2p[i].iova == iova && x->p2p[i].len == len &&
		    x->p2p[i].rinc == rinc)
			goto out_unlock;
		dl_p2p_remove(x, i);
	}
	/* Read under the lock that a revocation's walk takes after it. */
	ret = -EAGAIN;
	if (atomic_read(&dl_p2p_revoke_gen) != gen)
		goto out_unlock;
	ret = dl_p2p_iova_claim(x, fab, x->borrower, NULL, iova,
				iova + len - 1);
	if (ret)
		goto out_unlock;
	ret = dl_dma_iommu_map(x, iova, phys, len,
			       IOMMU_READ | IOMMU_WRITE | IOMMU_MMIO);
	if (ret)
		goto out_unlock;
	m = &x->p2p[x->np2p];
	memset(m, 0, sizeof(*m));
	m->rfab = fab;
	m->rhost = rhost;
	m->rinc = rinc;
	m->rdev = rdev;
	m->bar = bar;
	m->iova = iova;
	m->len = len;
	m->npieces = 1;
	m->pieces[0].start = 0;
	m->pieces[0].end = len;
	WRITE_ONCE(x->np2p, x->np2p + 1);
	dl_lent_count(x, DL_LCNT_P2P_MAPS);
out_unlock:
	mutex_unlock(&x->p2p_lock);
	return ret;
}

/**
 * dl_lent_p2p_unmap_remote() - unmap a BAR of a device of another lender
 *	from the device's DMA, if it is mapped.
 * @x: the device; @x->lock held.
 * @rhost: the other lender.
 * @rdev: its device.
 * @bar: that device's BAR.
 */
void dl_lent_p2p_unmap_remote(struct dl_lent *x, u32 rhost, u32 rdev,
			      unsigned int bar)
{
	unsigned int i;

	lockdep_assert_held(&x->lock);

	mutex_lock(&x->p2p_lock);
	for (i = x->np2p; i--;)
		if (dl_p2p_is_remote(&x->p2p[i], rhost, rdev, bar))
			dl_p2p_remove(x, i);
	mutex_unlock(&x->p2p_lock);
}

/**
 * dl_lent_p2p_drop_remote() - drop the device's mappings onto BARs of
 *	another lender: at that lender's word, or because it is gone.
 * @x: the device; no lock of it held (a leaf walk, from any context that
 *	may sleep).
 * @fab: the fabric of that lender.
 * @rhost: that lender.
 * @rdev: its device, or U32_MAX for all.
 * @gone_only: only those whose lender is down or restarted since.
 *
 * Return: how many it dropped.
 */
unsigned int dl_lent_p2p_drop_remote(struct dl_lent *x, struct dl_fabric *fab,
				     u32 rhost, u32 rdev, bool gone_only)
{
	struct dl_fabric_peer_info info;
	struct dl_lent_p2p *m;
	unsigned int i, n = 0;

	mutex_lock(&x->p2p_lock);
	for (i = x->np2p; i--;) {
		m = &x->p2p[i];
		if (m->target || (fab && m->rfab != fab) ||
		    (!gone_only && m->rhost != rhost) ||
		    (rdev != U32_MAX && m->rdev != rdev))
			continue;
		if (gone_only && !dl_fabric_peer_info(m->rfab, m->rhost, &info) &&
		    info.up && info.incarnation == m->rinc)
			continue;
		dl_p2p_remove(x, i);
		dl_lent_count(x, DL_LCNT_P2P_REMOTE_DROPS);
		n++;
	}
	mutex_unlock(&x->p2p_lock);
	return n;
}
