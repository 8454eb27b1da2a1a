// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs: devlend/borrower shows, for every borrower, its mdevs with the
 * pages they have pinned, and its leases with the pages in quarantine
 * (lease.c). Tests compare these with the lender's mappings.
 */
#include <linux/debugfs.h>
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
	struct dl_vdev *v;

	mutex_lock(&b->lock);
	seq_printf(s, "borrower adapter=%s quarantined=%lu quarantined_total=%llu returned_late=%llu returned=%llu lost=%llu\n",
		   dev_name(b->dev), b->nquarantined, b->quarantined_total,
		   b->returned_late, b->returned, b->lost);
	list_for_each_entry(v, &b->vdevs, node)
		seq_printf(s, "mdev %s state=%d pinned=%lu unmap_windows=%u unmap_window_ms=%llu\n",
			   dev_name(dl_vdev_dev(v)), READ_ONCE(v->state),
			   READ_ONCE(v->npinned), READ_ONCE(v->windows),
			   READ_ONCE(v->window_ms));
	dl_lease_show(s, b);
	mutex_unlock(&b->lock);
}

static int dl_borrower_show(struct seq_file *s, void *unused)
{
	struct dl_borrower *b;

	mutex_lock(&dl_borrowers_lock);
	list_for_each_entry(b, &dl_borrowers, node)
		dl_borrower_show_one(s, b);
	mutex_unlock(&dl_borrowers_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(dl_borrower);

/**
 * dl_borrower_debugfs_add() - create devlend/borrower beside the fabric's
 *	files, unless it is there.
 *
 * Caller holds dl_borrowers_lock.
 */
void dl_borrower_debugfs_add(void)
{
	struct dentry *root;

	lockdep_assert_held(&dl_borrowers_lock);

	if (dl_borrower_debugfs)
		return;
	root = debugfs_lookup("devlend", NULL);
	if (IS_ERR_OR_NULL(root))
		return;
	dl_borrower_debugfs = debugfs_create_file("borrower", 0400, root, NULL,
						  &dl_borrower_fops);
	dput(root);
}

/**
 * dl_borrower_debugfs_remove() - remove it, before the fabric removes
 *	its directory.
 *
 * Caller holds dl_borrowers_lock.
 */
void dl_borrower_debugfs_remove(void)
{
	lockdep_assert_held(&dl_borrowers_lock);

	debugfs_remove(dl_borrower_debugfs);
	dl_borrower_debugfs = NULL;
}
