// SPDX-License-Identifier: GPL-2.0
/*
 * Live migration of a holder's guest, on the lender (docs/migration.md):
 * quiescing the device for its holder, handing it to the migration's
 * destination for the ticket the quiesce gave, and resuming it.
 *
 * Quiesce (%DL_MSG_MIG_QUIESCE, from the slow work: it waits). The holder's
 * guest is stopped, so nothing new is submitted to the device; what was
 * submitted completes, with an interrupt. The settle rule (dl_mig_rules.h)
 * waits until, for the settle time the holder asks for, no interrupt was
 * relayed and PCIe Device Status showed no pending transaction; then bus
 * mastering goes off at the device, and the lender waits for what was
 * pending to drain. It holds for devices whose DMA follows their driver's
 * submissions (NVMe, AHCI, a NIC's transmit side). A device that keeps
 * interrupting (a NIC receiving a flood) does not settle in time: the
 * holder is told -ETIMEDOUT and the device runs on, untouched. Direct
 * MSI-X vectors (irq.c) ring the holder without the lender: for those
 * only the pending bit counts.
 *
 * The ticket answers a quiesce: a random number only the lender and the
 * holder know, which the holder puts in its guest's migration stream. It
 * is void once used, once the device resumes, and when the device is
 * taken back. Until the device resumes, the holder's config writes and
 * resets are refused (-EBUSY): either could turn bus mastering back on.
 *
 * Takeover (%DL_MSG_MIG_TAKEOVER): the destination presents the ticket.
 * The lender checks that the device is quiesced for that ticket, that it
 * is held by the host the destination names, and that the destination is
 * another host, up, that the device is lent to. Then everything the old
 * holder had (its memory mapped for DMA, its vectors, its BAR windows,
 * other devices' mappings of the BARs) goes, as at a take-back but
 * without a reset: the device keeps its queues and state, which is the
 * point. Only then does the destination become the holder, so that "not
 * the holder" still means "holds nothing of yours" to the old one (the
 * DMA ownership rule of docs/lending.md). Bus mastering stays off until
 * the new holder has mapped its memory and resumes the device.
 */
#include <linux/delay.h>
#include <linux/pci.h>
#include <linux/random.h>

#include "internal.h"
#include "../include/dl_mig_rules.h"

/* How often the settle rule looks at the device. */
#define DL_MIG_LOOK_MS		2
/* Most time for what was pending to drain once bus mastering is off. */
#define DL_MIG_DRAIN_MS		100

/* Interrupts relayed for the device so far. */
static u64 dl_mig_fires(struct dl_lent *lent)
{
	return atomic64_read(&lent->cnt[DL_LCNT_IRQ_FIRES]) +
	       atomic64_read(&lent->cnt[DL_LCNT_IRQ_FIRE_ERRORS]);
}

/* Whether PCIe Device Status says a transaction is pending. */
static bool dl_mig_pending(struct pci_dev *pdev)
{
	u16 sta;

	if (!pci_is_pcie(pdev) ||
	    pcie_capability_read_word(pdev, PCI_EXP_DEVSTA, &sta))
		return false;
	return sta & PCI_EXP_DEVSTA_TRPND;
}

/**
 * dl_lent_mig_quiesce() - wait for the device to settle, then stop its
 *	DMA, for its holder's migration.
 * @lent: the device; its device lock and @lent->lock held, the requester
 *	checked as holder. From the slow work.
 * @q: the request, checked by dl_settle_args_ok().
 * @t: the answer, filled on success.
 *
 *
 * Return: 0, or -ETIMEDOUT if it did not settle (nothing changed).
 */
int dl_lent_mig_quiesce(struct dl_lent *lent, const struct dl_mig_quiesce *q,
			struct dl_mig_ticket *t)
{
	struct pci_dev *pdev = lent->pdev;
	enum dl_settle_verdict v;
	struct dl_settle s;
	unsigned long end;
	u64 faked = 0;
	u16 cmd;

	device_lock_assert(&pdev->dev);
	lockdep_assert_held(&lent->lock);

	t->dev_id = cpu_to_le32(lent->dev_id);
	/*
	 * Quiesced already: a repeated request (its answer lost) gets the
	 * same ticket; a holder that took the device over by migration and
	 * migrates on before it resumed it gets a new one.
	 */
	if (lent->mig_quiesced) {
		if (!lent->mig_ticket)
			lent->mig_ticket = get_random_u64() ?: 1;
		t->waited_ms = 0;
		t->ticket = cpu_to_le64(lent->mig_ticket);
		return 0;
	}
	dl_settle_start(&s, jiffies_to_msecs(jiffies), dl_mig_fires(lent),
			le32_to_cpu(q->settle_ms), le32_to_cpu(q->timeout_ms));
	do {
		msleep(DL_MIG_LOOK_MS);
		/* Tests: a device that fires at every look never settles. */
		if (READ_ONCE(dl_fault_mig_unsettled))
			faked++;
		v = dl_settle_look(&s, jiffies_to_msecs(jiffies),
				   dl_mig_fires(lent) + faked,
				   dl_mig_pending(pdev));
	} while (v == DL_SETTLE_WAIT);
	t->waited_ms = cpu_to_le32(jiffies_to_msecs(jiffies) - s.start_ms);
	if (v == DL_SETTLE_TIMEOUT) {
		dl_lent_count(lent, DL_LCNT_MIG_UNSETTLED);
		pci_info_ratelimited(pdev,
				     "lender: device %u did not settle in %u ms for host %u's migration\n",
				     lent->dev_id, s.timeout_ms, lent->borrower);
		return -ETIMEDOUT;
	}

	pci_read_config_word(pdev, PCI_COMMAND, &cmd);
	lent->mig_master = cmd & PCI_COMMAND_MASTER;
	pci_clear_master(pdev);
	end = jiffies + msecs_to_jiffies(DL_MIG_DRAIN_MS);
	while (dl_mig_pending(pdev) && time_before(jiffies, end))
		msleep(DL_MIG_LOOK_MS);
	lent->mig_quiesced = true;
	lent->mig_ticket = get_random_u64() ?: 1;
	t->ticket = cpu_to_le64(lent->mig_ticket);
	dl_lent_count(lent, DL_LCNT_MIG_QUIESCES);
	pci_info_ratelimited(pdev,
			     "lender: device %u quiesced for host %u's migration after %u ms\n",
			     lent->dev_id, lent->borrower,
			     le32_to_cpu(t->waited_ms));
	return 0;
}

/**
 * dl_lent_mig_resume() - bus mastering back as the holder had it: its
 *	guest runs (the migration's destination), or runs again (a failed
 *	migration's source). The ticket is void.
 * @lent: the device; @lent->lock held, the requester checked as holder.
 *
 * Return: 0, also for a device not quiesced (a repeated request).
 */
int dl_lent_mig_resume(struct dl_lent *lent)
{
	lockdep_assert_held(&lent->lock);

	if (!lent->mig_quiesced)
		return 0;
	if (lent->mig_master)
		pci_set_master(lent->pdev);
	dl_lent_mig_forget(lent);
	dl_lent_count(lent, DL_LCNT_MIG_RESUMES);
	return 0;
}

/**
 * dl_lent_mig_forget() - the device is no longer quiesced for a migration:
 *	resumed, or taken back (which restores its command register).
 * @lent: the device; @lent->lock held.
 */
void dl_lent_mig_forget(struct dl_lent *lent)
{
	lockdep_assert_held(&lent->lock);

	lent->mig_quiesced = false;
	lent->mig_master = false;
	lent->mig_ticket = 0;
}

/**
 * dl_lent_mig_takeover() - make the migration's destination the holder.
 * @lent: the device; its device lock and @lent->lock held.
 * @fab: the fabric the request came on.
 * @peer: the destination.
 * @t: the request, from the peer.
 *
 * Return: 0; -EBUSY if the device is not quiesced for this ticket, not
 * held by @t->from_host, or in a lent group; -EINVAL if @peer is the
 * holder or not up; -ENOTCONN if @peer went down once it was made the
 * holder (the device is to be taken back from it).
 */
int dl_lent_mig_takeover(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
			 const struct dl_mig_takeover *t)
{
	struct dl_fabric_peer_info pinfo;
	u32 from = le32_to_cpu(t->from_host);

	device_lock_assert(&lent->pdev->dev);
	lockdep_assert_held(&lent->lock);

	if (!lent->mig_quiesced || !lent->mig_ticket ||
	    le64_to_cpu(t->ticket) != lent->mig_ticket ||
	    !dl_lent_is_holder(lent, fab, from) || lent->grp) {
		dl_lent_reject(lent, DL_REJ_MIG);
		pci_info_ratelimited(lent->pdev,
				     "lender: host %u's takeover of device %u from host %u refused (no such quiesce)\n",
				     peer, lent->dev_id, from);
		return -EBUSY;
	}
	if (peer == from || dl_fabric_peer_info(fab, peer, &pinfo) ||
	    !pinfo.up) {
		dl_lent_reject(lent, DL_REJ_MIG);
		return -EINVAL;
	}

	/* Used: a replayed takeover finds no ticket. */
	lent->mig_ticket = 0;
	/* Nothing of the old holder's is left before the new one holds it. */
	dl_lent_fast_close(lent);
	dl_lent_irq_release(lent);
	dl_lent_unmap_all(lent);
	dl_lent_p2p_revoke_target(lent);
	dl_lent_p2p_exports_revoke(lent);
	dl_lent_bar_windows_revoke(lent);

	lent->borrower = peer;
	lent->borrower_inc = pinfo.incarnation;
	lent->fab = fab;
	/*
	 * As at an acquire: the new holder may have gone down meanwhile, and
	 * its take-back have walked the devices before it was named holder.
	 * The caller then has the slow work take the device back.
	 */
	smp_mb();
	if (dl_fabric_peer_info(fab, peer, &pinfo) || !pinfo.up ||
	    pinfo.incarnation != lent->borrower_inc)
		return -ENOTCONN;
	dl_lent_holder_publish(lent);
	dl_lent_changed_queue(lent);
	dl_lent_count(lent, DL_LCNT_MIG_TAKEOVERS);
	pci_info_ratelimited(lent->pdev,
			     "lender: device %u handed from host %u to host %u (%s) by migration\n",
			     lent->dev_id, from, peer, pinfo.name);
	return 0;
}
