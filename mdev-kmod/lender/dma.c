// SPDX-License-Identifier: GPL-2.0
/*
 * DMA: mapping a borrower's memory for its device, in the device's own
 * IOMMU domain, through this host's window onto the borrower.
 *
 * Each run a borrower asks for is checked (page aligned, non-empty, no
 * wrap, inside the borrower's RAM as its window shows it, inside the
 * domain's aperture and clear of the group's reserved regions, no overlap
 * with what is mapped, no borrower page mapped twice, the total no more
 * than the borrower's RAM, the number of mappings within the caps below)
 * and mapped with iommu_map(). Each mapping is kept in two maple trees,
 * one by IOVA range and one by borrower-address range, so that an unmap
 * removes exactly it and an alias is found. A batch that fails is undone
 * completely.
 *
 * Partial unmaps are exact: only the IOVAs asked for leave the domain, and
 * the mapping is cut to match; the rest stays reachable throughout. That
 * needs every run mapped with the domain's smallest page: intel-iommu
 * (6.12) maps a 2 MiB/1 GiB aligned stretch with a superpage, and its
 * unmap of part of one takes the whole superpage away (and, from an
 * unaligned start, walks the superpage's target as if it were a page
 * table); AMD's v1 tables use every power of two and also unmap a large
 * page whole. So runs are mapped in pieces just smaller than the
 * domain's second page size (2 MiB - 4 KiB on intel), which iommu_map()
 * can only fill with small pages. Mapping the remainders before unmapping
 * is not possible (their IOVAs are still taken), and unmapping whole and
 * mapping the remainders again (what was done before) lets live memory
 * fault meanwhile. The price: an IOTLB entry per 4 KiB, about 1/512 of
 * the mapped bytes in leaf page tables, and an iommu_map() call per
 * piece (per page on AMD v1).
 *
 * Page tables outlive the mappings that made them: an exact unmap of a
 * page leaves its leaf table (and the tables above it) in the domain, so
 * a holder that maps and unmaps one page at IOVA k << 21 for k = 1, 2, ...
 * would grow this host's memory by a table a round, without ever holding
 * more than one mapping. So the regions of IOVA space each leaf table and
 * each table above it covers are counted, from the holder's maps, since
 * the domain was fresh; a map that would take more of them than the
 * holder's RAM needs (plus a margin) is refused (dl_dma_tables_room()).
 * And when every mapping goes at once (the holder clears bus mastering,
 * or the device is taken back), the domain is replaced by a fresh one
 * (dl_dma_fresh_domain()), which frees every table.
 */
#include <linux/iommu.h>
#include <linux/maple_tree.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>

#include "internal.h"

/*
 * Caps on the mappings (tracking entries) a borrower can make this host
 * hold, since each costs this host memory: the entry (32 bytes) and its
 * slots in the two maple trees, about 100 bytes in all, and page-table
 * pages of the domain, a few per mapping at worst (4 KiB runs spread far
 * apart each need their own leaf and middle tables). The byte budget alone
 * does not bound them: one page every 2 MiB, or one page at many IOVAs,
 * is little memory but many entries and tables.
 *
 * The borrower coalesces physically contiguous pages into one run, so a
 * guest backed by huge pages (THP, hugetlbfs) needs one mapping per 2 MiB
 * or more, and even a guest fragmented into single 4 KiB pages needs one
 * per page: 1 << 20 per device covers such a guest of 4 GiB (2 TiB of
 * 2 MiB runs), at about 100 MiB of entries at worst. A larger guest of
 * scattered 4 KiB pages is refused (QEMU asks for THP by default, so this
 * takes a host with THP off). A host may hold two devices at the full cap
 * (say a GPU and a NIC of one guest, whose RAM is mapped in each device's
 * domain), not more. Holes punched by partial unmaps count like any other
 * mapping.
 */
#define DL_LENT_MAX_MAPS		BIT(20)
#define DL_LENDER_HOST_MAX_MAPS		BIT(21)

/*
 * The page tables a holder may make the domain keep, derived from the caps
 * above: a guest maps its RAM at IOVA = guest-physical address, so it
 * needs a leaf table per 2 MiB of its RAM (with 4 KiB pages), and one
 * table above that per 1 GiB: that is, at most the borrower's RAM size
 * over the span of one table, and never more than the mappings the cap
 * allows. DL_DMA_TABLE_SLACK more of each covers the ends of memslots,
 * ROMs and holes (each piece of guest RAM may start and end inside a
 * region). At worst, for a borrower of R bytes, R/512 + 2 MiB of leaf
 * tables and R/2^18 + 2 MiB of the tables above them per device (tables
 * further up are fewer still): a bound, where the churn above had none.
 */
#define DL_DMA_TABLE_SLACK		512

/* The borrower's mappings on other devices are not counted yet. */
#define DL_DMA_NOT_COUNTED		U64_MAX

/**
 * dl_lent_dma_init() - no mappings yet.
 * @lent: the device.
 */
void dl_lent_dma_init(struct dl_lent *lent)
{
	mt_init(&lent->dma);
	mt_init(&lent->dma_addr);
	xa_init(&lent->dma_leaves);
	xa_init(&lent->dma_mids);
}

/**
 * dl_dma_in_resv() - whether IOVAs meet the group's reserved regions.
 * @lent: the device.
 * @iova: the first IOVA.
 * @last: the last IOVA.
 *
 * Return: true if any of [@iova, @last] is reserved.
 */
bool dl_dma_in_resv(struct dl_lent *lent, u64 iova, u64 last)
{
	struct iommu_resv_region *r;

	list_for_each_entry(r, &lent->resv, list) {
		u64 rlast = r->start + r->length - 1;

		if (r->length && iova <= rlast && last >= r->start)
			return true;
	}
	return false;
}

/**
 * dl_dma_busy() - does a mapping in @mt (either index) cover any of
 *	[@first, @last]?
 * @mt: &dl_lent.dma or &dl_lent.dma_addr.
 * @first: the first address.
 * @last: the last address.
 *
 * Return: true if one does.
 */
bool dl_dma_busy(struct maple_tree *mt, u64 first, u64 last)
{
	unsigned long idx = first;

	return mt_find(mt, &idx, last);
}

/*
 * The mappings of @peer on the other lent devices. Read without their
 * locks: counts grow only in the handlers of DMA requests, which the
 * fabric's receive work runs one at a time, and a take-back meanwhile
 * only lowers them. Were handlers to run concurrently, a host could go
 * over its cap by one batch per other device it holds.
 */
static u64 dl_dma_host_others(struct dl_lent *lent, u32 peer)
{
	struct dl_lent *o;
	unsigned long idx;
	u64 n = 0;

	xa_lock(&dl_lender.devs);
	xa_for_each(&dl_lender.devs, idx, o)
		if (o != lent && READ_ONCE(o->borrower) == peer &&
		    READ_ONCE(o->fab) == lent->fab)
			n += READ_ONCE(o->dma_count);
	xa_unlock(&dl_lender.devs);
	return n;
}

/*
 * May @lent hold one more mapping for @peer? *@others caches
 * dl_dma_host_others(), %DL_DMA_NOT_COUNTED until first needed.
 */
static bool dl_dma_room(struct dl_lent *lent, u32 peer, u64 *others)
{
	if (lent->dma_count >= DL_LENT_MAX_MAPS)
		return false;
	if (*others == DL_DMA_NOT_COUNTED)
		*others = dl_dma_host_others(lent, peer);
	return *others + lent->dma_count < DL_LENDER_HOST_MAX_MAPS;
}

/* The domain's smallest page: what every map and unmap is aligned to. */
static u64 dl_dma_granule(struct iommu_domain *domain)
{
	unsigned long sizes = domain->pgsize_bitmap;

	return sizes & -sizes;
}

/*
 * The longest piece iommu_map() can only fill with the smallest page:
 * just under the domain's second page size. See the top of this file.
 */
static u64 dl_dma_piece(struct iommu_domain *domain)
{
	unsigned long larger = domain->pgsize_bitmap & ~dl_dma_granule(domain);

	if (!larger)
		return U64_MAX;
	return (larger & -larger) - dl_dma_granule(domain);
}

/*
 * The span of IOVA space one leaf page table maps (@up 0), or one table
 * @up levels above it, as a shift: a table is a page of the domain's
 * smallest size, of 8-byte entries (intel-iommu, AMD, ARM LPAE alike), so
 * with 4 KiB pages a leaf table spans 2 MiB and the one above it 1 GiB.
 * Tables of larger pages span more, so counting in these regions can only
 * count a table more than once.
 */
static unsigned int dl_dma_table_shift(struct iommu_domain *domain,
				       unsigned int up)
{
	unsigned int page = __ffs(dl_dma_granule(domain));

	return page + (up + 1) * (page - 3);
}

/* How many regions of @xa's: @first to @last (indexes) are not in it yet. */
static u64 dl_dma_regions_new(struct xarray *xa, unsigned long first,
			      unsigned long last)
{
	u64 n = (u64)(last - first) + 1;
	unsigned long idx;
	void *entry;

	xa_for_each_range(xa, idx, entry, first, last)
		n--;
	return n;
}

/**
 * dl_dma_tables_room() - would mapping [@iova, @last] take the domain over
 *	the holder's budget of page tables (see DL_DMA_TABLE_SLACK)?
 * @lent: the device; @lent->lock held.
 * @iova: the first IOVA.
 * @last: the last IOVA.
 * @ram: the holder's RAM, bytes.
 *
 * Return: true if there is room.
 */
bool dl_dma_tables_room(struct dl_lent *lent, u64 iova, u64 last, u64 ram)
{
	unsigned int leaf = dl_dma_table_shift(lent->domain, 0);
	unsigned int mid = dl_dma_table_shift(lent->domain, 1);
	u64 max_leaves = min_t(u64, DL_LENT_MAX_MAPS,
			       (ram >> leaf) + DL_DMA_TABLE_SLACK);
	u64 max_mids = min_t(u64, DL_LENT_MAX_MAPS,
			     (ram >> mid) + DL_DMA_TABLE_SLACK);

	/* Counted before looking: a run may span more than the budget. */
	if ((last >> leaf) - (iova >> leaf) >= max_leaves)
		return false;
	return lent->dma_nleaves +
	       dl_dma_regions_new(&lent->dma_leaves, iova >> leaf,
				  last >> leaf) <= max_leaves &&
	       lent->dma_nmids +
	       dl_dma_regions_new(&lent->dma_mids, iova >> mid,
				  last >> mid) <= max_mids;
}

/* Note the regions @first to @last (indexes) in @xa; *@n counts them. */
static int dl_dma_regions_note(struct xarray *xa, unsigned long first,
			       unsigned long last, u64 *n)
{
	unsigned long idx = first;
	int ret;

	for (;;) {
		ret = xa_insert(xa, idx, xa_mk_value(0), GFP_KERNEL);
		if (!ret)
			WRITE_ONCE(*n, *n + 1);
		else if (ret != -EBUSY)
			return ret;
		if (idx == last)
			return 0;
		idx++;
		cond_resched();
	}
}

/**
 * dl_dma_tables_note() - count the page tables mapping [@iova, @last] may
 *	make, before it is mapped: a map that fails half-way may have made
 *	some.
 * @lent: the device; @lent->lock held.
 * @iova: the first IOVA.
 * @last: the last IOVA.
 *
 * Return: 0 or -ENOMEM.
 */
int dl_dma_tables_note(struct dl_lent *lent, u64 iova, u64 last)
{
	unsigned int leaf = dl_dma_table_shift(lent->domain, 0);
	unsigned int mid = dl_dma_table_shift(lent->domain, 1);
	int ret;

	ret = dl_dma_regions_note(&lent->dma_leaves, iova >> leaf, last >> leaf,
				  &lent->dma_nleaves);
	if (ret)
		return ret;
	return dl_dma_regions_note(&lent->dma_mids, iova >> mid, last >> mid,
				   &lent->dma_nmids);
}

/*
 * Put the device back into @lent->domain after a fresh domain could not
 * be attached; 0 or -errno (the device stays blocked, maps are refused).
 */
static int dl_dma_reattach(struct dl_lent *lent)
{
	int ret;

	ret = dl_lent_domain_attach(lent, lent->domain);
	WRITE_ONCE(lent->dma_detached, !!ret);
	return ret;
}

/**
 * dl_dma_fresh_domain() - replace the device's domain, which maps nothing
 *	any more, by a fresh one: that frees every page table it kept.
 * @lent: the device; @lent->lock held, no mapping left.
 *
 * Why a fresh domain rather than one iommu_unmap() over all the IOVA
 * space touched: what an unmap frees is the IOMMU driver's choice.
 * intel-iommu (6.12) frees the tables a range covers whole, but frees its
 * root too when the range is the whole aperture, with the domain still
 * attached; AMD's page tables free nothing before the domain is freed;
 * io-pgtable-arm WARNs on every hole in the range. Freeing the domain
 * frees its tables with every driver. The device is in the group's
 * blocking domain between detach and attach, which blocks DMA as the
 * empty domain did. The new domain gets the same fault handler before it
 * is attached; the old one's may still run until it is detached, and
 * only counts and queues work on @lent, which outlives both.
 *
 * Return: 0, or -errno with the old domain kept: not allocated (its
 * tables stay, and stay counted), or not attached: then the device goes
 * back into the old domain, or failing that stays blocked
 * (@lent->dma_detached; maps are refused until it is back).
 */
static int dl_dma_fresh_domain(struct dl_lent *lent)
{
	struct device *dev = &lent->pdev->dev;
	struct iommu_domain *fresh;
	int ret;

	fresh = iommu_paging_domain_alloc(dev);
	if (IS_ERR(fresh))
		return PTR_ERR(fresh);
	iommu_set_fault_handler(fresh, dl_lent_fault_handler, lent);
	/* Direct interrupts must not miss their doorbell page (irq.c). */
	ret = dl_lent_irq_direct_map(lent, fresh);
	if (ret) {
		iommu_domain_free(fresh);
		return ret;
	}
	if (!lent->dma_detached)
		dl_lent_domain_detach(lent, lent->domain);
	ret = dl_lent_domain_attach(lent, fresh);
	if (ret)
		goto err_reattach;
	iommu_domain_free(lent->domain);
	lent->domain = fresh;
	WRITE_ONCE(lent->dma_detached, false);
	return 0;

err_reattach:
	iommu_domain_free(fresh);
	if (dl_dma_reattach(lent))
		dev_err_ratelimited(dev, "lender: the device is in no IOMMU domain of ours (DMA blocked) until it can be attached again\n");
	return ret;
}

/*
 * Every mapping is gone: free the page tables the domain kept, unless it
 * is fresh (nothing counted) or about to be freed (the device goes: no
 * holder can add to it).
 */
static void dl_dma_tables_free(struct dl_lent *lent)
{
	int ret;

	/* A group's: once no member is held (group.c). */
	if (lent->grp)
		return;

	if (!lent->dma_nleaves && !lent->dma_nmids && !lent->dma_detached)
		return;
	if (!lent->dead) {
		ret = dl_dma_fresh_domain(lent);
		if (ret) {
			dev_warn_ratelimited(&lent->pdev->dev,
					     "lender: no fresh IOMMU domain (%d): %llu page-table regions stay counted\n",
					     ret, lent->dma_nleaves);
			return;
		}
		dl_lent_count(lent, DL_LCNT_DMA_TABLE_FREES);
	}
	dl_lent_tables_forget(lent);
}

/*
 * Map [@iova, @iova + @len) onto @phys with small pages only (see the top
 * of this file): 0 with all of it mapped, or -errno with none of it.
 */
static int dl_dma_map_pages(struct dl_lent *lent, u64 iova, phys_addr_t phys,
			    u64 len, int prot)
{
	u64 piece = dl_dma_piece(lent->domain);
	u64 done, n;
	int ret;

	for (done = 0; done < len; done += n) {
		n = min(len - done, piece);
		ret = iommu_map(lent->domain, iova + done, phys + done, n,
				prot, GFP_KERNEL);
		if (ret)
			goto err_unmap;
		cond_resched();
	}
	return 0;

err_unmap:
	if (done)
		iommu_unmap(lent->domain, iova, done);
	return ret;
}

/* Take exactly [@iova, @iova + @len) out of the domain. */
static void dl_dma_unmap_pages(struct dl_lent *lent, u64 iova, u64 len)
{
	size_t unmapped = iommu_unmap(lent->domain, iova, len);

	if (unmapped != len)
		dev_warn_ratelimited(&lent->pdev->dev,
				     "lender: unmapped %zu of %llu bytes at IOVA %#llx\n",
				     unmapped, len, iova);
}

/**
 * dl_dma_iommu_unmap() - take exactly [@iova, @iova + @len) out of the
 *	domain; for a member of a lent group, only the parts of it no other
 *	member maps.
 * @lent: the device; @lent->lock held (and its group's DMA lock).
 * @iova: the first IOVA.
 * @len: bytes.
 */
void dl_dma_iommu_unmap(struct dl_lent *lent, u64 iova, u64 len)
{
	u64 cur = iova, last = iova + len - 1, sf, sl;
	phys_addr_t sp;

	/* A group's: only what no other member maps (group.c). */
	while (lent->grp &&
	       dl_lent_group_next_shared(lent, cur, last, &sf, &sl, &sp)) {
		if (sf > cur)
			dl_dma_unmap_pages(lent, cur, sf - cur);
		if (sl == last)
			return;
		cur = sl + 1;
	}
	dl_dma_unmap_pages(lent, cur, last - cur + 1);
}

/**
 * dl_dma_iommu_map() - map [@iova, @iova + @len) onto @phys with small
 *	pages only, for a device alone in its group; for a member of a lent
 *	group, only what no other member maps already, which must reach the
 *	same memory.
 * @lent: the device; @lent->lock held (and its group's DMA lock).
 * @iova: the first IOVA, page aligned.
 * @phys: what it reaches.
 * @len: bytes, page aligned.
 * @prot: IOMMU_* access.
 *
 * Return: 0 with all of it mapped, or -errno with none of it mapped by
 * this call: -EEXIST if another member maps part of it elsewhere.
 */
int dl_dma_iommu_map(struct dl_lent *lent, u64 iova, phys_addr_t phys,
		     u64 len, int prot)
{
	u64 cur = iova, last = iova + len - 1, sf, sl;
	phys_addr_t sp;
	int ret;

	while (lent->grp &&
	       dl_lent_group_next_shared(lent, cur, last, &sf, &sl, &sp)) {
		ret = -EEXIST;
		if (sp != phys + (sf - iova))
			goto err_undo;
		dl_lent_count(lent, DL_LCNT_DMA_SHARED);
		if (sf > cur) {
			ret = dl_dma_map_pages(lent, cur, phys + (cur - iova),
					       sf - cur, prot);
			if (ret)
				goto err_undo;
		}
		if (sl == last)
			return 0;
		cur = sl + 1;
	}
	ret = dl_dma_map_pages(lent, cur, phys + (cur - iova), last - cur + 1,
			       prot);
	if (!ret)
		return 0;
err_undo:
	/* What this call mapped: the parts no other member maps. */
	if (cur > iova)
		dl_dma_iommu_unmap(lent, iova, cur - iova);
	return ret;
}

/* Enter @m in both indexes, or in neither. */
static int dl_dma_track(struct dl_lent *lent, struct dl_lent_dma *m)
{
	int ret;

	ret = mtree_insert_range(&lent->dma, m->iova, m->iova + m->len - 1, m,
				 GFP_KERNEL);
	if (ret)
		return ret;
	ret = mtree_insert_range(&lent->dma_addr, m->addr,
				 m->addr + m->len - 1, m, GFP_KERNEL);
	if (ret)
		mtree_erase(&lent->dma, m->iova);
	return ret;
}

static void dl_dma_untrack(struct dl_lent *lent, struct dl_lent_dma *m)
{
	mtree_erase(&lent->dma, m->iova);
	mtree_erase(&lent->dma_addr, m->addr);
}

/* Unmap an untracked mapping, take it off the books and free it. */
static void dl_dma_drop(struct dl_lent *lent, struct dl_lent_dma *m)
{
	dl_dma_iommu_unmap(lent, m->iova, m->len);
	WRITE_ONCE(lent->dma_bytes, lent->dma_bytes - m->len);
	WRITE_ONCE(lent->dma_count, lent->dma_count - 1);
	kfree(m);
}

/* Remove one mapping from the domain and the books; frees it. */
static void dl_dma_remove(struct dl_lent *lent, struct dl_lent_dma *m)
{
	dl_dma_untrack(lent, m);
	dl_dma_drop(lent, m);
}

/*
 * Enter a mapping cut down by a partial unmap in the indexes again; if
 * that fails it is unmapped too: the device faults there rather than
 * reach memory this host no longer tracks.
 */
static int dl_dma_retrack(struct dl_lent *lent, struct dl_lent_dma *m)
{
	int ret = dl_dma_track(lent, m);

	if (ret)
		dl_dma_drop(lent, m);
	return ret;
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

	ret = dl_dma_track(lent, m);
	if (ret)
		goto err_free;
	ret = dl_dma_tables_note(lent, iova, iova + len - 1);
	if (ret)
		goto err_untrack;
	ret = dl_dma_iommu_map(lent, iova, phys, len,
			       IOMMU_READ | IOMMU_WRITE);
	if (ret)
		goto err_untrack;
	WRITE_ONCE(lent->dma_bytes, lent->dma_bytes + len);
	WRITE_ONCE(lent->dma_count, lent->dma_count + 1);
	return 0;

err_untrack:
	dl_dma_untrack(lent, m);
err_free:
	kfree(m);
	return ret;
}

/*
 * Undo the mappings a batch made of [@iova, @iova + @len): the pieces of
 * one run, consecutive from @iova. Runs of one batch do not overlap, so
 * each piece's IOVA names it.
 */
static void dl_dma_undo_run(struct dl_lent *lent, u64 iova, u64 len)
{
	struct dl_lent_dma *m;
	u64 p = iova;

	while (p - iova < len) {
		m = mtree_load(&lent->dma, p);
		if (!m || m->iova != p)
			return;
		p += m->len;
		dl_dma_remove(lent, m);
	}
}

/* dl_lent_dma_map(), its group's DMA lock held. */
static int dl_dma_map_batch(struct dl_lent *lent, struct dl_fabric *fab,
			    u32 peer, const struct dl_dma_range *ranges,
			    u32 count)
{
	struct iommu_domain_geometry *geo = &lent->domain->geometry;
	u64 others = DL_DMA_NOT_COUNTED;
	struct dl_fabric_peer_info info;
	u64 budget, piece = 0, run;
	u32 i, done = 0;
	int ret = 0;

	lockdep_assert_held(&lent->lock);

	ret = dl_fabric_peer_info(fab, peer, &info);
	if (ret)
		return ret;
	budget = info.ram_size;
	if (lent->dma_detached && dl_dma_reattach(lent)) {
		dl_lent_reject(lent, DL_REJ_DMA_FAILED);
		return -EIO;
	}

	for (i = 0; i < count; i++) {
		u64 iova = le64_to_cpu(ranges[i].iova);
		u64 addr = le64_to_cpu(ranges[i].addr);
		u64 len = le64_to_cpu(ranges[i].len);
		phys_addr_t phys;

		piece = 0;

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
		if (!dl_dma_room(lent, peer, &others)) {
			dl_lent_reject(lent, DL_REJ_DMA_MAPS);
			ret = -ENOSPC;
			goto err_undo;
		}
		if (dl_dma_busy(&lent->dma, iova, iova + len - 1) ||
		    dl_lent_bar_dma_busy(lent, iova, iova + len - 1) ||
		    dl_lent_p2p_busy(lent, iova, iova + len - 1)) {
			dl_lent_reject(lent, DL_REJ_DMA_OVERLAP);
			ret = -EEXIST;
			goto err_undo;
		}
		/* One page at many IOVAs would cost tables, not memory. */
		if (dl_dma_busy(&lent->dma_addr, addr, addr + len - 1)) {
			dl_lent_reject(lent, DL_REJ_DMA_ALIAS);
			ret = -EEXIST;
			goto err_undo;
		}
		/* And so would pages mapped and unmapped at ever new IOVAs. */
		if (!dl_dma_tables_room(lent, iova, iova + len - 1, budget)) {
			dl_lent_reject(lent, DL_REJ_DMA_TABLES);
			ret = -ENOSPC;
			goto err_undo;
		}
		/*
		 * A run is one piece where our window onto the borrower is
		 * linear (a real adapter's BAR, the emulated fabric's RAM
		 * file), several where its translation is not (the emulated
		 * NTB port behind the borrower's IOMMU).
		 */
		for (piece = 0; piece < len; piece += run) {
			ret = dl_fabric_peer_mw_xlate(fab, peer, addr + piece,
						      len - piece, &phys, &run);
			if (ret) {
				dl_lent_reject(lent, DL_REJ_DMA_WINDOW);
				goto err_undo;
			}
			ret = dl_dma_add(lent, iova + piece, addr + piece,
					 phys, run);
			if (ret) {
				dl_lent_reject(lent, DL_REJ_DMA_FAILED);
				goto err_undo;
			}
		}
		done++;
	}
	atomic64_add(count, &lent->cnt[DL_LCNT_DMA_MAPS]);
	return 0;

err_undo:
	pci_info_ratelimited(lent->pdev,
			     "lender: DMA map from host %u refused at run %u of %u: %d\n",
			     peer, i, count, ret);
	/* The run that failed, as far as it got, then those before it. */
	dl_dma_undo_run(lent, le64_to_cpu(ranges[i].iova), piece);
	while (done--)
		dl_dma_undo_run(lent, le64_to_cpu(ranges[done].iova),
				le64_to_cpu(ranges[done].len));
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
 * outside the aperture or in a reserved region), -EEXIST (overlap in IOVA
 * with a mapping, a BAR's too, or a borrower page mapped already), -ENOSPC
 * (more than the borrower's RAM in total, more mappings than the caps, or
 * more page tables than the budget), -EIO (the device is in no domain of
 * ours), -ENOMEM, or what iommu_map() said.
 */
int dl_lent_dma_map(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    const struct dl_dma_range *ranges, u32 count)
{
	int ret;

	lockdep_assert_held(&lent->lock);

	dl_lent_group_dma_lock(lent);
	ret = dl_dma_map_batch(lent, fab, peer, ranges, count);
	dl_lent_group_dma_unlock(lent);
	return ret;
}

/*
 * Unmap [@first, @last] from @m, which covers more than that: exactly
 * those IOVAs leave the domain, and @m is cut down to what is left of it.
 * A hole in the middle makes one mapping two; if the caps or memory do
 * not allow the second, the part of @m after the hole goes as well.
 */
static int dl_dma_cut(struct dl_lent *lent, struct dl_lent_dma *m,
		      u64 first, u64 last, u64 *others)
{
	u64 m_last = m->iova + m->len - 1;
	struct dl_lent_dma *right = NULL;
	int ret = 0, err;

	if (first > m->iova && last < m_last) {
		if (!dl_dma_room(lent, lent->borrower, others)) {
			dl_lent_reject(lent, DL_REJ_DMA_MAPS);
			ret = -ENOSPC;
		} else {
			right = kzalloc(sizeof(*right), GFP_KERNEL);
			if (!right)
				ret = -ENOMEM;
		}
		if (ret) {
			pci_info_ratelimited(lent->pdev,
					     "lender: unmap of IOVA %#llx+%#llx from host %u takes IOVA up to %#llx too: %d\n",
					     first, last - first + 1,
					     lent->borrower, m_last, ret);
			last = m_last;
		}
	}

	dl_dma_untrack(lent, m);
	dl_dma_iommu_unmap(lent, first, last - first + 1);
	WRITE_ONCE(lent->dma_bytes, lent->dma_bytes - (last - first + 1));

	if (right) {
		u64 skip = last + 1 - m->iova;

		right->iova = last + 1;
		right->addr = m->addr + skip;
		right->phys = m->phys + skip;
		right->len = m_last - last;
		WRITE_ONCE(lent->dma_count, lent->dma_count + 1);
		err = dl_dma_retrack(lent, right);
		if (err)
			ret = err;
	}
	if (first > m->iova) {
		m->len = first - m->iova;
	} else {
		u64 skip = last + 1 - m->iova;

		m->iova += skip;
		m->addr += skip;
		m->phys += skip;
		m->len -= skip;
	}
	err = dl_dma_retrack(lent, m);
	if (err)
		ret = err;
	return ret;
}

/**
 * dl_lent_dma_unmap() - remove the mappings in an IOVA range.
 * @lent: the device; @lent->lock held, the requester checked as holder.
 * @iova: start, page aligned.
 * @len: bytes, page aligned, nonzero, no wrap.
 *
 * Mappings that lie partly in the range lose that part only, and the rest
 * of them stays mapped throughout. (The range is widened to the domain's
 * smallest page, should that be larger than a CPU page.)
 *
 * Return: 0; or -ENOSPC (the caps on mappings) or -ENOMEM if a mapping cut
 * in two could not be kept as two: its part after the range is then
 * unmapped too, and the device faults there instead of reaching memory.
 */
int dl_lent_dma_unmap(struct dl_lent *lent, u64 iova, u64 len)
{
	u64 gran, first, last, others = DL_DMA_NOT_COUNTED;
	struct dl_lent_dma *m;
	unsigned long idx;
	int ret = 0;

	lockdep_assert_held(&lent->lock);

	dl_lent_group_dma_lock(lent);
	gran = dl_dma_granule(lent->domain);
	first = ALIGN_DOWN(iova, gran);
	last = (iova + len - 1) | (gran - 1);
	idx = first;
	while ((m = mt_find(&lent->dma, &idx, last))) {
		u64 m_iova = m->iova, m_last = m->iova + m->len - 1;
		int err;

		if (m_iova >= first && m_last <= last) {
			dl_dma_remove(lent, m);
		} else {
			err = dl_dma_cut(lent, m, max(m_iova, first),
					 min(m_last, last), &others);
			if (err)
				ret = err;
		}
		if (m_last >= last)
			break;
		idx = m_last + 1;
		cond_resched();
	}
	dl_lent_group_dma_unlock(lent);
	return ret;
}

/**
 * dl_lent_dma_unmap_all() - remove every mapping of the holder's memory,
 *	and the page tables they left (the domain is replaced by a fresh
 *	one): the BARs' mappings must be gone first (dl_lent_unmap_all()).
 * @lent: the device; @lent->lock held.
 *
 * For dl_lent_unmap_all() only.
 */
void dl_lent_dma_unmap_all(struct dl_lent *lent)
{
	unsigned long idx = 0;
	struct dl_lent_dma *m;

	lockdep_assert_held(&lent->lock);

	dl_lent_group_dma_lock(lent);
	while ((m = mt_find(&lent->dma, &idx, ULONG_MAX))) {
		dl_dma_remove(lent, m);
		cond_resched();
	}
	WARN_ON(lent->dma_bytes || lent->dma_count);
	mtree_destroy(&lent->dma);
	mtree_destroy(&lent->dma_addr);
	dl_lent_group_dma_unlock(lent);
	dl_dma_tables_free(lent);
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
	/* A group's domain has no token: the member is the device's. */
	struct dl_lent *lent = token ?: dev_get_drvdata(dev);

	if (!lent)
		return -EOPNOTSUPP;
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

	/*
	 * Under the lock, which keeps the fabric alive (a take-back clears
	 * lent->fab under it before the fabric goes), so without waiting
	 * for ring room: the receive work takes this lock for every request
	 * about the device. A report that finds no room is dropped (the
	 * lender's log keeps it); it tells the holder nothing it must act
	 * on.
	 */
	mutex_lock(&lent->lock);
	fab = lent->fab;
	peer = lent->borrower;
	if (fab && peer != DL_NO_HOST && !lent->dead)
		dl_fabric_send_atomic(fab, peer, DL_MSG_DEV_FAULT, &f,
				      sizeof(f));
	mutex_unlock(&lent->lock);
	dev_warn_ratelimited(&lent->pdev->dev, "lender: IOMMU blocked a DMA %s IOVA %#llx\n",
			     f.flags ? "write to" : "read from",
			     le64_to_cpu(f.iova));
}

/**
 * dl_lent_dma_show() - list some of the device's mappings, for debugfs:
 *	one "m <iova> <borrower address> <bytes>" line each, in IOVA order.
 * @s: the file.
 * @lent: the device; @lent->lock held.
 * @from: the IOVA to start at; set to where the next call goes on.
 * @max: how many mappings to list at most.
 *
 * A few at a time, so that a reader of up to 2^20 mappings never holds
 * the lock that the receive work takes for every request about the device.
 *
 * Return: true if mappings from *@from on are left to list.
 */
bool dl_lent_dma_show(struct seq_file *s, struct dl_lent *lent,
		      unsigned long *from, unsigned int max)
{
	unsigned long idx = *from;
	struct dl_lent_dma *m;
	unsigned int n = 0;

	lockdep_assert_held(&lent->lock);

	mt_for_each(&lent->dma, m, idx, ULONG_MAX) {
		if (n++ == max) {
			*from = m->iova;
			return true;
		}
		seq_printf(s, "m %#llx %#llx %#llx\n", m->iova, m->addr, m->len);
	}
	return false;
}
