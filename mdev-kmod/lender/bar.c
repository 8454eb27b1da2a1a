// SPDX-License-Identifier: GPL-2.0
/*
 * BAR accesses of lent devices: the checks every access passes, the
 * access itself, and posted writes done in the doorbell interrupt.
 *
 * Every guest I/O costs a doorbell write (an NVMe submission queue tail,
 * a NIC's transmit tail). Done by the receive work, it waits for a worker
 * to be scheduled on the lender; done in the doorbell interrupt that
 * announced it, it reaches the device at once. The interrupt may do it
 * only in the plain case, decided under the device's fast_lock:
 *  - the gate is open: the device is borrowed, decodes memory, relays no
 *    INTx (whose EOI on BAR accesses may sleep), and no reset, take-back
 *    or removal is due (dl_lent_fast_update());
 *  - the message comes from the holder: same fabric, host and incarnation;
 *  - the access passes dl_lent_bar_verdict(), as in the work.
 * Anything else stays in the ring for the receive work, which checks and
 * answers it as before (and counts any refusal): the interrupt never
 * refuses, so it cannot refuse what the work would have done.
 *
 * Ordering: the interrupt takes a peer's messages only from the head of
 * its ring and only while the receive work does not run (the fabric's
 * rx_lock and rx_busy), so a BAR write is done after every message before
 * it and before every message after it, as in the work. The work's
 * handlers change what the gate depends on only while the interrupt cannot
 * take messages, and reopen it (dl_lender_close()); everything else that
 * makes a write unsafe (a reset, a take-back, the holder going down,
 * removal) closes the gate under fast_lock first, which also waits for a
 * write in progress.
 */
#include <linux/io.h>
#include <linux/pci.h>
#include <linux/rcupdate.h>

#include "internal.h"

static bool dl_overlaps(u64 a, u64 a_end, u64 b, u64 b_end)
{
	return a < b_end && b < a_end;
}

/**
 * dl_lent_bar_verdict() - whether a BAR access may reach the device.
 * @lent: the device; its @lock or @fast_lock held.
 * @a: the access, from a peer: anything.
 * @why: if not NULL, set to the reason of a refusal.
 *
 * Counts nothing: the caller does.
 *
 * Return: 0, or -EINVAL (range, alignment, MSI-X table or PBA),
 * -EOPNOTSUPP (a BAR not mapped, such as I/O), -EIO (memory decode off).
 */
int dl_lent_bar_verdict(struct dl_lent *lent, const struct dl_bar_access *a,
			enum dl_lender_reject *why)
{
	u64 off = le64_to_cpu(a->offset);
	const struct dl_lent_bar *bar;
	enum dl_lender_reject r;
	int err;

	if (a->reserved || a->bar >= DL_NUM_BARS ||
	    (a->size != 1 && a->size != 2 && a->size != 4 && a->size != 8) ||
	    off % a->size) {
		r = DL_REJ_BAR_RANGE;
		err = -EINVAL;
		goto out_refuse;
	}
	bar = &lent->bars[a->bar];
	if (!bar->size || a->size > bar->size || off > bar->size - a->size) {
		r = DL_REJ_BAR_RANGE;
		err = -EINVAL;
		goto out_refuse;
	}
	if (!bar->map) {
		r = DL_REJ_BAR_RANGE;
		err = -EOPNOTSUPP;
		goto out_refuse;
	}
	if ((a->bar == lent->msix_bar &&
	     dl_overlaps(off, off + a->size, lent->msix_start, lent->msix_end)) ||
	    (a->bar == lent->pba_bar &&
	     dl_overlaps(off, off + a->size, lent->pba_start, lent->pba_end))) {
		r = DL_REJ_BAR_MSIX;
		err = -EINVAL;
		goto out_refuse;
	}
	/* With decode off an access could fault the host (CVE-2020-12888). */
	if (!(lent->cmd & PCI_COMMAND_MEMORY)) {
		r = DL_REJ_BAR_DECODE;
		err = -EIO;
		goto out_refuse;
	}
	return 0;

out_refuse:
	if (why)
		*why = r;
	return err;
}

/**
 * dl_lent_bar_read() - read from a BAR.
 * @lent: the device.
 * @a: an access dl_lent_bar_verdict() allowed.
 *
 * Return: the value read.
 */
u64 dl_lent_bar_read(struct dl_lent *lent, const struct dl_bar_access *a)
{
	void __iomem *p = lent->bars[a->bar].map + le64_to_cpu(a->offset);

	switch (a->size) {
	case 1:
		return readb(p);
	case 2:
		return readw(p);
	case 4:
		return readl(p);
	default:
		return readq(p);
	}
}

/**
 * dl_lent_bar_write() - write to a BAR.
 * @lent: the device.
 * @a: an access dl_lent_bar_verdict() allowed; its value is written.
 */
void dl_lent_bar_write(struct dl_lent *lent, const struct dl_bar_access *a)
{
	void __iomem *p = lent->bars[a->bar].map + le64_to_cpu(a->offset);
	u64 val = le64_to_cpu(a->value);

	switch (a->size) {
	case 1:
		writeb(val, p);
		break;
	case 2:
		writew(val, p);
		break;
	case 4:
		writel(val, p);
		break;
	default:
		writeq(val, p);
		break;
	}
}

/* The page-rounded span of [@start, @end) of a BAR, for a window to skip. */
static void dl_lent_bar_skip(struct dl_fabric_span *sp, u64 start, u64 end)
{
	sp->start = round_down(start, PAGE_SIZE);
	sp->end = round_up(end, PAGE_SIZE);
}

/**
 * dl_lent_bar_window() - show a memory BAR to the holder through a window
 *	of the fabric (%DL_MSG_BAR_WINDOW), so that its accesses need no
 *	message; or tell it again where the window is.
 * @lent: the device; @lent->lock held; @peer is its holder on @fab.
 * @fab: the holder's fabric.
 * @peer: the holder.
 * @bar: the BAR, from the holder: anything.
 * @token: set to the window's name for the holder.
 * @len: set to the bytes of the BAR it shows, from the BAR's start.
 *
 * The MSI-X table and PBA pages are kept out of the window (the backend
 * refuses if it cannot): the lender alone writes the table, so the
 * holder's writes to it stay relayed and checked. The window is the
 * holder's until dl_lent_bar_windows_revoke().
 *
 * Return: 0; -EINVAL (not a BAR of the device); -EOPNOTSUPP (an I/O BAR,
 * or the backend cannot show it); -ENOSPC (no window room).
 */
int dl_lent_bar_window(struct dl_lent *lent, struct dl_fabric *fab, u32 peer,
		       unsigned int bar, u64 *token, u64 *len)
{
	struct dl_fabric_span skip[2];
	unsigned int nskip = 0;
	struct dl_lent_bar *b;
	int ret;

	lockdep_assert_held(&lent->lock);

	ret = dl_lent_mem_bar(lent, bar, &b);
	if (ret)
		return ret;
	if (!b->win) {
		if (lent->msix_bar == bar)
			dl_lent_bar_skip(&skip[nskip++], lent->msix_start,
					 lent->msix_end);
		if (lent->pba_bar == bar)
			dl_lent_bar_skip(&skip[nskip++], lent->pba_start,
					 lent->pba_end);
		ret = dl_fabric_bar_expose(fab, peer, lent->pdev, bar,
					   nskip ? skip : NULL, nskip,
					   &b->win_token, &b->win_len);
		if (ret)
			return ret;
		b->win = true;
		dl_lent_count(lent, DL_LCNT_BAR_WINDOWS);
		pci_info_ratelimited(lent->pdev,
				     "lender: BAR%u (%llu bytes) shown to host %u through the fabric\n",
				     bar, b->win_len, peer);
	}
	*token = b->win_token;
	*len = b->win_len;
	return 0;
}

/**
 * dl_lent_bar_windows_revoke() - take back every BAR window of the holder,
 *	before the device goes to anyone else.
 * @lent: the device; @lent->lock held, its holder still recorded.
 *
 * Where the backend can (NTB), the holder's accesses through them then
 * reach nothing of this host. The holder zaps its own mappings when it
 * gives the device back or loses it (docs/lending.md).
 */
void dl_lent_bar_windows_revoke(struct dl_lent *lent)
{
	struct dl_lent_bar *b;
	int i;

	lockdep_assert_held(&lent->lock);

	for (i = 0; i < DL_NUM_BARS; i++) {
		b = &lent->bars[i];
		if (!b->win)
			continue;
		if (lent->fab)
			dl_fabric_bar_revoke(lent->fab, lent->borrower,
					     b->win_token, b->win_len);
		b->win = false;
		dl_lent_count(lent, DL_LCNT_BAR_WINDOW_REVOKES);
	}
}

/**
 * dl_lent_fast_update() - open or close the gate of BAR writes from the
 *	doorbell interrupt after the device's state changed.
 * @lent: the device; @lent->lock held.
 */
void dl_lent_fast_update(struct dl_lent *lent)
{
	unsigned long flags;

	lockdep_assert_held(&lent->lock);

	spin_lock_irqsave(&lent->fast_lock, flags);
	/* slow_busy is read here: dl_lent_slow_mark() sets it in here. */
	lent->fast_open = !lent->dead && lent->state == DL_LENT_BORROWED &&
			  lent->fab && !READ_ONCE(lent->slow_busy) &&
			  !atomic_read(&lent->slow_holds) &&
			  (lent->cmd & PCI_COMMAND_MEMORY) &&
			  !dl_lent_intx_ends_on_access(lent);
	lent->fast_fab = lent->fab;
	lent->fast_peer = lent->borrower;
	lent->fast_epoch = lower_32_bits(lent->borrower_inc);
	spin_unlock_irqrestore(&lent->fast_lock, flags);
}

/**
 * dl_lent_fast_close() - close the gate: when this returns, no BAR write
 *	from the doorbell interrupt is in progress, and none starts until
 *	dl_lent_fast_update() opens it again.
 * @lent: the device.
 *
 * Any context but the doorbell interrupt.
 */
void dl_lent_fast_close(struct dl_lent *lent)
{
	unsigned long flags;

	spin_lock_irqsave(&lent->fast_lock, flags);
	lent->fast_open = false;
	spin_unlock_irqrestore(&lent->fast_lock, flags);
}

/**
 * dl_lent_slow_mark() - mark a reset or take-back as due (a bit of
 *	&dl_lent.slow_busy) and close the gate, as one step against
 *	dl_lent_fast_update().
 * @lent: the device; with or without @lent->lock.
 * @bit: DL_LENT_SLOW_BUSY or DL_LENT_SLOW_RECLAIM.
 */
void dl_lent_slow_mark(struct dl_lent *lent, unsigned int bit)
{
	unsigned long flags;

	spin_lock_irqsave(&lent->fast_lock, flags);
	set_bit(bit, &lent->slow_busy);
	lent->fast_open = false;
	spin_unlock_irqrestore(&lent->fast_lock, flags);
}

/**
 * dl_lender_on_bar_write_atomic() - a posted %DL_MSG_BAR_WRITE in the
 *	doorbell interrupt: do it if the gate is open and it comes from the
 *	holder; else leave it to the receive work.
 * @fab: the fabric.
 * @msg: the message.
 * @priv: unused.
 *
 * Return: true if the write was done.
 */
bool dl_lender_on_bar_write_atomic(struct dl_fabric *fab,
				   const struct dl_fabric_msg *msg, void *priv)
{
	struct dl_bar_access a;
	struct dl_lent *lent;
	bool done = false;

	if (msg->len != sizeof(a))
		return false;
	memcpy(&a, msg->data, sizeof(a));

	/* The device is freed after a grace period (dl_lent_free()). */
	rcu_read_lock();
	lent = xa_load(&dl_lender.devs, le32_to_cpu(a.dev_id));
	if (lent) {
		spin_lock(&lent->fast_lock);
		if (lent->fast_open && lent->fast_fab == fab &&
		    lent->fast_peer == msg->peer &&
		    lent->fast_epoch == msg->epoch &&
		    !dl_lent_bar_verdict(lent, &a, NULL)) {
			dl_lent_bar_write(lent, &a);
			dl_lent_count(lent, DL_LCNT_BAR_WRITES);
			dl_lent_count(lent, DL_LCNT_BAR_WRITES_IN_IRQ);
			done = true;
		}
		spin_unlock(&lent->fast_lock);
	}
	rcu_read_unlock();
	return done;
}
