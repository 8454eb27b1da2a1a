// SPDX-License-Identifier: GPL-2.0
/*
 * devlend lender: module-level setup and the fabric notifier, the top of
 * the lender: it wires the other files together and nothing calls it.
 *
 * The lender offers local PCI devices to borrowers across the fabric (see
 * docs/lending.md). The devlend-lender PCI driver (driver.c) holds each
 * lent device, isolated in an IOMMU domain of its own; msg.c answers what
 * borrowers ask; cfg.c, dma.c and irq.c check and carry out config writes,
 * DMA mappings and interrupt vectors; slow.c takes devices back and does
 * what may block off the fabric's works; peers.c tells peers. Nothing a
 * peer sends is trusted.
 */
#include <linux/list.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>

#include "internal.h"

/* See internal.h; taken by dl_lent_reclaim(). */
atomic_t dl_fault_reclaim_reset_fails = ATOMIC_INIT(0);
static int dl_fault_param_set(const char *val, const struct kernel_param *kp)
{
	int n, ret = kstrtoint(val, 0, &n);

	if (ret || n < 0)
		return ret ?: -EINVAL;
	atomic_set(&dl_fault_reclaim_reset_fails, n);
	return 0;
}

static int dl_fault_param_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&dl_fault_reclaim_reset_fails));
}

static const struct kernel_param_ops dl_fault_param_ops = {
	.set = dl_fault_param_set,
	.get = dl_fault_param_get,
};
module_param_cb(fault_reclaim_reset_fails, &dl_fault_param_ops, NULL, 0644);
MODULE_PARM_DESC(fault_reclaim_reset_fails,
		 "Tests only: the next N take-backs find the function reset failed, as if the device had not come back (0: none)");

/* See internal.h; read by p2p_remote.c. */
bool dl_fault_p2p_revoke_ignore;
module_param_named(fault_p2p_revoke_ignore, dl_fault_p2p_revoke_ignore, bool,
		   0644);
MODULE_PARM_DESC(fault_p2p_revoke_ignore,
		 "Tests only: leave other lenders' P2P revocations unanswered and drop nothing (0: off)");

/* See internal.h; read by p2p_remote.c. */
unsigned int dl_fault_p2p_lookup_stall_ms;
module_param_named(fault_p2p_lookup_stall_ms, dl_fault_p2p_lookup_stall_ms,
		   uint, 0644);
MODULE_PARM_DESC(fault_p2p_lookup_stall_ms,
		 "Tests only: answer other lenders' P2P lookups this many ms late, holding up the receive work as a stalled host would (at most 10000; 0: off)");

/* See internal.h; read by migrate.c at each quiesce. */
bool dl_fault_mig_unsettled;
module_param_named(fault_mig_unsettled, dl_fault_mig_unsettled, bool, 0644);
MODULE_PARM_DESC(fault_mig_unsettled,
		 "Tests only: devices quiesced for a migration never settle, as one that keeps interrupting would not (0: off)");

static int dl_lender_fabric_add(struct dl_fabric *fab, void **ctx)
{
	struct dl_lender_fab *lf;
	int ret;

	lf = kzalloc(sizeof(*lf), GFP_KERNEL);
	if (!lf)
		return -ENOMEM;
	lf->fab = fab;
	/* Outside dl_lender.lock: registering waits for running handlers. */
	ret = dl_lender_register_handlers(fab);
	if (ret)
		goto err_free;
	ret = dl_lender_register_p2p(fab);
	if (ret)
		goto err_unregister;
	mutex_lock(&dl_lender.lock);
	list_add_tail(&lf->node, &dl_lender.fabs);
	mutex_unlock(&dl_lender.lock);
	*ctx = lf;
	return 0;

err_unregister:
	dl_lender_unregister_handlers(fab);
err_free:
	kfree(lf);
	return ret;
}

static void dl_lender_fabric_remove(struct dl_fabric *fab, void *ctx)
{
	struct dl_lender_fab *lf = ctx;

	mutex_lock(&dl_lender.lock);
	list_del(&lf->node);
	mutex_unlock(&dl_lender.lock);

	/*
	 * Nothing may be held through @fab afterwards: when the fabric goes,
	 * its peers are down already; when the lender goes, every device
	 * was taken back before.
	 */
	dl_lender_fabric_removing(fab);
	dl_lender_unregister_p2p(fab);
	dl_lender_unregister_handlers(fab);
	dl_lender_flush_slow();
	kfree(lf);
}

static void dl_lender_peer_event(struct dl_fabric *fab, void *ctx,
				 enum dl_fabric_event_type type, u32 peer,
				 u16 proto)
{
	if (type == DL_FABRIC_EV_PEER_DOWN)
		dl_lender_peer_down(fab, peer);
}

static struct dl_fabric_client dl_lender_client = {
	.name = "lender",
	.add = dl_lender_fabric_add,
	.remove = dl_lender_fabric_remove,
	.peer_event = dl_lender_peer_event,
};

/*
 * The lender serves every fabric of this host: the same devices are
 * offered on each, and a device is held through one fabric at a time.
 */
static int __init dl_lender_init(void)
{
	int ret;

	dl_lender_debugfs_add();
	ret = dl_fabric_client_register(&dl_lender_client);
	if (ret)
		goto err_debugfs_remove;
	ret = dl_lender_driver_init();
	if (ret)
		goto err_unregister_client;
	return 0;

err_unregister_client:
	dl_fabric_client_unregister(&dl_lender_client);
err_debugfs_remove:
	dl_lender_debugfs_remove();
	return ret;
}

/* Every lent device is taken back and returned to its own driver first. */
static void __exit dl_lender_exit(void)
{
	dl_lender_driver_exit();
	dl_fabric_client_unregister(&dl_lender_client);
	/* No peer event comes any more: the last walk it queued is done. */
	dl_lender_p2p_flush();
	dl_lender_debugfs_remove();
}

module_init(dl_lender_init);
module_exit(dl_lender_exit);

MODULE_DESCRIPTION("devlend lender: offers this host's PCI devices to borrowers across the fabric");
MODULE_LICENSE("GPL");
