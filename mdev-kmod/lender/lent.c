// SPDX-License-Identifier: GPL-2.0
/*
 * The lent devices: the table of them (dl_lender.devs), the references a
 * lookup takes, and who holds a device.
 *
 * The lowest file of the lender: every other one finds devices here and
 * nothing here calls them. A device is in the table from its probe
 * (driver.c) until its removal; a lookup takes a reference (&dl_lent.ref)
 * and must still check &dl_lent.dead under the device's locks.
 */
#include <linux/kref.h>
#include <linux/pci.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>

#include "internal.h"

struct dl_lender dl_lender = {
	.lock = __MUTEX_INITIALIZER(dl_lender.lock),
	.fabs = LIST_HEAD_INIT(dl_lender.fabs),
	.devs = XARRAY_INIT(dl_lender.devs, 0),
	.next_id = 1,
};

static void dl_lent_free(struct kref *ref)
{
	struct dl_lent *lent = container_of(ref, struct dl_lent, ref);

	pci_dev_put(lent->pdev);
	/* The doorbell interrupt may still look at it (bar.c). */
	kfree_rcu(lent, rcu);
}

/**
 * dl_lent_put() - drop a reference taken by dl_lent_get().
 * @lent: the device.
 */
void dl_lent_put(struct dl_lent *lent)
{
	kref_put(&lent->ref, dl_lent_free);
}

/**
 * dl_lent_get() - look a lent device up by its dev_id.
 * @dev_id: from a peer; anything.
 *
 * The caller must still check @lent->dead under its locks.
 *
 * Return: the device with a reference held, or NULL.
 */
struct dl_lent *dl_lent_get(u32 dev_id)
{
	struct dl_lent *lent;

	xa_lock(&dl_lender.devs);
	lent = xa_load(&dl_lender.devs, dev_id);
	if (lent && !kref_get_unless_zero(&lent->ref))
		lent = NULL;
	xa_unlock(&dl_lender.devs);
	return lent;
}

/**
 * dl_lent_next() - walk the lent devices without allocating.
 * @idx: where to start; moved past the device returned.
 *
 * Return: the lent device with the lowest dev_id >= *@idx, with a
 * reference held (dl_lent_put()), or NULL at the end.
 */
struct dl_lent *dl_lent_next(unsigned long *idx)
{
	struct dl_lent *lent;

	xa_lock(&dl_lender.devs);
	for (;;) {
		lent = xa_find(&dl_lender.devs, idx, ULONG_MAX, XA_PRESENT);
		if (!lent || kref_get_unless_zero(&lent->ref))
			break;
		(*idx)++;
	}
	xa_unlock(&dl_lender.devs);
	if (lent)
		(*idx)++;
	return lent;
}

/**
 * dl_lent_is_holder() - whether a peer holds the device.
 * @lent: the device; @lent->lock held.
 * @fab: the fabric the peer is on.
 * @peer: the peer.
 *
 * Return: true if @peer on @fab acquired the device and is still the
 * incarnation that did.
 */
bool dl_lent_is_holder(struct dl_lent *lent, struct dl_fabric *fab, u32 peer)
{
	struct dl_fabric_peer_info info;

	lockdep_assert_held(&lent->lock);

	if (lent->state != DL_LENT_BORROWED || lent->borrower != peer ||
	    lent->fab != fab)
		return false;
	/* A new incarnation of the holder holds nothing. */
	return !dl_fabric_peer_info(fab, peer, &info) && info.up &&
	       info.incarnation == lent->borrower_inc;
}
