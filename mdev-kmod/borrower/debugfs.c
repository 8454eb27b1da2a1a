// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs: devlend/borrower shows, for every borrower, its mdevs with the
 * pages they have pinned, and its leases with the pages in quarantine
 * (lease.c). Tests compare these with the lender's mappings.
 */
#include <linux/debugfs.h>
#include <linux/math64.h>
#include <linux/seq_file.h>

#include "internal.h"

static struct dentry *dl_borrower_debugfs;

/**
 * dl_borrower_show_one() - one borrower's mdevs and leases.
 * @s: the file.
 * @b: the borrower.
 */
static void dl_borrower_show_one(struct seq_file *s, struct dl_borrower *b)
{
	u64 same, moved, dropped, held, retries, win_refused, dfires, dfallbacks;
	u32 ndirect = 0;
	struct dl_vdev *v;

	mutex_lock(&b->lock);
	same = b->kept_same;
	moved = b->kept_moved;
	dropped = b->kept_dropped;
	held = b->repin_held;
	retries = b->intx_unmask_retries;
	win_refused = b->window_refused;
	dfires = b->direct_fires;
	dfallbacks = b->direct_fallbacks;
	list_for_each_entry(v, &b->vdevs, node) {
		retries += READ_ONCE(v->irq.intx_unmask_retries);
		win_refused += READ_ONCE(v->dma.win_refused);
		dfires += atomic64_read(&v->irq.direct_fires);
		dfallbacks += READ_ONCE(v->irq.direct_fallbacks);
		ndirect += READ_ONCE(v->irq.irqs[VFIO_PCI_MSIX_IRQ_INDEX].ndirect);
		same += READ_ONCE(v->dma.kept_same);
		moved += READ_ONCE(v->dma.kept_moved);
		dropped += READ_ONCE(v->dma.kept_dropped);
		held += READ_ONCE(v->dma.repin_held);
	}
	seq_printf(s, "borrower adapter=%s quarantined=%lu quarantined_total=%llu quarantine_refusals=%llu returned_late=%llu returned=%llu lost=%llu kept_same=%llu kept_moved=%llu kept_dropped=%llu repin_held=%llu intx_unmask_retries=%llu window_refused=%llu irq_direct=%u irq_direct_fires=%llu irq_direct_fallbacks=%llu p2p_maps=%llu p2p_refused=%llu\n",
		   dev_name(b->dev), b->nquarantined, b->quarantined_total,
		   b->quarantine_refusals, b->returned_late, b->returned,
		   b->lost, same, moved, dropped, held, retries, win_refused, ndirect,
		   dfires, dfallbacks, READ_ONCE(b->p2p_sent),
		   READ_ONCE(b->p2p_refused));
	list_for_each_entry(v, &b->vdevs, node)
		seq_printf(s, "mdev %s state=%d pinned=%lu unmap_windows=%u unmap_window_ms=%llu kept=%lu fills=%llu fill_us=%llu fill_pin_us=%llu fill_pages=%llu fill_runs=%llu fill_msgs=%llu fill_bulk_pages=%llu bulk_refused=%llu intx_unmask_retries=%llu window_pages=%lu window_refused=%llu irq_direct=%u irq_direct_fires=%llu bar_windows=%llu bar_window_races=%llu bar_zaps=%llu bar_faults=%lld bar_sigbus=%lld mig_quiesces=%llu mig_unsettled=%llu mig_takeovers=%llu mig_settle_ms=%u\n",
			   dev_name(dl_vdev_dev(v)), READ_ONCE(v->sess.state),
			   READ_ONCE(v->dma.npinned), READ_ONCE(v->dma.windows),
			   READ_ONCE(v->dma.window_ms), READ_ONCE(v->dma.nkept),
			   READ_ONCE(v->dma.fill.fills),
			   div_u64(READ_ONCE(v->dma.fill.ns), NSEC_PER_USEC),
			   div_u64(READ_ONCE(v->dma.fill.pin_ns), NSEC_PER_USEC),
			   READ_ONCE(v->dma.fill.pages), READ_ONCE(v->dma.fill.runs),
			   READ_ONCE(v->dma.fill.msgs),
			   READ_ONCE(v->dma.fill.bulk_pages),
			   READ_ONCE(v->dma.fill.bulk_refused),
			   READ_ONCE(v->irq.intx_unmask_retries),
			   READ_ONCE(v->dma.nwin), READ_ONCE(v->dma.win_refused),
			   READ_ONCE(v->irq.irqs[VFIO_PCI_MSIX_IRQ_INDEX].ndirect),
			   atomic64_read(&v->irq.direct_fires),
			   READ_ONCE(v->mm.windows),
			   READ_ONCE(v->mm.window_races), READ_ONCE(v->mm.zaps),
			   atomic64_read(&v->mm.faults),
			   atomic64_read(&v->mm.sigbus),
			   READ_ONCE(v->mig.quiesces),
			   READ_ONCE(v->mig.unsettled),
			   READ_ONCE(v->mig.takeovers),
			   READ_ONCE(v->mig.settle_ms));
	dl_lease_show(s, b);
	mutex_unlock(&b->lock);
}

static int dl_borrower_show_ctx(struct dl_fabric *fab, void *ctx, void *arg)
{
	dl_borrower_show_one(arg, ctx);
	return 0;
}

static int dl_borrower_show(struct seq_file *s, void *unused)
{
	return dl_fabric_client_for_each(&dl_borrower_client,
					 dl_borrower_show_ctx, s);
}
DEFINE_SHOW_ATTRIBUTE(dl_borrower);

/**
 * dl_borrower_debugfs_add() - create devlend/borrower beside the fabric's
 *	files.
 */
void dl_borrower_debugfs_add(void)
{
	dl_borrower_debugfs = debugfs_create_file("borrower", 0400,
						  dl_fabric_debugfs_root(),
						  NULL, &dl_borrower_fops);
}

/**
 * dl_borrower_debugfs_remove() - remove it.
 */
void dl_borrower_debugfs_remove(void)
{
	debugfs_remove(dl_borrower_debugfs);
	dl_borrower_debugfs = NULL;
}
