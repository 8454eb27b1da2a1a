// SPDX-License-Identifier: GPL-2.0
/*
 * DMA: mapping a borrower's memory for its device, in the device's own
 * IOMMU domain, through this host's window onto the borrower.
 *
 * Each run a borrower asks for is checked (page aligned, non-empty, no
 * wrap, inside the borrower's RAM as its window shows it, inside the
 * domain's aperture and clear of the group's reserved regions, no overlap
 * with what is mapped, the total no more than the borrower's RAM) and
 * mapped with iommu_map(). The mappings are kept in a maple tree by IOVA
 * range, so that an unmap removes exactly them (a run cut by a partial
 * unmap is unmapped whole and its remainders mapped again: an IOMMU may
 * have used large pages for it). A batch that fails is undone completely.
 */
#include <linux/iommu.h>
#include <linux/maple_tree.h>
#include <linux/slab.h>

#include "internal.h"

/**
 * dl_lent_dma_init() - no mappings yet.
 * @lent: the device.
 */
void dl_lent_dma_init(struct dl_lent *lent)
{
	mt_init(&lent->dma);
}

static bool dl_dma_in_resv(struct dl_lent *lent, u64 iova, u64 last)
{
	struct iommu_resv_region *r;

	list_for_each_entry(r, &lent->resv, list) {
		u64 rlast = r->start + r->length - 1;

		if (r->length && iova <= rlast && last >= r->start)
			return true;
	}
	return false;
}

/* Remove one mapping from the domain and the books; frees it. */
static void dl_dma_remove(struct dl_lent *lent, struct dl_lent_dma *m)
{
	size_t unmapped;

	mtree_erase(&lent->dma, m->iova);
	unmapped = iommu_unmap(lent->domain, m->iova, m->len);
	if (unmapped != m->len)
		dev_warn_ratelimited(&lent->pdev->dev,
				     "lender: unmapped %zu of %llu bytes at IOVA %#llx\n",
				     unmapped, m->len, m->iova);
	lent->dma_bytes -= m->len;
	lent->dma_count--;
	kfree(m);
}

/* Map and record one checked run. */
static int dl_dma_add(struct dl_lent *lent, u64 iova, u64 addr,
		      phys_addr_t phys, u64 len)
{
	struct dl_lent_dma *m;
	int ret;

	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	m->iova = iova;
	m->len = len;
	m->addr = addr;
	m->phys = phys;

	ret = mtree_insert_range(&lent->dma, iova, iova + len - 1, m,
				 GFP_KERNEL);
	if (ret)
		goto err_free;
	ret = iommu_map(lent->domain, iova, phys, len,
			IOMMU_READ | IOMMU_WRITE, GFP_KERNEL);
	if (ret)
		goto err_erase;
	lent->dma_bytes += len;
	lent->dma_count++;
	return 0;

err_erase:
	mtree_erase(&lent->dma, iova);
err_free:
	kfree(m);
	return ret;
}

/**
 * dl_lent_dma_map() - map a batch of runs for the holder.
 * @lent: the device; @lent->lock held, the requester checked as holder.
 * @fab: the fabric of the holder.
 * @peer: the holder.
 * @ranges: the runs, as received (little-endian).
 * @count: how many; checked against the message length by the caller.
 *
 * Return: 0 with every run mapped, or -errno with none of them mapped:
 * -EINVAL (alignment, wrap, empty), -ERANGE (not the borrower's RAM, or
 * outside the aperture or in a reserved region), -EEXIST (overlap),
 * -ENOSPC (more than the borrower's RAM in total), -ENOMEM, or what
 * iommu_map() said.
 */
int dl_lent_dma_map(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    const struct dl_dma_range *ranges, u32 count)
{
	struct iommu_domain_geometry *geo = &lent->domain->geometry;
	struct dl_fabric_peer_info info;
	u64 budget;
	u32 i, done = 0;
	int ret = 0;

	lockdep_assert_held(&lent->lock);

	ret = dl_fabric_peer_info(fab, peer, &info);
	if (ret)
		return ret;
	budget = info.ram_size;

	for (i = 0; i < count; i++) {
		u64 iova = le64_to_cpu(ranges[i].iova);
		u64 addr = le64_to_cpu(ranges[i].addr);
		u64 len = le64_to_cpu(ranges[i].len);
		phys_addr_t phys;

		if (!len || !PAGE_ALIGNED(iova) || !PAGE_ALIGNED(addr) ||
		    !PAGE_ALIGNED(len) || iova + len - 1 < iova ||
		    addr + len - 1 < addr) {
			dl_lent_reject(lent, DL_REJ_DMA_RANGE);
			ret = -EINVAL;
			goto err_undo;
		}
		if (iova < geo->aperture_start ||
		    iova + len - 1 > geo->aperture_end ||
		    dl_dma_in_resv(lent, iova, iova + len - 1)) {
			dl_lent_reject(lent, DL_REJ_DMA_APERTURE);
			ret = -ERANGE;
			goto err_undo;
		}
		if (lent->dma_bytes + len > budget ||
		    lent->dma_bytes + len < lent->dma_bytes) {
			dl_lent_reject(lent, DL_REJ_DMA_BUDGET);
			ret = -ENOSPC;
			goto err_undo;
		}
		ret = dl_fabric_peer_mw_xlate(fab, peer, addr, len, &phys);
		if (ret) {
			dl_lent_reject(lent, DL_REJ_DMA_WINDOW);
			goto err_undo;
		}
		ret = dl_dma_add(lent, iova, addr, phys, len);
		if (ret == -EEXIST) {
			dl_lent_reject(lent, DL_REJ_DMA_OVERLAP);
			goto err_undo;
		}
		if (ret) {
			dl_lent_reject(lent, DL_REJ_DMA_FAILED);
			goto err_undo;
		}
		done++;
	}
	atomic64_add(count, &lent->cnt[DL_LCNT_DMA_MAPS]);
	return 0;

err_undo:
	pci_info_ratelimited(lent->pdev,
			     "lender: DMA map from host %u refused at run %u of %u: %d\n",
			     peer, i, count, ret);
	/* Runs of one batch do not overlap, so each IOVA names its run. */
	while (done--) {
		u64 iova = le64_to_cpu(ranges[done].iova);
		struct dl_lent_dma *m = mtree_load(&lent->dma, iova);

		if (m && m->iova == iova)
			dl_dma_remove(lent, m);
	}
	return ret;
}

/**
 * dl_lent_dma_unmap() - remove the mappings in an IOVA range.
 * @lent: the device; @lent->lock held, the requester checked as holder.
 * @iova: start, page aligned.
 * @len: bytes, page aligned, nonzero, no wrap.
 *
 * Mappings that lie partly in the range lose that part only.
 *
 * Return: 0, or -ENOMEM if a remainder could not be mapped again (it is
 * then unmapped: the device faults there instead of reaching memory).
 */
int dl_lent_dma_unmap(struct dl_lent *lent, u64 iova, u64 len)
{
	unsigned long idx = iova, last = iova + len - 1;
	struct dl_lent_dma *m;
	int ret = 0;

	lockdep_assert_held(&lent->lock);

	while ((m = mt_find(&lent->dma, &idx, last))) {
		u64 m_iova = m->iova, m_len = m->len, m_addr = m->addr;
		phys_addr_t m_phys = m->phys;
		u64 m_last = m_iova + m_len - 1;
		int err;

		dl_dma_remove(lent, m);
		if (m_iova < iova) {
			err = dl_dma_add(lent, m_iova, m_addr, m_phys,
					 iova - m_iova);
			if (err)
				ret = err;
		}
		if (m_last > last) {
			u64 skip = last + 1 - m_iova;

			err = dl_dma_add(lent, last + 1, m_addr + skip,
					 m_phys + skip, m_last - last);
			if (err)
				ret = err;
		}
		if (m_last >= last)
			break;
		idx = m_last + 1;
	}
	return ret;
}

/**
 * dl_lent_dma_unmap_all() - remove every mapping of the device.
 * @lent: the device; @lent->lock held.
 */
void dl_lent_dma_unmap_all(struct dl_lent *lent)
{
	unsigned long idx = 0;
	struct dl_lent_dma *m;

	lockdep_assert_held(&lent->lock);

	while ((m = mt_find(&lent->dma, &idx, ULONG_MAX)))
		dl_dma_remove(lent, m);
	WARN_ON(lent->dma_bytes || lent->dma_count);
	mtree_destroy(&lent->dma);
}

/**
 * dl_lent_fault_handler() - the IOMMU blocked a DMA of a lent device.
 * @domain: the device's domain.
 * @dev: the device.
 * @iova: the address used.
 * @flags: IOMMU_FAULT_READ or IOMMU_FAULT_WRITE.
 * @token: the &struct dl_lent.
 *
 * Called by IOMMU drivers that report faults through
 * report_iommu_fault() (AMD, ARM SMMU; not intel-iommu in 6.12, which only
 * logs DMAR faults), possibly in interrupt context: the borrower is told
 * from a work item.
 *
 * Return: -EOPNOTSUPP, so that the IOMMU driver logs the fault as well.
 */
int dl_lent_fault_handler(struct iommu_domain *domain, struct device *dev,
			  unsigned long iova, int flags, void *token)
{
	struct dl_lent *lent = token;

	dl_lent_count(lent, DL_LCNT_FAULTS);
	WRITE_ONCE(lent->fault_iova, iova);
	WRITE_ONCE(lent->fault_flags, (flags & IOMMU_FAULT_WRITE) ? 1 : 0);
	schedule_work(&lent->fault_work);
	return -EOPNOTSUPP;
}

/**
 * dl_lent_fault_work() - tell the holder about the last IOMMU fault.
 * @work: &dl_lent.fault_work.
 */
void dl_lent_fault_work(struct work_struct *work)
{
	struct dl_lent *lent = container_of(work, struct dl_lent, fault_work);
	struct dl_dev_fault f = {
		.dev_id = cpu_to_le32(lent->dev_id),
		.flags = cpu_to_le32(READ_ONCE(lent->fault_flags)),
		.iova = cpu_to_le64(READ_ONCE(lent->fault_iova)),
	};
	struct dl_fabric *fab;
	u32 peer;

	mutex_lock(&lent->lock);
	fab = lent->fab;
	peer = lent->borrower;
	if (fab && peer != DL_NO_HOST && !lent->dead)
		dl_fabric_send(fab, peer, DL_MSG_DEV_FAULT, &f, sizeof(f));
	mutex_unlock(&lent->lock);
	dev_warn_ratelimited(&lent->pdev->dev, "lender: IOMMU blocked a DMA %s IOVA %#llx\n",
			     f.flags ? "write to" : "read from",
			     le64_to_cpu(f.iova));
}
