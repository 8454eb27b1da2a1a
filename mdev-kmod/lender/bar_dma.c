// SPDX-License-Identifier: GPL-2.0
/*
 * A lent device's DMA to its own BARs (%DL_MSG_BAR_DMA).
 *
 * A guest driver may give its device the bus address of one of the
 * device's own BARs: the LSI 53C895A's driver (sym53c8xx) runs the chip's
 * SCRIPTS from the chip's RAM BAR and has them move its registers by
 * address. In the guest that address is where the guest put the BAR. The
 * device's DMA goes through its domain here, which maps the holder's RAM
 * only, and faults. So the holder says where its guest put each memory
 * BAR, and the BAR is mapped there onto itself: IOVA = the guest's BAR
 * address, target = the BAR on this host (IOMMU_MMIO). The request goes up
 * to the IOMMU and back down to the device through the root complex, which
 * QEMU's and most root complexes route. pci_p2pdma_distance() is not asked:
 * it says nothing of a device that reaches itself through a translation
 * (to it that is distance 0, no IOMMU involved), and Debian's kernel lacks
 * it (no CONFIG_PCI_P2PDMA).
 *
 * What a guest reaches so is its own device's BARs, which it reaches by
 * load and store anyway, save the pages of the MSI-X table and PBA: those
 * are this host's (it programs the vectors), and the device must not
 * rewrite them by DMA. A BAR that does not fill its last page is mapped
 * with the rest of that page, which is claimed (request_resource()) so
 * that no other device's BAR can be put there while it is mapped; the
 * map is refused if one already is (vfio-pci does the same to mmap such
 * a BAR).
 *
 * The mappings live in the device's domain beside the holder's RAM, never
 * overlapping it (dma.c checks the other way), their page tables counted
 * in the same budget, and go with every mapping (dl_lent_unmap_all()):
 * bus mastering off, a reset, a release, a take-back, removal.
 */
#include <linux/iommu.h>
#include <linux/ioport.h>
#include <linux/slab.h>

#include "internal.h"

/* Give up the claim on the rest of the BAR's last page. */
static void dl_bar_dma_pad_release(struct dl_lent_bar *b)
{
	if (!b->dma_pad)
		return;
	release_resource(b->dma_pad);
	kfree(b->dma_pad);
	b->dma_pad = NULL;
}

/*
 * Claim the rest of the last page of BAR @bar, which it does not fill:
 * nothing else may be there while the device's DMA reaches the page.
 * Return: 0, -EOPNOTSUPP (something is there), or -ENOMEM.
 */
static int dl_bar_dma_pad(struct dl_lent *lent, unsigned int bar)
{
	struct resource *res = &lent->pdev->resource[bar];
	struct dl_lent_bar *b = &lent->bars[bar];
	struct resource *pad;

	if (PAGE_ALIGNED(b->size))
		return 0;
	if (!res->parent)
		return -EOPNOTSUPP;
	pad = kzalloc(sizeof(*pad), GFP_KERNEL);
	if (!pad)
		return -ENOMEM;
	pad->name = "devlend BAR DMA pad";
	pad->start = res->start + b->size;
	pad->end = res->start + PAGE_ALIGN(b->size) - 1;
	pad->flags = IORESOURCE_MEM;
	if (request_resource(res->parent, pad)) {
		kfree(pad);
		return -EOPNOTSUPP;
	}
	b->dma_pad = pad;
	return 0;
}

/* Take BAR @bar's mapping for its device's DMA away, if it has one. */
static void dl_bar_dma_unmap(struct dl_lent *lent, unsigned int bar)
{
	struct dl_lent_bar *b = &lent->bars[bar];
	const struct dl_bar_dma_span *p;
	unsigned int i;

	if (!b->dma)
		return;
	for (i = 0; i < b->dma_npieces; i++) {
		p = &b->dma_pieces[i];
		dl_dma_iommu_unmap(lent, b->dma_iova + p->start,
				   p->end - p->start);
	}
	dl_bar_dma_pad_release(b);
	b->dma = false;
	b->dma_npieces = 0;
	dl_lent_count(lent, DL_LCNT_BAR_DMA_UNMAPS);
}

/* Map BAR @bar, which has no such mapping, at @iova for its device. */
static int dl_bar_dma_map(struct dl_lent *lent, struct dl_fabric *fab,
			  u32 peer, unsigned int bar, u64 iova)
{
	struct iommu_domain_geometry *geo = &lent->domain->geometry;
	phys_addr_t start = pci_resource_start(lent->pdev, bar);
	struct dl_bar_dma_span skip[DL_BAR_DMA_MAX_SKIPS];
	struct dl_lent_bar *b = &lent->bars[bar];
	const struct dl_bar_dma_span *p;
	struct dl_fabric_peer_info info;
	unsigned int i, n;
	u64 last;
	int ret;

	ret = dl_bar_dma_check(start, b->size, iova);
	if (ret)
		return ret;
	last = iova + PAGE_ALIGN(b->size) - 1;
	if (lent->dma_detached)
		return -EIO;
	if (iova < geo->aperture_start || last > geo->aperture_end ||
	    dl_dma_in_resv(lent, iova, last) ||
	    dl_dma_busy(&lent->dma, iova, last) ||
	    dl_lent_bar_dma_busy(lent, iova, last) ||
	    dl_lent_p2p_busy(lent, iova, last))
		return -EINVAL;
	ret = dl_fabric_peer_info(fab, peer, &info);
	if (ret)
		return ret;
	/* A BAR moved from IOVA to IOVA would leave tables behind. */
	if (!dl_dma_tables_room(lent, iova, last, info.ram_size))
		return -ENOSPC;
	ret = dl_bar_dma_pad(lent, bar);
	if (ret)
		return ret;
	n = dl_bar_dma_pieces(b->size, skip, dl_lent_msix_skips(lent, bar, skip),
			      b->dma_pieces);
	ret = dl_dma_tables_note(lent, iova, last);
	if (ret)
		goto err_pad;
	for (i = 0; i < n; i++) {
		p = &b->dma_pieces[i];
		ret = dl_dma_iommu_map(lent, iova + p->start, start + p->start,
				       p->end - p->start,
				       IOMMU_READ | IOMMU_WRITE | IOMMU_MMIO);
		if (ret)
			goto err_unmap;
	}
	b->dma = true;
	b->dma_iova = iova;
	b->dma_npieces = n;
	dl_lent_count(lent, DL_LCNT_BAR_DMA_MAPS);
	return 0;

err_unmap:
	while (i--) {
		p = &b->dma_pieces[i];
		dl_dma_iommu_unmap(lent, iova + p->start, p->end - p->start);
	}
err_pad:
	dl_bar_dma_pad_release(b);
	return ret;
}

/**
 * dl_lent_bar_dma() - map a memory BAR for the device's own DMA where the
 *	holder's guest put it, or unmap it (%DL_MSG_BAR_DMA).
 * @lent: the device; @lent->lock held; @peer is its holder on @fab.
 * @fab: the holder's fabric.
 * @peer: the holder.
 * @bar: the BAR, from the holder: anything.
 * @map: map at @iova, else unmap.
 * @iova: from the holder: anything.
 *
 * A map where the BAR is mapped already changes nothing; a map elsewhere
 * moves it (and if the new place is refused, the BAR is mapped nowhere);
 * an unmap of a BAR not mapped changes nothing.
 *
 * Return: 0; -EINVAL (no such BAR, an @iova not page aligned, outside the
 * aperture, reserved or overlapping a mapping); -EOPNOTSUPP (an I/O BAR,
 * a BAR not page aligned here, or whose last page holds something else);
 * -ENOSPC (the page-table budget); -EIO (the device is in no domain of
 * ours); -ENOMEM, or what iommu_map() said.
 */
int dl_lent_bar_dma(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		    unsigned int bar, bool map, u64 iova)
{
	struct dl_lent_bar *b;
	int ret;

	lockdep_assert_held(&lent->lock);

	ret = dl_lent_mem_bar(lent, bar, &b);
	if (ret)
		return ret;
	if (map && b->dma && b->dma_iova == iova)
		return 0;
	dl_bar_dma_unmap(lent, bar);
	if (!map)
		return 0;
	ret = dl_bar_dma_map(lent, fab, peer, bar, iova);
	if (ret)
		pci_info_ratelimited(lent->pdev,
				     "lender: BAR%u not mapped for the device's own DMA at IOVA %#llx for host %u: %d\n",
				     bar, iova, peer, ret);
	else
		pci_info_ratelimited(lent->pdev,
				     "lender: BAR%u mapped for the device's own DMA at IOVA %#llx for host %u\n",
				     bar, iova, peer);
	return ret;
}

/**
 * dl_lent_unmap_all() - take every mapping of the device away, its BARs'
 *	first, then the holder's memory, and the page tables they left: for
 *	the holder clearing bus mastering (%DL_DMA_UNMAP_F_ALL), and for every
 *	take-back.
 * @lent: the device; @lent->lock held.
 */
void dl_lent_unmap_all(struct dl_lent *lent)
{
	unsigned int i;

	lockdep_assert_held(&lent->lock);

	for (i = 0; i < DL_NUM_BARS; i++)
		dl_bar_dma_unmap(lent, i);
	dl_lent_p2p_unmap_all(lent);
	dl_lent_dma_unmap_all(lent);
}
