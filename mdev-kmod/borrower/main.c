// SPDX-License-Identifier: GPL-2.0
/*
 * devlend borrower (devlend_borrower.ko): module setup and fabric events.
 *
 * The borrower is a fabric client. For each fabric it registers the mdev
 * parent on the adapter, its remote/ directory and the handlers of what lenders post
 * (device changes, interrupts, faults). Peer up and DEV_CHANGED queue a
 * scan of that lender's devices (remote.c); peer down marks them gone and
 * fails the mdevs that hold one. When the fabric or the module goes away,
 * everything is undone in reverse; unregistering the parent removes every mdev,
 * waiting for their users to close them.
 */
#include <linux/jiffies.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "internal.h"

/* See internal.h; read by dma.c each time it pins a chunk. */
bool dl_bulk_pin = true;
module_param_named(bulk_pin, dl_bulk_pin, bool, 0644);
MODULE_PARM_DESC(bulk_pin,
		 "Pin guests' memory in bulk from their KVM memslots, anchored by VFIO (default on); off: page by page through VFIO");

/* See internal.h; read by lease.c at each borrow. */
unsigned long dl_quarantine_max_pages;
module_param_named(quarantine_max_pages, dl_quarantine_max_pages, ulong, 0644);
MODULE_PARM_DESC(quarantine_max_pages,
		 "Pages that lenders may still reach in quarantine on a fabric before new borrows through it are refused (0, the default: a quarter of this host's RAM)");

/* See internal.h; read by dma.c at each map of window space. */
unsigned long dl_window_max_pages;
module_param_named(window_max_pages, dl_window_max_pages, ulong, 0644);
MODULE_PARM_DESC(window_max_pages,
		 "Window space one mdev may hold in a lender's bounded window onto this host, in pages (0, the default: what the window has)");

/* See internal.h; read by irq.c at each unmask. */
unsigned int dl_fault_intx_unmask_every;
module_param_named(fault_intx_unmask_every, dl_fault_intx_unmask_every,
		   uint, 0644);
MODULE_PARM_DESC(fault_intx_unmask_every,
		 "Tests only: every Nth INTx unmask finds the lender's ring full (0: never)");

/* See internal.h; read by vdev.c at each dma_unmap(). */
unsigned int dl_fault_unmap_delay_ms;
module_param_named(fault_unmap_delay_ms, dl_fault_unmap_delay_ms, uint, 0644);
MODULE_PARM_DESC(fault_unmap_delay_ms,
		 "Tests only: each dma_unmap() from VFIO returns this many ms late, as one that waits on a slow lender (0: at once)");

/* See internal.h; read by migrate.c when a migrated-in device resumes. */
unsigned int dl_fault_mig_resume_delay_ms;
module_param_named(fault_mig_resume_delay_ms, dl_fault_mig_resume_delay_ms,
		   uint, 0644);
MODULE_PARM_DESC(fault_mig_resume_delay_ms,
		 "Tests only: a device taken over by a migration is resumed this many ms late, when its guest is to run (at most 60000; 0: at once)");

/* See internal.h; read by irq.c when MSI-X is enabled. */
bool dl_direct_irq;
module_param_named(direct_irq, dl_direct_irq, bool, 0644);
MODULE_PARM_DESC(direct_irq,
		 "Have lent devices' MSI-X vectors ring this host's doorbells themselves, with no lender CPU per interrupt, where the lender and the fabric can (default off: relayed by the lender)");

/* See internal.h; read by migrate.c at each quiesce. */
unsigned int dl_mig_settle_ms = 250;
module_param_named(mig_settle_ms, dl_mig_settle_ms, uint, 0644);
MODULE_PARM_DESC(mig_settle_ms,
		 "Live migration: how long a lent device must show no interrupt and no pending transaction before its lender stops its DMA (default 250)");

/* See internal.h; read by migrate.c at each quiesce. */
unsigned int dl_mig_timeout_ms = 3000;
module_param_named(mig_timeout_ms, dl_mig_timeout_ms, uint, 0644);
MODULE_PARM_DESC(mig_timeout_ms,
		 "Live migration: how long the lender waits for a device to settle before the migration fails back to the source (default 3000, at most 10000)");

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

static void dl_borrower_unregister_handlers(struct dl_borrower *b,
					    unsigned int n)
{
	while (n--)
		dl_fabric_unregister_handler(b->fab, dl_borrower_msgs[n]);
}

static int dl_borrower_add(struct dl_fabric *fab, void **ctx)
{
	struct dl_borrower *b;
	unsigned int i;
	int ret;

	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		return -ENOMEM;
	b->fab = fab;
	b->dev = dl_fabric_device(fab);
	b->host_id = dl_fabric_host_id(fab);
	mutex_init(&b->lock);
	spin_lock_init(&b->fire_lock);
	INIT_LIST_HEAD(&b->remotes);
	INIT_LIST_HEAD(&b->vdevs);
	mutex_init(&b->p2p_lock);
	INIT_LIST_HEAD(&b->p2p_vdevs);
	INIT_LIST_HEAD(&b->p2p_groups);
	INIT_LIST_HEAD(&b->p2p_maps);
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
	*ctx = b;
	return 0;

err_unregister_handlers:
	dl_borrower_unregister_handlers(b, i);
	dl_remote_remove_all(b);
err_free:
	dev_err(b->dev, "borrower: cannot set up on this adapter: %d\n", ret);
	kfree(b);
	return ret;
}

static void dl_borrower_remove(struct dl_fabric *fab, void *ctx)
{
	struct dl_borrower *b = ctx;

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

static void dl_borrower_peer_event(struct dl_fabric *fab, void *ctx,
				   enum dl_fabric_event_type type, u32 peer,
				   u16 proto)
{
	struct dl_borrower *b = ctx;

	if (type == DL_FABRIC_EV_PEER_UP) {
		dl_remote_peer_up(b, peer);
		dl_lease_peer_up(b);
	} else if (type == DL_FABRIC_EV_PEER_DOWN) {
		dl_remote_peer_down(b, peer);
	}
}

/* A window onto lenders' BARs is going away: no mdev may map into it. */
static void dl_borrower_bar_window_lost(struct dl_fabric *fab, void *ctx,
					phys_addr_t phys, u64 len)
{
	struct dl_borrower *b = ctx;
	struct dl_vdev *v;

	mutex_lock(&b->lock);
	list_for_each_entry(v, &b->vdevs, node)
		dl_mmap_window_lost(v, phys, len);
	mutex_unlock(&b->lock);
}

struct dl_fabric_client dl_borrower_client = {
	.name = "borrower",
	.add = dl_borrower_add,
	.remove = dl_borrower_remove,
	.peer_event = dl_borrower_peer_event,
	.bar_window_lost = dl_borrower_bar_window_lost,
};

static int __init dl_borrower_init(void)
{
	int ret;

	ret = dl_parent_driver_register();
	if (ret)
		return ret;
	dl_borrower_debugfs_add();
	ret = dl_fabric_client_register(&dl_borrower_client);
	if (ret)
		goto err_unregister_driver;
	return 0;

err_unregister_driver:
	dl_borrower_debugfs_remove();
	dl_parent_driver_unregister();
	return ret;
}

/*
 * Unregistering the client removes every mdev, waiting until their users
 * have closed them, and returns the devices to their lenders.
 */
static void __exit dl_borrower_exit(void)
{
	dl_fabric_client_unregister(&dl_borrower_client);
	dl_borrower_debugfs_remove();
	dl_parent_driver_unregister();
}

module_init(dl_borrower_init);
module_exit(dl_borrower_exit);

MODULE_DESCRIPTION("devlend borrower: remote PCI devices as VFIO mediated devices");
MODULE_LICENSE("GPL");
