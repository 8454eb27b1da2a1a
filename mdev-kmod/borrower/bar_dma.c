// SPDX-License-Identifier: GPL-2.0
/*
 * The device's DMA to its own BARs: tell the lender where the guest put
 * them (%DL_MSG_BAR_DMA).
 *
 * A guest driver may hand its device the bus address of one of the
 * device's own BARs (the LSI 53C895A runs its SCRIPTS from its RAM BAR).
 * That address is the guest's, where the guest put the BAR; the lender
 * maps it, in the device's IOMMU domain, onto the BAR itself
 * (lender/bar_dma.c). Here the wanted state follows the virtual config
 * space after every write to the command register or a BAR: each memory
 * BAR at its guest address while memory decode and bus mastering are on
 * and guest memory is mapped; nothing otherwise. What the lender holds is
 * brought to it, one message per BAR that changed.
 *
 * The lender drops these mappings with all of the device's mappings
 * (DL_DMA_UNMAP_F_ALL, sent when bus mastering goes off or starts over,
 * a reset, a take-back), so while guest memory is not mapped this host
 * forgets them without a word. A refusal leaves the BAR unmapped, and
 * the device's DMA there faults as it did before there was this message
 * (an old lender answers ENOTSUPP); it is not asked again for that
 * address.
 */
#include <linux/pci.h>

#include "internal.h"

/* Ask the lender to map @bar at @iova, or (!@map) to unmap it. */
static int dl_bar_dma_send(struct dl_vdev *v, unsigned int bar, bool map,
			   u64 iova)
{
	struct dl_bar_dma req = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.bar = bar,
		.flags = map ? DL_BAR_DMA_F_MAP : 0,
		.iova = cpu_to_le64(map ? iova : 0),
	};

	return dl_session_request(v, DL_MSG_BAR_DMA, &req, sizeof(req),
				  NULL, 0);
}

/* Where BAR @bar should be mapped for the device's DMA; 0: nowhere. */
static u64 dl_bar_dma_wanted(struct dl_vdev *v, unsigned int bar)
{
	u64 addr = dl_config_bar_addr(v, bar);

	if (!addr || !PAGE_ALIGNED(addr))
		return 0;
	return addr;
}

/**
 * dl_bar_dma_forget() - the lender dropped every mapping of the device,
 *	its BARs' too (all guest memory unmapped, or about to be mapped
 *	afresh): nothing of them is left to undo.
 * @v: the mdev; caller holds v->lock.
 */
void dl_bar_dma_forget(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	v->bar_dma.mapped = 0;
	v->bar_dma.refused = 0;
}

/**
 * dl_bar_dma_sync() - bring the lender's mappings of the device's BARs for
 *	its own DMA to where the guest has them (&dl_config_ops.bars_changed).
 * @v: the mdev; caller holds v->lock.
 */
void dl_bar_dma_sync(struct dl_vdev *v)
{
	struct dl_vdev_bar_dma *bd = &v->bar_dma;
	u16 cmd = dl_config_command(v);
	unsigned int bar;
	u64 want;
	int ret;

	lockdep_assert_held(&v->lock);

	if (!v->dma.on || READ_ONCE(v->sess.state) != DL_VDEV_BORROWED) {
		dl_bar_dma_forget(v);
		return;
	}
	for (bar = 0; bar < DL_NUM_BARS; bar++) {
		want = (cmd & PCI_COMMAND_MEMORY) && (cmd & PCI_COMMAND_MASTER) ?
		       dl_bar_dma_wanted(v, bar) : 0;
		if (!want) {
			bd->refused &= ~BIT(bar);
			if (!(bd->mapped & BIT(bar)))
				continue;
			bd->mapped &= ~BIT(bar);
			ret = dl_bar_dma_send(v, bar, false, 0);
			if (ret)
				dev_dbg_ratelimited(dl_vdev_dev(v),
						    "BAR%u: unmap for the device's DMA: %d\n",
						    bar, ret);
			continue;
		}
		if ((bd->mapped & BIT(bar)) && bd->iova[bar] == want)
			continue;
		if ((bd->refused & BIT(bar)) && bd->refused_iova[bar] == want)
			continue;
		bd->mapped &= ~BIT(bar);
		ret = dl_bar_dma_send(v, bar, true, want);
		if (ret) {
			bd->refused |= BIT(bar);
			bd->refused_iova[bar] = want;
			bd->refusals++;
			dev_info_ratelimited(dl_vdev_dev(v),
					     "BAR%u at %#llx: the lender does not map it for the device's own DMA (%d); DMA there faults\n",
					     bar, want, ret);
			continue;
		}
		bd->refused &= ~BIT(bar);
		bd->mapped |= BIT(bar);
		bd->iova[bar] = want;
		bd->maps++;
	}
}
