// SPDX-License-Identifier: GPL-2.0
/*
 * Leases: what a lender may still reach of this host's memory, and giving
 * its devices back when it can be reached again.
 *
 * The DMA ownership rule (docs/lending.md): no page goes back to this
 * host's allocator while a lender's IOMMU mapping may still reach it.
 * VFIO insists that an mdev unpins whatever dma_unmap() names, at once
 * and whether or not the lender answered; so a page whose unmap the
 * lender did not acknowledge is unpinned for VFIO but kept by a reference
 * of our own, in the quarantine of the lease it was mapped under.
 *
 * One lease stands for one borrow of one remote device (host, dev_id,
 * the lender's incarnation). It is created before DL_MSG_DEV_ACQUIRE is
 * sent and lives until the lender has said it holds nothing for us any
 * more; only then is it "settled" and its quarantine let go. The lender
 * says so by answering DL_MSG_DEV_RELEASE (done, or: we are not the
 * holder, because it took the device back, it lent it to someone else,
 * or it no longer lends it), or by coming back as a new incarnation (a
 * restarted lender holds no mapping of the old one). A lease that cannot
 * settle when its mdev lets go is "unreturned": the release work sends
 * DL_MSG_DEV_RELEASE again whenever the lender is up, until it settles.
 * Nothing else settles a lease: a peer declared down may only be stalled,
 * and come back with its mappings and its device's queues intact.
 *
 * While a lease of a device is unreturned, the device is not borrowed
 * again (a late release would take it from the new borrow). A lender that
 * never comes back keeps its leases' pages quarantined for good: memory
 * lost, but never memory written behind its new owner's back. The
 * counters and pages are in debugfs (devlend/borrower).
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "internal.h"

/* How often an unreturned lease is tried again while its lender is up. */
#define DL_LEASE_RETRY_MS	1000

/* Pages per quarantine chunk: the chunk fills one page. */
#define DL_QCHUNK_PAGES \
	((PAGE_SIZE - sizeof(struct list_head) - sizeof(unsigned int)) / \
	 sizeof(struct page *))

/**
 * struct dl_qchunk - some quarantined pages, each held by a reference.
 * @node: in &dl_lease.quarantine.
 * @n: pages in @pages.
 * @pages: the pages.
 */
struct dl_qchunk {
	struct list_head node;
	unsigned int n;
	struct page *pages[DL_QCHUNK_PAGES];
};

/**
 * dl_lease_new() - a lease for a borrow about to be asked for.
 * @b: the borrower.
 * @host: the lender.
 * @dev_id: the lender's handle of the device.
 * @incarnation: the lender's incarnation the device was listed by.
 *
 * Return: the lease, or an ERR_PTR: -EBUSY while an earlier borrow of the
 * device is still to be returned, -ENOSPC while the quarantine is full
 * (dl_quarantine_max_pages), -ENOMEM.
 */
struct dl_lease *dl_lease_new(struct dl_borrower *b, u32 host, u32 dev_id,
			      u64 incarnation)
{
	unsigned long cap = READ_ONCE(dl_quarantine_max_pages) ?:
			    totalram_pages() / 4;
	struct dl_lease *l;

	mutex_lock(&b->lock);
	if (b->nquarantined >= cap) {
		b->quarantine_refusals++;
		mutex_unlock(&b->lock);
		dev_err_ratelimited(b->dev,
				    "no new borrow: lenders may still reach %lu quarantined pages of this host (quarantine_max_pages %lu); they go when the lenders return them\n",
				    b->nquarantined, cap);
		return ERR_PTR(-ENOSPC);
	}
	list_for_each_entry(l, &b->leases, node) {
		if (l->host == host && l->dev_id == dev_id &&
		    l->incarnation == incarnation && !l->settled) {
			mutex_unlock(&b->lock);
			mod_delayed_work(system_wq, &b->release_work, 0);
			return ERR_PTR(-EBUSY);
		}
	}
	l = kzalloc(sizeof(*l), GFP_KERNEL);
	if (!l) {
		mutex_unlock(&b->lock);
		return ERR_PTR(-ENOMEM);
	}
	l->host = host;
	l->dev_id = dev_id;
	l->incarnation = incarnation;
	INIT_LIST_HEAD(&l->quarantine);
	INIT_LIST_HEAD(&l->qwin);
	list_add_tail(&l->node, &b->leases);
	mutex_unlock(&b->lock);
	return l;
}

/**
 * dl_lease_quarantine() - keep a page the lender may still reach.
 * @b: the borrower; caller holds b->lock.
 * @l: the lease the page was mapped under, not settled.
 * @page: the page, still pinned; the caller unpins it afterwards.
 *
 * Cannot fail: VFIO's dma_unmap() cannot either.
 */
void dl_lease_quarantine(struct dl_borrower *b, struct dl_lease *l,
			 struct page *page)
{
	struct dl_qchunk *c = NULL;

	lockdep_assert_held(&b->lock);

	if (!list_empty(&l->quarantine))
		c = list_last_entry(&l->quarantine, struct dl_qchunk, node);
	if (!c || c->n == DL_QCHUNK_PAGES) {
		c = kzalloc(sizeof(*c), GFP_KERNEL | __GFP_NOFAIL);
		list_add_tail(&c->node, &l->quarantine);
	}
	get_page(page);
	c->pages[c->n++] = page;
	l->nquarantined++;
	b->nquarantined++;
	b->quarantined_total++;
}

/**
 * struct dl_qwin - window space of quarantined pages: the lender may still
 *	reach them through it, so it is not handed out again either.
 * @node: in &dl_lease.qwin.
 * @addr: the address the lender was given.
 * @len: bytes.
 */
struct dl_qwin {
	struct list_head node;
	u64 addr;
	u64 len;
};

/**
 * dl_lease_quarantine_win() - keep window space the lender may still reach.
 * @b: the borrower; caller holds b->lock.
 * @l: the lease it was handed out under, not settled.
 * @addr: its address (dl_fabric_inbound_map()).
 * @len: bytes.
 *
 * Cannot fail: what cannot be recorded is leaked, never handed out again.
 */
void dl_lease_quarantine_win(struct dl_borrower *b, struct dl_lease *l,
			     u64 addr, u64 len)
{
	struct dl_qwin *q = NULL;

	lockdep_assert_held(&b->lock);

	if (!list_empty(&l->qwin))
		q = list_last_entry(&l->qwin, struct dl_qwin, node);
	if (q && q->addr + q->len == addr) {
		q->len += len;
		return;
	}
	/* Without memory to note it, it stays handed out for good. */
	q = kzalloc(sizeof(*q), GFP_KERNEL);
	if (!q)
		return;
	q->addr = addr;
	q->len = len;
	list_add_tail(&q->node, &l->qwin);
}

/* Frees a lease nobody uses; caller holds b->lock. */
static void dl_lease_free(struct dl_borrower *b, struct dl_lease *l)
{
	lockdep_assert_held(&b->lock);

	list_del(&l->node);
	kfree(l);
}

/**
 * dl_lease_settle() - the lender holds nothing for this lease any more:
 *	let its quarantine go.
 * @b: the borrower; caller holds b->lock.
 * @l: the lease; freed if its mdev has let go of it.
 * @why: for the log, if pages were quarantined.
 */
void dl_lease_settle(struct dl_borrower *b, struct dl_lease *l,
		     const char *why)
{
	struct dl_qchunk *c, *tmp;
	struct dl_qwin *q, *qtmp;
	unsigned int i;

	lockdep_assert_held(&b->lock);

	/* The window space first: the pages are still ours meanwhile. */
	list_for_each_entry_safe(q, qtmp, &l->qwin, node) {
		dl_fabric_inbound_unmap(b->fab, l->host, q->addr, q->len);
		list_del(&q->node);
		kfree(q);
	}
	if (l->nquarantined)
		dev_info_ratelimited(b->dev,
				     "remote device %u:%u: %lu quarantined pages released (%s)\n",
				     l->host, l->dev_id, l->nquarantined, why);
	list_for_each_entry_safe(c, tmp, &l->quarantine, node) {
		for (i = 0; i < c->n; i++)
			put_page(c->pages[i]);
		list_del(&c->node);
		kfree(c);
	}
	b->nquarantined -= l->nquarantined;
	l->nquarantined = 0;
	if (l->unreturned)
		b->returned_late++;
	l->settled = true;
	l->unreturned = false;
	if (l->orphaned && !l->busy)
		dl_lease_free(b, l);
}

/**
 * dl_lease_return_later() - have the release work return the device.
 * @b: the borrower; caller holds b->lock.
 * @l: the lease.
 */
void dl_lease_return_later(struct dl_borrower *b, struct dl_lease *l)
{
	lockdep_assert_held(&b->lock);

	if (l->settled || l->unreturned)
		return;
	l->unreturned = true;
	mod_delayed_work(system_wq, &b->release_work, 0);
}

/**
 * dl_lease_put() - the mdev lets go of its lease.
 * @b: the borrower; caller holds b->lock.
 * @l: the lease: settled, or it is returned later.
 */
void dl_lease_put(struct dl_borrower *b, struct dl_lease *l)
{
	lockdep_assert_held(&b->lock);

	l->orphaned = true;
	if (!l->settled)
		dl_lease_return_later(b, l);
	else if (!l->busy)
		dl_lease_free(b, l);
}

/**
 * dl_lease_answer_settles() - whether the lender's answer to
 *	DL_MSG_DEV_RELEASE says it holds nothing for us.
 * @ret: the result of the request.
 *
 * 0: returned. -EINVAL: nobody holds it (the lender took it back);
 * -EBUSY: another host does; -ENODEV: it is no longer lent;
 * -EOPNOTSUPP: the host runs no lender any more (its lender took every
 * device back before it stopped answering). Each time the lender has
 * reset the device and removed our mappings first. Anything else
 * (time-out, link down, no room) says nothing.
 *
 * Return: true if the lease may settle.
 */
bool dl_lease_answer_settles(int ret)
{
	return !ret || ret == -EINVAL || ret == -EBUSY || ret == -ENODEV ||
	       ret == -EOPNOTSUPP;
}

/* Whether @l is to be tried in this pass of the release work. */
static bool dl_lease_due(struct dl_lease *l, u64 pass)
{
	return !l->settled && l->unreturned && !l->busy && l->pass != pass;
}

/**
 * dl_lease_release_work() - return the devices of unreturned leases whose
 *	lender is up; settle those whose lender restarted.
 * @work: &dl_borrower.release_work.
 */
void dl_lease_release_work(struct work_struct *work)
{
	struct dl_borrower *b = container_of(to_delayed_work(work),
					     struct dl_borrower, release_work);
	struct dl_fabric_peer_info pi;
	struct dl_dev_ref ref = {};
	bool again = false;
	struct dl_lease *l;
	u64 pass;
	int ret;

	mutex_lock(&b->lock);
	pass = ++b->release_pass;
restart:
	list_for_each_entry(l, &b->leases, node) {
		if (!dl_lease_due(l, pass))
			continue;
		l->pass = pass;
		if (dl_fabric_peer_info(b->fab, l->host, &pi) || !pi.up) {
			/* Tried again when the lender comes up. */
			continue;
		}
		if (pi.incarnation != l->incarnation) {
			dl_lease_settle(b, l, "the lender restarted");
			goto restart;
		}
		l->busy = true;
		ref.dev_id = cpu_to_le32(l->dev_id);
		mutex_unlock(&b->lock);
		ret = dl_fabric_request_urgent(b->fab, l->host,
					       DL_MSG_DEV_RELEASE, &ref,
					       sizeof(ref), DL_B_TIMEOUT_MS);
		mutex_lock(&b->lock);
		l->busy = false;
		l->tries++;
		if (dl_lease_answer_settles(ret)) {
			dev_info_ratelimited(b->dev,
					     "remote device %u:%u returned to its lender after %u tries (%d)\n",
					     l->host, l->dev_id, l->tries, ret);
			/* Its state changed on the lender: read it again. */
			if (l->host < BITS_PER_LONG && !b->dying) {
				__set_bit(l->host, &b->scan_pending);
				queue_work(system_unbound_wq, &b->scan_work);
			}
			dl_lease_settle(b, l, "the lender let go of it");
		} else {
			again = true;
			dev_dbg_ratelimited(b->dev,
					    "remote device %u:%u: return failed: %d; trying again\n",
					    l->host, l->dev_id, ret);
		}
		/* The list may have changed while it was unlocked. */
		goto restart;
	}
	if (again && !b->dying)
		mod_delayed_work(system_wq, &b->release_work,
				 msecs_to_jiffies(DL_LEASE_RETRY_MS));
	mutex_unlock(&b->lock);
}

/**
 * dl_lease_peer_up() - a lender came up: try its unreturned leases now.
 * @b: the borrower.
 */
void dl_lease_peer_up(struct dl_borrower *b)
{
	mod_delayed_work(system_wq, &b->release_work, 0);
}

/**
 * dl_lease_teardown() - the borrower goes away: drop every lease.
 * @b: the borrower, whose mdevs are gone.
 *
 * Pages still quarantined are never given back: a lender may reach them
 * yet, and nobody is left to hear it let go. They are leaked, and said so.
 */
void dl_lease_teardown(struct dl_borrower *b)
{
	struct dl_lease *l, *tmp;
	struct dl_qchunk *c, *ctmp;

	cancel_delayed_work_sync(&b->release_work);
	mutex_lock(&b->lock);
	list_for_each_entry_safe(l, tmp, &b->leases, node) {
		if (l->nquarantined)
			dev_warn(b->dev,
				 "remote device %u:%u was never returned: %lu pages its lender may still reach are leaked\n",
				 l->host, l->dev_id, l->nquarantined);
		list_for_each_entry_safe(c, ctmp, &l->quarantine, node) {
			list_del(&c->node);
			kfree(c);
		}
		dl_lease_free(b, l);
	}
	mutex_unlock(&b->lock);
}

/**
 * dl_lease_show() - the leases and their quarantine, for debugfs.
 * @s: the file.
 * @b: the borrower; caller holds b->lock.
 *
 * One line per lease, then one "q <phys> <pages>" line per run of
 * physically contiguous quarantined pages.
 */
void dl_lease_show(struct seq_file *s, struct dl_borrower *b)
{
	phys_addr_t start = 0, next = 0;
	unsigned long run = 0;
	struct dl_qchunk *c;
	struct dl_lease *l;
	unsigned int i;

	lockdep_assert_held(&b->lock);

	list_for_each_entry(l, &b->leases, node) {
		seq_printf(s, "lease host=%u dev_id=%u incarnation=%llu settled=%d unreturned=%d orphaned=%d tries=%u quarantined=%lu\n",
			   l->host, l->dev_id, l->incarnation, l->settled,
			   l->unreturned, l->orphaned, l->tries,
			   l->nquarantined);
		list_for_each_entry(c, &l->quarantine, node) {
			for (i = 0; i < c->n; i++) {
				phys_addr_t p = page_to_phys(c->pages[i]);

				if (run && p == next) {
					run++;
					next += PAGE_SIZE;
					continue;
				}
				if (run)
					seq_printf(s, "q %#llx %lu\n",
						   (u64)start, run);
				start = p;
				next = p + PAGE_SIZE;
				run = 1;
			}
		}
		if (run)
			seq_printf(s, "q %#llx %lu\n", (u64)start, run);
		run = 0;
	}
}
