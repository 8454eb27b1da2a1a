// SPDX-License-Identifier: GPL-2.0
/*
 * The lender's slow path: taking a device back (dl_lent_reclaim()), and
 * each device's slow work, which does what may block off the fabric's
 * receive and liveness works.
 *
 * A function reset may take long (up to a minute on real hardware): done
 * in the receive work it would hold up every message of every peer, and
 * in the liveness work every peer's liveness. So DEV_RELEASE, DEV_RESET
 * and a config write asking for function-level reset are only checked by
 * their handlers (msg.c) and queued here, and a holder that went down
 * only has its devices marked (dl_lender_peer_down()); the device's
 * slow_work (one per device, so a device's requests stay in order) does
 * the reset or the take-back under the device's locks and answers. Every
 * take-back (release, peer down, fabric removed, unlend, module unload)
 * goes through dl_lent_reclaim().
 *
 * Below the message handlers (msg.c), the PCI driver (driver.c) and the
 * module's wiring (main.c); above what it undoes (bar.c, cfg.c, dma.c,
 * irq.c), the table of devices (lent.c) and peers.c, which tells peers.
 */
#include <linux/delay.h>
#include <linux/pci.h>
#include <linux/workqueue.h>

#include "internal.h"

/**
 * dl_lent_reclaim() - take a device back from its borrower, if any, and
 * make it available again.
 * @lent: the device; its device lock and @lent->lock held.
 * @why: for the log.
 *
 * Bus mastering goes off first, then the vectors and mappings go; the
 * function is reset and the config state saved at probe is restored. The
 * caller tells peers (dl_lender_broadcast_changed()) once it has let go
 * of its locks.
 */
void dl_lent_reclaim(struct dl_lent *lent, const char *why)
{
	struct pci_dev *pdev = lent->pdev;
	bool bus_reset;
	int ret;

	device_lock_assert(&pdev->dev);
	lockdep_assert_held(&lent->lock);

	/* Before anything: no member of its group is taken meanwhile. */
	bus_reset = dl_lent_group_defer_reset(lent);
	if (lent->borrower != DL_NO_HOST)
		pci_info_ratelimited(pdev,
				     "lender: taking device %u back from host %u: %s\n",
				     lent->dev_id, lent->borrower, why);
	dl_lent_fast_close(lent);
	atomic_inc(&lent->slow_holds);
	lent->state = DL_LENT_RETURNING;

	pci_clear_master(pdev);
	dl_lent_mig_forget(lent);
	dl_lent_irq_release(lent);
	dl_lent_unmap_all(lent);
	/* Before the reset: nobody else may reach its BARs after it. */
	dl_lent_p2p_revoke_target(lent);
	dl_lent_p2p_exports_revoke(lent);
	dl_lent_bar_windows_revoke(lent);

	/* A member of a group with no reset of its own: its bus's, later. */
	ret = bus_reset ? 0 : dl_lent_reset(lent);
	if (!ret && atomic_add_unless(&dl_fault_reclaim_reset_fails, -1, 0))
		ret = -EIO;
	if (ret)
		dev_warn_ratelimited(&pdev->dev,
				     "lender: function reset failed: %d; device %u is lent to nobody until it is lent again\n",
				     ret, lent->dev_id);
	pci_load_saved_state(pdev, lent->saved);
	pci_restore_state(pdev);
	dl_lent_cfg_restore(lent);
	pci_read_config_word(pdev, PCI_COMMAND, &lent->cmd);
	/* The next holder finds INTx not disabled, as after a reset. */
	dl_lent_intx_vdisable(lent, false);

	lent->borrower = DL_NO_HOST;
	lent->borrower_inc = 0;
	lent->fab = NULL;
	/*
	 * A function that did not reset may still hold the last holder's
	 * queues, data and DMA addresses: it goes to nobody else. Unlending
	 * and lending it again (a new probe) is the administrator's call.
	 */
	lent->state = ret ? DL_LENT_FAILED : DL_LENT_AVAILABLE;
	if (pdev->is_virtfn)
		pci_clear_dev_assigned(pdev);
	dl_lent_group_reset_queue(lent);
	atomic_dec(&lent->slow_holds);
}

/**
 * dl_lent_slow_queue() - queue the device's slow work, with a reference
 *	for it.
 * @lent: the device.
 */
void dl_lent_slow_queue(struct dl_lent *lent)
{
	kref_get(&lent->ref);
	if (!queue_work(system_unbound_wq, &lent->slow_work))
		dl_lent_put(lent);	/* queued already, with its own */
}

/*
 * The slow request, under the device's locks; true if the device changed
 * hands. Its holder may have gone (and the device been taken back) since
 * it was queued: then the answer says it holds nothing.
 */
static bool dl_lent_slow_request(struct dl_lent *lent, int *err,
				 struct dl_mig_ticket *ticket, size_t *resp_len)
{
	const struct dl_fabric_msg *msg = &lent->slow_msg;

	if (lent->dead) {
		*err = -ENODEV;
		return false;
	}
	if (!dl_lent_is_holder(lent, lent->slow_fab, msg->peer)) {
		*err = lent->state == DL_LENT_AVAILABLE ? -EINVAL : -EBUSY;
		return false;
	}
	if (msg->type == DL_MSG_DEV_RELEASE) {
		dl_lent_count(lent, DL_LCNT_RELEASES);
		pci_info_ratelimited(lent->pdev,
				     "lender: device %u returned by host %u\n",
				     lent->dev_id, msg->peer);
		dl_lent_reclaim(lent, "released");
		*err = 0;
		return true;
	}
	if (msg->type == DL_MSG_MIG_QUIESCE) {
		*err = dl_lent_mig_quiesce(lent, &lent->mig_req, ticket);
		if (!*err)
			*resp_len = sizeof(*ticket);
		return false;
	}
	/* DEV_RESET, or a config write with function-level reset. */
	*err = dl_lent_reset(lent);
	/* A group member only its bus's reset resets (DL_DEV_F_NO_RESET). */
	if (*err && *err != -EOPNOTSUPP) {
		dev_warn_ratelimited(&lent->pdev->dev,
				     "lender: reset failed: %d\n", *err);
		*err = -EIO;
	}
	return false;
}

/**
 * dl_lent_slow_work() - take the device back from a holder that went
 *	down, and do a queued DEV_RELEASE, DEV_RESET or MIG_QUIESCE and
 *	answer it.
 * @work: &dl_lent.slow_work, queued by dl_lent_slow_queue().
 *
 * If the device lock is taken (the device is being removed, which cancels
 * this work, or a sysfs write), it queues itself again rather than wait.
 */
void dl_lent_slow_work(struct work_struct *work)
{
	struct dl_lent *lent = container_of(work, struct dl_lent, slow_work);
	struct dl_mig_ticket ticket;
	bool changed = false, answer;
	size_t resp_len = 0;
	int err = 0;

	if (!device_trylock(&lent->pdev->dev)) {
		usleep_range(1000, 2000);
		dl_lent_slow_queue(lent);
		dl_lent_put(lent);
		return;
	}
	mutex_lock(&lent->lock);
	if (test_and_clear_bit(DL_LENT_SLOW_RECLAIM, &lent->slow_busy) &&
	    !lent->dead && lent->state != DL_LENT_AVAILABLE &&
	    !dl_lent_is_holder(lent, lent->fab, lent->borrower)) {
		dl_lent_count(lent, DL_LCNT_RECLAIMS);
		dl_lent_reclaim(lent, "borrower went down");
		changed = true;
	}
	answer = test_bit(DL_LENT_SLOW_BUSY, &lent->slow_busy);
	if (answer)
		changed |= dl_lent_slow_request(lent, &err, &ticket, &resp_len);
	clear_bit(DL_LENT_SLOW_BUSY, &lent->slow_busy);
	dl_lent_fast_update(lent);
	mutex_unlock(&lent->lock);
	device_unlock(&lent->pdev->dev);

	if (answer)
		dl_lender_respond(lent->slow_fab, &lent->slow_msg, err,
				  resp_len ? &ticket : NULL, resp_len);
	if (changed)
		dl_lender_broadcast_changed(lent->dev_id);
	dl_lent_put(lent);
}

/**
 * dl_lent_slow_cancel() - forget what the slow work was to do (a queued
 *	request goes unanswered: its requester times out) and wait for it.
 * @lent: the device, going away; its device lock held.
 */
void dl_lent_slow_cancel(struct dl_lent *lent)
{
	if (cancel_work_sync(&lent->slow_work))
		dl_lent_put(lent);
	if (cancel_work_sync(&lent->changed_work))
		dl_lent_put(lent);
	if (cancel_work_sync(&lent->p2p_work))
		dl_lent_put(lent);
	if (cancel_work_sync(&lent->p2p_fence_work))
		dl_lent_put(lent);
	WRITE_ONCE(lent->slow_busy, 0);
}

/* Walks the devices without allocating: a take-back must not fail. */
static void dl_lender_reclaim_from(struct dl_fabric *fab, u32 peer,
				   bool any_peer, const char *why)
{
	unsigned long idx = 0;
	struct dl_lent *lent;

	while ((lent = dl_lent_next(&idx))) {
		bool changed = false;

		device_lock(&lent->pdev->dev);
		mutex_lock(&lent->lock);
		if (!lent->dead && lent->state != DL_LENT_AVAILABLE &&
		    lent->fab == fab && (any_peer || lent->borrower == peer)) {
			dl_lent_count(lent, DL_LCNT_RECLAIMS);
			dl_lent_reclaim(lent, why);
			changed = true;
		}
		mutex_unlock(&lent->lock);
		device_unlock(&lent->pdev->dev);
		if (changed)
			dl_lender_broadcast_changed(lent->dev_id);
		dl_lent_put(lent);
	}
}

/**
 * dl_lender_peer_down() - a peer went away: have what it held taken back.
 * @fab: the fabric.
 * @peer: the peer.
 *
 * Called from the fabric notifier (the liveness work, fabric lock held), so
 * it only marks the devices and queues their slow work.
 */
void dl_lender_peer_down(struct dl_fabric *fab, u32 peer)
{
	unsigned long idx = 0;
	struct dl_lent *lent;

	/*
	 * No lock here: a device's locks may be held for as long as it
	 * resets, and this runs in the liveness work. A device that looks
	 * held by @peer is marked; its slow work takes it back under its
	 * locks, if the holder is still gone, and meanwhile the device takes
	 * no holder request.
	 *
	 * The link reads down before we read the holders; pairs with the
	 * barrier in dl_serve_acquire(), which names the holder before it
	 * reads the link again.
	 */
	smp_mb();
	/* What this host mapped onto the peer's BARs, for other holders. */
	dl_lender_p2p_peer_down();
	while ((lent = dl_lent_next(&idx))) {
		if (READ_ONCE(lent->fab) == fab &&
		    READ_ONCE(lent->borrower) == peer &&
		    READ_ONCE(lent->state) != DL_LENT_AVAILABLE) {
			dl_lent_slow_mark(lent, DL_LENT_SLOW_RECLAIM);
			dl_lent_slow_queue(lent);
		}
		dl_lent_put(lent);
	}
}

/**
 * dl_lender_fabric_removing() - the fabric is going away: nothing may be
 * held through it afterwards.
 * @fab: the fabric.
 */
void dl_lender_fabric_removing(struct dl_fabric *fab)
{
	unsigned long idx = 0;
	struct dl_lent *lent;

	dl_lender_reclaim_from(fab, 0, true, "fabric removed");
	dl_lender_p2p_flush();
	while ((lent = dl_lent_next(&idx))) {
		flush_work(&lent->p2p_fence_work);
		mutex_lock(&lent->lock);
		dl_lent_p2p_fence_forget(lent, fab);
		mutex_unlock(&lent->lock);
		dl_lent_put(lent);
	}
}

/**
 * dl_lender_flush_slow() - wait for every device's slow request to be
 *	answered (they hold a fabric pointer) and its peers told.
 *
 * Called once no handler can queue one any more. The slow work queues
 * itself again while someone else holds the device lock, and one
 * flush_work() waits only for the run under way: flushed until it was
 * idle, or a run queued during the flush would answer through a fabric
 * that is gone.
 */
void dl_lender_flush_slow(void)
{
	unsigned long idx = 0;
	struct dl_lent *lent;

	while ((lent = dl_lent_next(&idx))) {
		while (flush_work(&lent->slow_work))
			;
		flush_work(&lent->changed_work);
		flush_work(&lent->p2p_work);
		flush_work(&lent->p2p_fence_work);
		dl_lent_put(lent);
	}
}
