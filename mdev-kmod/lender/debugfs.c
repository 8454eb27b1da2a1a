// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs: /sys/kernel/debug/devlend/lender (while a fabric is present)
 *
 *   one line for requests that named no device:
 *     global rej_<reason>=<n> ...
 *   then one line per lent device:
 *     dev_id=<id> name=<pci address> state=<state> borrower=<id|-> \
 *     dma_bytes=<n> dma_maps=<n> dma_pt_leaf=<n> dma_pt_mid=<n> \
 *     irq_vectors=<n> <counter>=<n> ... \
 *     rej_<reason>=<n> ...
 * For tests: every refusal the lender makes is counted here by reason.
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>

#include "internal.h"

const char * const dl_lender_reject_names[DL_REJ_NR] = {
	[DL_REJ_MALFORMED] = "malformed",
	[DL_REJ_NODEV] = "nodev",
	[DL_REJ_NOT_HOLDER] = "not_holder",
	[DL_REJ_BUSY] = "busy",
	[DL_REJ_CFG_RANGE] = "cfg_range",
	[DL_REJ_BAR_RANGE] = "bar_range",
	[DL_REJ_BAR_MSIX] = "bar_msix",
	[DL_REJ_BAR_DECODE] = "bar_decode",
	[DL_REJ_DMA_RANGE] = "dma_range",
	[DL_REJ_DMA_WINDOW] = "dma_window",
	[DL_REJ_DMA_APERTURE] = "dma_aperture",
	[DL_REJ_DMA_OVERLAP] = "dma_overlap",
	[DL_REJ_DMA_BUDGET] = "dma_budget",
	[DL_REJ_DMA_FAILED] = "dma_failed",
	[DL_REJ_DMA_MAPS] = "dma_maps",
	[DL_REJ_DMA_ALIAS] = "dma_alias",
	[DL_REJ_DMA_TABLES] = "dma_tables",
	[DL_REJ_IRQ] = "irq",
	[DL_REJ_NOT_ALLOWED] = "not_allowed",
	[DL_REJ_BAR_DMA] = "bar_dma",
	[DL_REJ_P2P_DMA] = "p2p_dma",
	[DL_REJ_GROUP] = "group",
	[DL_REJ_MIG] = "mig",
};

const char * const dl_lender_counter_names[DL_LCNT_NR] = {
	[DL_LCNT_CFG_READS] = "cfg_reads",
	[DL_LCNT_CFG_WRITES] = "cfg_writes",
	[DL_LCNT_CFG_FILTERED] = "cfg_filtered",
	[DL_LCNT_BAR_READS] = "bar_reads",
	[DL_LCNT_BAR_WRITES] = "bar_writes",
	[DL_LCNT_BAR_WRITES_IN_IRQ] = "bar_writes_in_irq",
	[DL_LCNT_DMA_MAPS] = "dma_map_ranges",
	[DL_LCNT_DMA_UNMAPS] = "dma_unmaps",
	[DL_LCNT_DMA_TABLE_FREES] = "dma_table_frees",
	[DL_LCNT_IRQ_SETS] = "irq_sets",
	[DL_LCNT_IRQ_FIRES] = "irq_fires",
	[DL_LCNT_IRQ_FIRE_ERRORS] = "irq_fire_errors",
	[DL_LCNT_INTX_MASKS] = "intx_masks",
	[DL_LCNT_INTX_UNMASKS] = "intx_unmasks",
	[DL_LCNT_IRQ_DIRECTS] = "irq_direct_sets",
	[DL_LCNT_BAR_WINDOWS] = "bar_windows",
	[DL_LCNT_BAR_WINDOW_REVOKES] = "bar_window_revokes",
	[DL_LCNT_BAR_DMA_MAPS] = "bar_dma_maps",
	[DL_LCNT_BAR_DMA_UNMAPS] = "bar_dma_unmaps",
	[DL_LCNT_P2P_MAPS] = "p2p_maps",
	[DL_LCNT_P2P_UNMAPS] = "p2p_unmaps",
	[DL_LCNT_P2P_REVOKES] = "p2p_revokes",
	[DL_LCNT_P2P_EXPORTS] = "p2p_exports",
	[DL_LCNT_P2P_EXPORT_REVOKES] = "p2p_export_revokes",
	[DL_LCNT_P2P_REVOKES_UNANSWERED] = "p2p_revokes_unanswered",
	[DL_LCNT_P2P_FENCE_REFUSALS] = "p2p_fence_refusals",
	[DL_LCNT_P2P_LOOKUPS] = "p2p_lookups",
	[DL_LCNT_P2P_REMOTE_DROPS] = "p2p_remote_drops",
	[DL_LCNT_ACQUIRES] = "acquires",
	[DL_LCNT_RELEASES] = "releases",
	[DL_LCNT_RECLAIMS] = "reclaims",
	[DL_LCNT_RESETS] = "resets",
	[DL_LCNT_FAULTS] = "faults",
	[DL_LCNT_DMA_SHARED] = "dma_shared",
	[DL_LCNT_GROUP_RESETS] = "group_resets",
	[DL_LCNT_MIG_QUIESCES] = "mig_quiesces",
	[DL_LCNT_MIG_UNSETTLED] = "mig_unsettled",
	[DL_LCNT_MIG_TAKEOVERS] = "mig_takeovers",
	[DL_LCNT_MIG_RESUMES] = "mig_resumes",
};

/*
 * The kind of vectors the holder has taken ("-" for none), read without
 * the device's lock: a snapshot for people and tests.
 */
static const char *dl_lent_irq_type_name(struct dl_lent *lent)
{
	if (!READ_ONCE(lent->nvecs))
		return "-";
	switch (READ_ONCE(lent->vec_type)) {
	case DL_IRQ_INTX:
		return "intx";
	case DL_IRQ_MSI:
		return "msi";
	case DL_IRQ_MSIX:
		return "msix";
	default:
		return "?";
	}
}

static int dl_lender_show(struct seq_file *s, void *unused)
{
	struct dl_lent *lent;
	unsigned long idx;
	int i;

	seq_puts(s, "global");
	for (i = 0; i < DL_REJ_NR; i++)
		seq_printf(s, " rej_%s=%lld", dl_lender_reject_names[i],
			   atomic64_read(&dl_lender.rej[i]));
	seq_putc(s, '\n');

	/* The xarray lock keeps each device from being freed meanwhile. */
	xa_lock(&dl_lender.devs);
	xa_for_each(&dl_lender.devs, idx, lent) {
		u32 b = READ_ONCE(lent->borrower);

		seq_printf(s, "dev_id=%u name=%s state=%s", lent->dev_id,
			   pci_name(lent->pdev),
			   dl_lent_state_name(READ_ONCE(lent->state)));
		if (b == DL_NO_HOST)
			seq_puts(s, " borrower=-");
		else
			seq_printf(s, " borrower=%u", b);
		seq_printf(s, " dma_bytes=%llu dma_maps=%llu",
			   READ_ONCE(lent->dma_bytes),
			   READ_ONCE(lent->dma_count));
		/* Page-table regions counted against the holder's budget. */
		seq_printf(s, " dma_pt_leaf=%llu dma_pt_mid=%llu",
			   READ_ONCE(lent->dma_nleaves),
			   READ_ONCE(lent->dma_nmids));
		seq_printf(s, " irq_vectors=%u irq_type=%s irq_direct=%u",
			   READ_ONCE(lent->nvecs), dl_lent_irq_type_name(lent),
			   READ_ONCE(lent->ndirect));
		for (i = 0; i < DL_LCNT_NR; i++)
			seq_printf(s, " %s=%lld", dl_lender_counter_names[i],
				   atomic64_read(&lent->cnt[i]));
		for (i = 0; i < DL_REJ_NR; i++)
			seq_printf(s, " rej_%s=%lld", dl_lender_reject_names[i],
				   atomic64_read(&lent->rej[i]));
		seq_putc(s, '\n');
	}
	xa_unlock(&dl_lender.devs);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(dl_lender);

/* Mappings listed per hold of a device's lock. */
#define DL_MAPS_PER_HOLD	1024

/*
 * lender_maps: for each lent device a "dev_id=<id> borrower=<id|->" line,
 * then its mappings (dl_lent_dma_show()). Tests compare them with what the
 * borrower pinned and quarantined. The lock is let go between batches of
 * lines, so a listing taken while mappings change may mix moments; each
 * line was true when it was written.
 */
static int dl_lender_maps_show(struct seq_file *s, void *unused)
{
	unsigned long idx, from;
	struct dl_lent *lent;
	bool more;

	/* One device at a time, by reference: its lock is a mutex. */
	for (idx = 0; xa_find(&dl_lender.devs, &idx, ULONG_MAX, XA_PRESENT);
	     idx++) {
		lent = dl_lent_get(idx);
		if (!lent)
			continue;
		mutex_lock(&lent->lock);
		if (lent->borrower == DL_NO_HOST)
			seq_printf(s, "dev_id=%u borrower=-\n", lent->dev_id);
		else
			seq_printf(s, "dev_id=%u borrower=%u\n", lent->dev_id,
				   lent->borrower);
		from = 0;
		more = dl_lent_dma_show(s, lent, &from, DL_MAPS_PER_HOLD);
		mutex_unlock(&lent->lock);
		while (more) {
			cond_resched();
			mutex_lock(&lent->lock);
			more = dl_lent_dma_show(s, lent, &from, DL_MAPS_PER_HOLD);
			mutex_unlock(&lent->lock);
		}
		dl_lent_put(lent);
	}
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(dl_lender_maps);

/**
 * dl_lender_debugfs_add() - create devlend/lender beside the fabric's files.
 */
void dl_lender_debugfs_add(void)
{
	struct dentry *root = dl_fabric_debugfs_root();

	dl_lender.debugfs = debugfs_create_file("lender", 0400, root, NULL,
						&dl_lender_fops);
	dl_lender.debugfs_maps = debugfs_create_file("lender_maps", 0400, root,
						     NULL, &dl_lender_maps_fops);
}

/**
 * dl_lender_debugfs_remove() - remove it.
 */
void dl_lender_debugfs_remove(void)
{
	debugfs_remove(dl_lender.debugfs);
	dl_lender.debugfs = NULL;
	debugfs_remove(dl_lender.debugfs_maps);
	dl_lender.debugfs_maps = NULL;
}
