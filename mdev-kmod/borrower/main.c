// SPDX-License-Identifier: GPL-2.0
/*
 * devlend borrower: module-level setup and the fabric events.
 *
 * When a fabric adapter is added, the borrower registers the mdev parent
 * on it, its remote/ directory and the handlers of what lenders post
 * (device changes, interrupts, faults). Peer up and DEV_CHANGED queue a
 * scan of that lender's devices (remote.c); peer down marks them gone and
 * fails the mdevs that hold one. When the adapter goes away, everything
 * is undone in reverse; unregistering the parent removes every mdev,
 * waiting for their users to close them.
 */
#include <linux/jiffies.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/notifier.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "borrower.h"
#include "internal.h"

LIST_HEAD(dl_borrowers);
/* dl_borrowers, and the debugfs file that shows them. */
DEFINE_MUTEX(dl_borrowers_lock);
static bool dl_borrower_enabled;

static const u16 dl_borrower_msgs[] = {
	DL_MSG_DEV_CHANGED,
	DL_MSG_IRQ_FIRE,
	DL_MSG_DEV_FAULT,
};

static const dl_fabric_msg_fn dl_borrower_handlers[] = {
	dl_remote_changed,
	dl_irq_fire,
	dl_vdev_fault,
};

static struct dl_borrower *dl_borrower_find(struct dl_fabric *fab)
{
	struct dl_borrower *b;

	lockdep_assert_held(&dl_borrowers_lock);

	list_for_each_entry(b, &dl_borrowers, node)
		if (b->fab == fab)
			return b;
	return NULL;
}

static void dl_borrower_unregister_handlers(struct dl_borrower *b,
					    unsigned int n)
{
	while (n--)
		dl_fabric_unregister_handler(b->fab, dl_borrower_msgs[n]);
}

static void dl_borrower_added(struct dl_fabric *fab)
{
	struct dl_borrower *b;
	unsigned int i;
	int ret;

	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		return;
	b->fab = fab;
	b->dev = dl_fabric_device(fab);
	b->host_id = dl_fabric_host_id(fab);
	mutex_init(&b->lock);
	spin_lock_init(&b->fire_lock);
	INIT_LIST_HEAD(&b->remotes);
	INIT_LIST_HEAD(&b->vdevs);
	INIT_WORK(&b->scan_work, dl_remote_scan_work);
	INIT_LIST_HEAD(&b->leases);
	INIT_DELAYED_WORK(&b->release_work, dl_lease_release_work);
	b->check_jiffies = jiffies - 2 * HZ;

	ret = dl_remote_add_dir(b);
	if (ret)
		goto err_free;
	for (i = 0; i < ARRAY_SIZE(dl_borrower_msgs); i++) {
		/* Interrupt relays go in the doorbell interrupt (irq.c). */
		if (dl_borrower_msgs[i] == DL_MSG_IRQ_FIRE)
			ret = dl_fabric_register_handler_atomic(fab,
								dl_borrower_msgs[i],
								dl_borrower_handlers[i],
								dl_irq_fire_atomic,
								b);
		else
			ret = dl_fabric_register_handler(fab,
							 dl_borrower_msgs[i],
							 dl_borrower_handlers[i],
							 b);
		if (ret)
			goto err_unregister_handlers;
	}
	ret = dl_parent_register(b);
	if (ret)
		goto err_unregister_handlers;

	mutex_lock(&dl_borrowers_lock);
	list_add_tail(&b->node, &dl_borrowers);
	dl_borrower_debugfs_add();
	mutex_unlock(&dl_borrowers_lock);
	return;

err_unregister_handlers:
	dl_borrower_unregister_handlers(b, i);
	dl_remote_remove_all(b);
err_free:
	dev_err(b->dev, "borrower: cannot set up on this adapter: %d\n", ret);
	kfree(b);
}

static void dl_borrower_removing(struct dl_fabric *fab)
{
	struct dl_borrower *b;

	mutex_lock(&dl_borrowers_lock);
	b = dl_borrower_find(fab);
	if (b)
		list_del(&b->node);
	if (list_empty(&dl_borrowers))
		dl_borrower_debugfs_remove();
	mutex_unlock(&dl_borrowers_lock);
	if (!b)
		return;

	mutex_lock(&b->lock);
	b->dying = true;
	mutex_unlock(&b->lock);
	cancel_work_sync(&b->scan_work);

	/* Removes every mdev; waits until their users have closed them. */
	dl_parent_unregister(b);
	dl_lease_teardown(b);
	dl_borrower_unregister_handlers(b, ARRAY_SIZE(dl_borrower_msgs));
	dl_remote_remove_all(b);
	kfree(b);
}

static int dl_borrower_event(struct notifier_block *nb, unsigned long type,
			     void *data)
{
	struct dl_fabric_event *ev = data;
	struct dl_borrower *b;

	switch (type) {
	case DL_FABRIC_EV_ADDED:
		dl_borrower_added(ev->fab);
		return NOTIFY_OK;
	case DL_FABRIC_EV_REMOVING:
		dl_borrower_removing(ev->fab);
		return NOTIFY_OK;
	}

	mutex_lock(&dl_borrowers_lock);
	b = dl_borrower_find(ev->fab);
	if (b && type == DL_FABRIC_EV_PEER_UP) {
		dl_remote_peer_up(b, ev->peer);
		dl_lease_peer_up(b);
	} else if (b && type == DL_FABRIC_EV_PEER_DOWN) {
		dl_remote_peer_down(b, ev->peer);
	}
	mutex_unlock(&dl_borrowers_lock);
	return NOTIFY_OK;
}

static struct notifier_block dl_borrower_nb = {
	.notifier_call = dl_borrower_event,
};

/**
 * dl_borrower_init() - set up the borrower side.
 *
 * Without the VFIO and mdev modules loaded, the borrower stays off and the
 * rest of the module works as before.
 *
 * Return: 0 or -errno.
 */
int dl_borrower_init(void)
{
	int ret;

	if (!mdev_register_driver || !_vfio_alloc_device ||
	    !vfio_pin_pages) {
		pr_info("devlend: borrower off: load vfio_iommu_type1 and mdev before devlend\n");
		return 0;
	}
	ret = dl_parent_driver_register();
	if (ret)
		return ret;
	ret = dl_fabric_register_notifier(&dl_borrower_nb);
	if (ret)
		goto err_unregister_driver;
	dl_borrower_enabled = true;
	return 0;

err_unregister_driver:
	dl_parent_driver_unregister();
	return ret;
}

/**
 * dl_borrower_exit() - tear the borrower side down.
 *
 * Called after the fabric's adapters are gone, so every borrower has seen
 * %DL_FABRIC_EV_REMOVING.
 */
void dl_borrower_exit(void)
{
	if (!dl_borrower_enabled)
		return;
	dl_fabric_unregister_notifier(&dl_borrower_nb);
	dl_parent_driver_unregister();
	dl_borrower_enabled = false;
}
