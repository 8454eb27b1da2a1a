// SPDX-License-Identifier: GPL-2.0
/*
 * devlend lender: module-level setup, the fabric notifier, and telling
 * peers that a device changed.
 *
 * The lender offers local PCI devices to borrowers across the fabric (see
 * docs/lending.md). The devlend-lender PCI driver (driver.c) holds each
 * lent device, isolated in an IOMMU domain of its own; msg.c answers what
 * borrowers ask; cfg.c, dma.c and irq.c check and carry out config writes,
 * DMA mappings and interrupt vectors. Nothing a peer sends is trusted.
 */
#include <linux/mutex.h>
#include <linux/notifier.h>

#include "lender.h"
#include "internal.h"

struct dl_lender dl_lender = {
	.lock = __MUTEX_INITIALIZER(dl_lender.lock),
	.devs = XARRAY_INIT(dl_lender.devs, 0),
	.next_id = 1,
};

/**
 * dl_lender_broadcast_changed() - tell every up peer that a device changed.
 * @dev_id: the device (it may be gone: peers then learn ENODEV).
 *
 * Might sleep. Must not be called with dl_lender.lock held.
 */
void dl_lender_broadcast_changed(u32 dev_id)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(dev_id) };
	struct dl_fabric *fab;
	u32 self, peer, n;

	mutex_lock(&dl_lender.lock);
	fab = dl_lender.fab;
	if (!fab)
		goto out_unlock;
	self = dl_fabric_host_id(fab);
	n = dl_fabric_max_hosts(fab);
	for (peer = 0; peer < n; peer++) {
		if (peer == self || !dl_fabric_link_is_up(fab, peer))
			continue;
		if (dl_fabric_send(fab, peer, DL_MSG_DEV_CHANGED, &ref,
				   sizeof(ref)))
			dev_dbg_ratelimited(dl_fabric_device(fab),
					    "lender: DEV_CHANGED %u to peer %u not sent\n",
					    dev_id, peer);
	}
out_unlock:
	mutex_unlock(&dl_lender.lock);
}

/**
 * dl_lent_changed_work() - tell peers that the device changed hands.
 * @work: &dl_lent.changed_work, queued by dl_lent_changed_queue().
 */
void dl_lent_changed_work(struct work_struct *work)
{
	struct dl_lent *lent = container_of(work, struct dl_lent, changed_work);

	dl_lender_broadcast_changed(lent->dev_id);
	dl_lent_put(lent);
}

/**
 * dl_lent_changed_queue() - have peers told, off the caller's path, that
 *	the device changed hands.
 * @lent: the device.
 *
 * For handlers in the receive work: a posted send may wait for ring room,
 * and the receive work must not. Changes close together are told once,
 * which is enough: DEV_CHANGED only says "ask again".
 */
void dl_lent_changed_queue(struct dl_lent *lent)
{
	kref_get(&lent->ref);
	if (!queue_work(system_unbound_wq, &lent->changed_work))
		dl_lent_put(lent);	/* queued already, with its own */
}

static void dl_lender_fabric_added(struct dl_fabric *fab)
{
	int ret;

	mutex_lock(&dl_lender.lock);
	if (dl_lender.fab) {
		mutex_unlock(&dl_lender.lock);
		dev_warn(dl_fabric_device(fab),
			 "lender: already serving a fabric; not this one\n");
		return;
	}
	mutex_unlock(&dl_lender.lock);

	/* Outside dl_lender.lock: registering waits for running handlers. */
	ret = dl_lender_register_handlers(fab);
	if (ret) {
		dev_err(dl_fabric_device(fab),
			"lender: cannot register message handlers: %d\n", ret);
		return;
	}
	mutex_lock(&dl_lender.lock);
	dl_lender.fab = fab;
	mutex_unlock(&dl_lender.lock);
	dl_lender_debugfs_add();
}

static void dl_lender_fabric_removed(struct dl_fabric *fab)
{
	mutex_lock(&dl_lender.lock);
	if (dl_lender.fab != fab) {
		mutex_unlock(&dl_lender.lock);
		return;
	}
	dl_lender.fab = NULL;
	mutex_unlock(&dl_lender.lock);

	dl_lender_debugfs_remove();
	/* Every peer is down already, so no device is held through @fab. */
	dl_lender_fabric_removing(fab);
	dl_lender_unregister_handlers(fab);
	dl_lender_flush_slow();
}

static int dl_lender_fabric_event(struct notifier_block *nb,
				  unsigned long type, void *data)
{
	struct dl_fabric_event *ev = data;

	switch (type) {
	case DL_FABRIC_EV_ADDED:
		dl_lender_fabric_added(ev->fab);
		break;
	case DL_FABRIC_EV_REMOVING:
		dl_lender_fabric_removed(ev->fab);
		break;
	case DL_FABRIC_EV_PEER_DOWN:
		dl_lender_peer_down(ev->fab, ev->peer);
		break;
	default:
		break;
	}
	return NOTIFY_OK;
}

static struct notifier_block dl_lender_nb = {
	.notifier_call = dl_lender_fabric_event,
};

/**
 * dl_lender_init() - set up the lender side: the fabric notifier (message
 * handlers are registered when a fabric is added) and the PCI driver.
 *
 * Return: 0 or -errno.
 */
int dl_lender_init(void)
{
	int ret;

	ret = dl_fabric_register_notifier(&dl_lender_nb);
	if (ret)
		return ret;
	ret = dl_lender_driver_init();
	if (ret)
		goto err_unregister_notifier;
	return 0;

err_unregister_notifier:
	dl_fabric_unregister_notifier(&dl_lender_nb);
	return ret;
}

/**
 * dl_lender_exit() - tear the lender side down: every lent device is taken
 * back and returned to its own driver.
 */
void dl_lender_exit(void)
{
	struct dl_fabric *fab;

	dl_lender_driver_exit();

	mutex_lock(&dl_lender.lock);
	fab = dl_lender.fab;
	dl_lender.fab = NULL;
	mutex_unlock(&dl_lender.lock);
	if (fab) {
		dl_lender_debugfs_remove();
		dl_lender_unregister_handlers(fab);
	}
	dl_fabric_unregister_notifier(&dl_lender_nb);
}
