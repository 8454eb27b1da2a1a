// SPDX-License-Identifier: GPL-2.0
/*
 * What the lender sends to peers of its own accord or after the fact: the
 * answers to requests (dl_lender_respond(), for the receive work and for
 * the device's slow work), and DEV_CHANGED, broadcast on every fabric
 * served when a device changed (lent, taken, given back, no longer lent,
 * lent to other hosts), which tells peers to ask again.
 *
 * Below the message handlers (msg.c), the slow work (slow.c) and the PCI
 * driver (driver.c), which all tell peers; main.c keeps the list of
 * fabrics served (dl_lender.fabs) that the broadcast walks.
 */
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/workqueue.h>

#include "internal.h"

/**
 * dl_lender_respond() - answer a request, if its sender asked for an answer.
 * @fab: the fabric it came on.
 * @msg: the request.
 * @err: 0 or the -errno to answer.
 * @data: the answer's payload, sent only with @err 0.
 * @len: its length.
 *
 * An answer that cannot be sent is logged (rate-limited): its requester
 * times out, as after any lost answer.
 */
void dl_lender_respond(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		       int err, const void *data, size_t len)
{
	if (!msg->req_id)
		return;
	if (dl_fabric_respond(fab, msg, err, err ? NULL : data, err ? 0 : len))
		dev_dbg_ratelimited(dl_fabric_device(fab),
				    "lender: response to host %u not sent\n",
				    msg->peer);
}

/**
 * dl_lender_broadcast_changed() - tell every up peer, on every fabric,
 *	that a device changed.
 * @dev_id: the device (it may be gone: peers then learn ENODEV).
 *
 * Might sleep. Must not be called with dl_lender.lock held.
 */
void dl_lender_broadcast_changed(u32 dev_id)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(dev_id) };
	struct dl_lender_fab *lf;
	u32 self, peer, n;

	mutex_lock(&dl_lender.lock);
	list_for_each_entry(lf, &dl_lender.fabs, node) {
		self = dl_fabric_host_id(lf->fab);
		n = dl_fabric_max_hosts(lf->fab);
		for (peer = 0; peer < n; peer++) {
			if (peer == self || !dl_fabric_link_is_up(lf->fab, peer))
				continue;
			if (dl_fabric_send(lf->fab, peer, DL_MSG_DEV_CHANGED,
					   &ref, sizeof(ref)))
				dev_dbg_ratelimited(dl_fabric_device(lf->fab),
						    "lender: DEV_CHANGED %u to peer %u not sent\n",
						    dev_id, peer);
		}
	}
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
