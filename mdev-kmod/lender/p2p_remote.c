// SPDX-License-Identifier: GPL-2.0
/*
 * Peer-to-peer between devices of two lenders (case 3 of docs/p2p.md):
 * device X of this lender DMAs to a memory BAR of device Y of lender L2,
 * both held by one holder, through this host's window of the fabric onto
 * Y's BAR.
 *
 * Three messages, so that each host decides only about what it owns:
 *  - %DL_MSG_P2P_EXPORT, holder to L2: show Y's BAR to this lender. L2
 *    checks the holder holds Y and opens the window (the fabric's
 *    BAR-window mechanism, as for %DL_MSG_BAR_WINDOW).
 *  - %DL_MSG_P2P_LOOKUP, this lender to L2, when the holder asks for the
 *    mapping (%DL_MSG_P2P_DMA naming L2): where is that window, for that
 *    holder? L2 answers only while the holder it names, in the same
 *    incarnation, holds Y and exported it to the asker; so neither a
 *    holder nor another lender can point X at a window shown for anyone
 *    else.
 *  - %DL_MSG_P2P_REVOKE, L2 to this lender, at every take-back of Y and
 *    before Y's reset: drop every mapping onto Y. L2 waits for the answer
 *    (bounded). The emulated fabric's windows are files that stay shared,
 *    so there the answer is what keeps X from Y after it changed hands
 *    (on NTB hardware closing the inbound window would too): a lender
 *    that is up and does not answer fences Y, which nobody may take until
 *    that lender answers a REVOKE asked again, goes down or restarts.
 * A peer that goes down or restarts loses what this lender mapped onto
 * its BARs (dl_lender_p2p_peer_down()).
 *
 * Nothing waits for another host in the fabric's receive work: the answer
 * would come through that work. The holder's request is served by X's
 * p2p_work, which asks L2 without X's locks, then maps under them if X
 * is still held by the same holder and no revocation came meanwhile
 * (dl_p2p_revoke_gen, read before asking, checked under X's p2p_lock).
 * L2 asks this lender only from a take-back, whose device is marked so
 * that L2's receive work does not wait for its locks; and this lender's
 * REVOKE handler takes only leaf locks. So no wait goes round between
 * two lenders.
 */
#include <linux/delay.h>
#include <linux/jiffies.h>
#include <linux/pci.h>
#include <linux/workqueue.h>

#include "internal.h"

/* How long this lender waits for another's answer to a REVOKE. */
#define DL_P2P_ASK_MS	2000
/*
 * And to a LOOKUP: the holder waits DL_FABRIC_REQ_TIMEOUT_MS for the
 * answer to its P2P_DMA, which waits for the LOOKUP. Half leaves it the
 * other half, so that a stalled lender makes this lender answer "no" in
 * time, and never map what the holder has given up on.
 */
#define DL_P2P_LOOKUP_MS	(DL_FABRIC_REQ_TIMEOUT_MS / 2)

/**
 * dl_lent_p2p_dma_remote() - take a holder's %DL_MSG_P2P_DMA naming a
 *	device of another lender: checked here, served by the p2p_work.
 * @x: the device whose DMA it is for; @x->lock held, @msg->peer its holder.
 * @fab: the fabric it came on.
 * @msg: the request.
 * @d: its payload, checked for reserved bits and flags.
 *
 * Return: 1 when queued (the work answers); or -EINVAL (the target host
 * cannot be); -EBUSY (one is queued already).
 */
int dl_lent_p2p_dma_remote(struct dl_lent *x, struct dl_fabric *fab,
			   const struct dl_fabric_msg *msg,
			   const struct dl_p2p_dma *d)
{
	u32 host = le32_to_cpu(d->target_host);
	struct dl_fabric_peer_info info;

	lockdep_assert_held(&x->lock);

	if (host == msg->peer || host == dl_fabric_host_id(fab) ||
	    dl_fabric_peer_info(fab, host, &info) || d->bar >= DL_NUM_BARS)
		return -EINVAL;
	if (x->p2p_busy)
		return -EBUSY;
	x->p2p_busy = true;
	x->p2p_req = *d;
	x->p2p_msg = *msg;
	x->p2p_msg.data = NULL;
	x->p2p_msg.len = 0;
	x->p2p_fab = fab;
	kref_get(&x->ref);
	if (!queue_work(system_unbound_wq, &x->p2p_work))
		dl_lent_put(x);
	return 1;
}

/* Ask @rhost where its device's BAR is shown to us for @x's holder. */
static int dl_p2p_ask_window(struct dl_fabric *fab, u32 rhost, u32 holder,
			     u64 holder_inc, const struct dl_p2p_dma *d,
			     phys_addr_t *phys, u64 *len)
{
	struct dl_p2p_lookup q = {
		.dev_id = d->target_id,
		.bar = d->bar,
		.holder = cpu_to_le32(holder),
		.holder_inc = cpu_to_le64(holder_inc),
	};
	struct dl_p2p_window w;
	size_t got = 0;
	int ret;

	ret = dl_fabric_request(fab, rhost, DL_MSG_P2P_LOOKUP, &q, sizeof(q),
				&w, sizeof(w), &got, DL_P2P_LOOKUP_MS);
	if (ret)
		return ret;
	if (got != sizeof(w))
		return -EPROTO;
	*len = le64_to_cpu(w.len);
	if (!*len || !PAGE_ALIGNED(*len))
		return -EPROTO;
	return dl_fabric_peer_bar(fab, rhost, le64_to_cpu(w.token), *len,
				  phys);
}

/*
 * Serve the queued request: ask the other lender with no lock of @x held,
 * then map under them. Return 0 or -errno for the holder; -EAGAIN if a
 * revocation crossed the question.
 */
static int dl_p2p_work_serve(struct dl_lent *x, struct dl_fabric *fab,
			     u32 holder, const struct dl_p2p_dma *d)
{
	u32 rhost = le32_to_cpu(d->target_host);
	u32 rdev = le32_to_cpu(d->target_id);
	struct dl_fabric_peer_info rinfo;
	u64 inc, len = 0;
	phys_addr_t phys = 0;
	int ret, asked;
	u32 gen;

	mutex_lock(&x->lock);
	if (x->dead || !dl_lent_is_holder(x, fab, holder)) {
		ret = x->dead ? -ENODEV : -EBUSY;
		goto out_unlock;
	}
	if (!(d->flags & DL_P2P_DMA_F_MAP)) {
		dl_lent_p2p_unmap_remote(x, rhost, rdev, d->bar);
		ret = 0;
		goto out_unlock;
	}
	inc = x->borrower_inc;
	mutex_unlock(&x->lock);

	gen = atomic_read(&dl_p2p_revoke_gen);
	asked = dl_fabric_peer_info(fab, rhost, &rinfo);
	if (!asked && !rinfo.up)
		asked = -ENOTCONN;
	if (!asked)
		asked = dl_p2p_ask_window(fab, rhost, holder, inc, d, &phys,
					  &len);

	mutex_lock(&x->lock);
	if (x->dead || !dl_lent_is_holder(x, fab, holder) ||
	    x->borrower_inc != inc) {
		ret = -EBUSY;
		goto out_unlock;
	}
	ret = asked;
	if (!ret)
		ret = dl_lent_p2p_map_remote(x, fab, rhost, rinfo.incarnation,
					     rdev, d->bar, le64_to_cpu(d->iova),
					     phys, len, gen);
	else
		dl_lent_p2p_unmap_remote(x, rhost, rdev, d->bar);
out_unlock:
	mutex_unlock(&x->lock);
	return ret;
}

/**
 * dl_lent_p2p_work() - serve and answer a holder's %DL_MSG_P2P_DMA naming
 *	a device of another lender.
 * @work: &dl_lent.p2p_work, queued by dl_lent_p2p_dma_remote().
 */
void dl_lent_p2p_work(struct work_struct *work)
{
	struct dl_lent *x = container_of(work, struct dl_lent, p2p_work);
	struct dl_fabric_msg msg;
	struct dl_fabric *fab;
	struct dl_p2p_dma d;
	int ret;

	mutex_lock(&x->lock);
	d = x->p2p_req;
	msg = x->p2p_msg;
	fab = x->p2p_fab;
	mutex_unlock(&x->lock);

	ret = dl_p2p_work_serve(x, fab, msg.peer, &d);
	/* A revocation crossed the question: the answer may be stale; ask again. */
	if (ret == -EAGAIN)
		ret = dl_p2p_work_serve(x, fab, msg.peer, &d);
	mutex_lock(&x->lock);
	x->p2p_busy = false;
	mutex_unlock(&x->lock);
	if (ret && (d.flags & DL_P2P_DMA_F_MAP)) {
		if (ret != -EOPNOTSUPP && ret != -ENOENT && ret != -EAGAIN &&
		    ret != -EBUSY && ret != -ENODEV)
			dl_lent_reject(x, DL_REJ_P2P_DMA);
		pci_info_ratelimited(x->pdev,
				     "lender: BAR%u of device %u of host %u not mapped for this device's DMA at IOVA %#llx for host %u: %d\n",
				     d.bar, le32_to_cpu(d.target_id),
				     le32_to_cpu(d.target_host),
				     le64_to_cpu(d.iova), msg.peer, ret);
	}
	dl_lender_respond(fab, &msg, ret, NULL, 0);
	dl_lent_put(x);
}

/* The export of @y's BAR @bar to @to_host, or -1; @y->lock held. */
static int dl_p2p_export_find(struct dl_lent *y, u32 to_host, unsigned int bar)
{
	unsigned int i;

	for (i = 0; i < y->nexports; i++)
		if (y->exports[i].to_host == to_host && y->exports[i].bar == bar)
			return i;
	return -1;
}

/**
 * dl_lent_p2p_export() - show a memory BAR of the device to another lender
 *	for its devices of the same holder (%DL_MSG_P2P_EXPORT).
 * @y: the device; @y->lock held, @holder on @fab its holder.
 * @fab: the holder's fabric.
 * @holder: the holder.
 * @bar: from the holder: anything.
 * @to_host: from the holder: anything.
 *
 * Return: 0 (also if shown already); -EINVAL (no such BAR, a host that
 * cannot be); -EOPNOTSUPP (an I/O BAR, or the fabric cannot show it);
 * -ENOSPC (too many exports, or no window room).
 */
int dl_lent_p2p_export(struct dl_lent *y, struct dl_fabric *fab, u32 holder,
		       unsigned int bar, u32 to_host)
{
	struct dl_bar_dma_span skip[DL_BAR_DMA_MAX_SKIPS];
	struct dl_fabric_peer_info info;
	struct dl_fabric_span fskip[DL_BAR_DMA_MAX_SKIPS];
	struct dl_lent_export *e;
	struct dl_lent_bar *b;
	unsigned int n, k;
	int ret;

	lockdep_assert_held(&y->lock);

	if (to_host == holder || to_host == dl_fabric_host_id(fab) ||
	    dl_fabric_peer_info(fab, to_host, &info))
		return -EINVAL;
	ret = dl_lent_mem_bar(y, bar, &b);
	if (ret)
		return ret;
	if (dl_p2p_export_find(y, to_host, bar) >= 0)
		return 0;
	if (y->nexports >= DL_P2P_EXPORTS_MAX)
		return -ENOSPC;
	n = dl_lent_msix_skips(y, bar, skip);
	for (k = 0; k < n; k++) {
		fskip[k].start = skip[k].start;
		fskip[k].end = skip[k].end;
	}
	e = &y->exports[y->nexports];
	ret = dl_fabric_bar_expose(fab, to_host, y->pdev, bar,
				   n ? fskip : NULL, n, &e->token, &e->len);
	if (ret)
		return ret;
	e->to_host = to_host;
	e->bar = bar;
	y->nexports++;
	dl_lent_count(y, DL_LCNT_P2P_EXPORTS);
	pci_info_ratelimited(y->pdev,
			     "lender: BAR%u (%llu bytes) shown to host %u for the DMA of host %u's devices there\n",
			     bar, e->len, to_host, holder);
	return 0;
}

/**
 * dl_lent_p2p_lookup() - tell another lender where the device's BAR is
 *	shown to it, if the holder it names holds the device and exported
 *	that BAR to it (%DL_MSG_P2P_LOOKUP).
 * @y: the device; @y->lock held.
 * @fab: the fabric the question came on.
 * @asker: the other lender.
 * @q: the question (anything).
 * @w: filled with the answer.
 *
 * Return: 0 or -ENOENT.
 */
int dl_lent_p2p_lookup(struct dl_lent *y, struct dl_fabric *fab, u32 asker,
		       const struct dl_p2p_lookup *q, struct dl_p2p_window *w)
{
	int i;

	lockdep_assert_held(&y->lock);

	if (y->dead || !dl_lent_is_holder(y, fab, le32_to_cpu(q->holder)) ||
	    y->borrower_inc != le64_to_cpu(q->holder_inc))
		return -ENOENT;
	i = dl_p2p_export_find(y, asker, q->bar);
	if (i < 0)
		return -ENOENT;
	w->token = cpu_to_le64(y->exports[i].token);
	w->len = cpu_to_le64(y->exports[i].len);
	dl_lent_count(y, DL_LCNT_P2P_LOOKUPS);
	return 0;
}

/*
 * @host did not answer @y's REVOKE (@err): if it is up, nobody may take
 * @y until it does (dl_lent_p2p_fence_check()); @y->lock held.
 */
static void dl_p2p_fence(struct dl_lent *y, u32 host, int err)
{
	struct dl_fabric_peer_info info;

	if (host >= DL_MAX_HOSTS || dl_fabric_peer_info(y->fab, host, &info) ||
	    !info.up)
		return;
	dl_lent_count(y, DL_LCNT_P2P_REVOKES_UNANSWERED);
	y->p2p_fenced |= BIT(host);
	y->p2p_fence_inc[host] = info.incarnation;
	y->p2p_fence_fab = y->fab;
	dev_warn_ratelimited(&y->pdev->dev,
			     "lender: host %u did not confirm it dropped its mappings onto device %u (%d); lent to nobody until it does\n",
			     host, y->dev_id, err);
}

/**
 * dl_lent_p2p_exports_revoke() - the device is being taken back: tell
 *	each lender it was shown to, so that it drops its mappings onto it;
 *	then close the windows. Before its reset.
 * @y: the device; its device lock and @y->lock held, its holder and
 *	fabric still recorded, and its take-back marked (@y->slow_holds), so
 *	that the receive work, through which the answers come, does not wait
 *	for its locks.
 */
void dl_lent_p2p_exports_revoke(struct dl_lent *y)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(y->dev_id) };
	struct dl_lent_export *e;
	unsigned int i, k;
	bool told;
	int ret;

	lockdep_assert_held(&y->lock);

	for (i = 0; i < y->nexports; i++) {
		e = &y->exports[i];
		/* One message per lender: it drops every mapping onto @y. */
		for (told = false, k = 0; k < i; k++)
			told |= y->exports[k].to_host == e->to_host;
		if (y->fab && !told) {
			ret = dl_fabric_request_urgent(y->fab, e->to_host,
						       DL_MSG_P2P_REVOKE, &ref,
						       sizeof(ref),
						       DL_P2P_ASK_MS);
			if (ret)
				dl_p2p_fence(y, e->to_host, ret);
		}
		if (y->fab)
			dl_fabric_bar_revoke(y->fab, e->to_host, e->token,
					     e->len);
		dl_lent_count(y, DL_LCNT_P2P_EXPORT_REVOKES);
	}
	y->nexports = 0;
}

/*
 * @y->lock, unless a take-back holds it (it revokes the exports: the asker
 * would get nothing) or another holder does for long: the receive work
 * serves every peer. No device lock: nothing here needs it.
 */
static bool dl_p2p_lock_unless_slow(struct dl_lent *y)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(100);

	while (!mutex_trylock(&y->lock)) {
		if (atomic_read(&y->slow_holds) || time_after(jiffies, deadline))
			return false;
		usleep_range(50, 100);
	}
	return true;
}

/* Hosts of @y's fence that still owe an answer; @y->lock held. */
static unsigned long dl_p2p_fence_owing(struct dl_lent *y)
{
	struct dl_fabric_peer_info info;
	unsigned long owing = 0;
	unsigned int h;

	for_each_set_bit(h, &y->p2p_fenced, DL_MAX_HOSTS) {
		/* Down or restarted: its device's mappings are gone. */
		if (dl_fabric_peer_info(y->p2p_fence_fab, h, &info) ||
		    !info.up || info.incarnation != y->p2p_fence_inc[h])
			continue;
		owing |= BIT(h);
	}
	y->p2p_fenced = owing;
	return owing;
}

/**
 * dl_lent_p2p_fence_check() - whether the device may be taken by a holder:
 *	not while a lender it was shown to may still reach its BARs.
 * @y: the device; @y->lock held.
 *
 * A refusal asks those lenders again, off the caller's path.
 *
 * Return: 0, or -EBUSY (counted).
 */
int dl_lent_p2p_fence_check(struct dl_lent *y)
{
	lockdep_assert_held(&y->lock);

	if (!y->p2p_fenced || !dl_p2p_fence_owing(y))
		return 0;
	dl_lent_count(y, DL_LCNT_P2P_FENCE_REFUSALS);
	kref_get(&y->ref);
	if (!queue_work(system_unbound_wq, &y->p2p_fence_work))
		dl_lent_put(y);
	return -EBUSY;
}

/**
 * dl_lent_p2p_fence_work() - ask the lenders of the device's fence again
 *	to drop their mappings onto it; lift it for each that answers.
 * @work: &dl_lent.p2p_fence_work, queued by dl_lent_p2p_fence_check().
 */
void dl_lent_p2p_fence_work(struct work_struct *work)
{
	struct dl_lent *y = container_of(work, struct dl_lent, p2p_fence_work);
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(y->dev_id) };
	unsigned long owing, answered = 0;
	struct dl_fabric *fab;
	unsigned int h;

	mutex_lock(&y->lock);
	owing = y->p2p_fenced ? dl_p2p_fence_owing(y) : 0;
	fab = y->p2p_fence_fab;
	mutex_unlock(&y->lock);

	/* No lock held: the answers come through the receive work. */
	for_each_set_bit(h, &owing, DL_MAX_HOSTS)
		if (!dl_fabric_request_urgent(fab, h, DL_MSG_P2P_REVOKE, &ref,
					      sizeof(ref), DL_P2P_ASK_MS))
			answered |= BIT(h);

	mutex_lock(&y->lock);
	if (y->p2p_fence_fab == fab)
		y->p2p_fenced &= ~answered;
	mutex_unlock(&y->lock);
	if (answered)
		pci_info_ratelimited(y->pdev,
				     "lender: hosts %#lx dropped their mappings onto device %u at last\n",
				     answered, y->dev_id);
	dl_lent_put(y);
}

/**
 * dl_lent_p2p_fence_forget() - the fabric goes: its windows with it.
 * @y: the device; @y->lock held.
 * @fab: the fabric.
 */
void dl_lent_p2p_fence_forget(struct dl_lent *y, struct dl_fabric *fab)
{
	lockdep_assert_held(&y->lock);

	if (y->p2p_fence_fab == fab) {
		y->p2p_fenced = 0;
		y->p2p_fence_fab = NULL;
	}
}

/* %DL_MSG_P2P_LOOKUP from another lender: not from a holder of the device. */
static void dl_lender_on_p2p_lookup(struct dl_fabric *fab,
				    const struct dl_fabric_msg *msg,
				    void *priv)
{
	unsigned int stall = READ_ONCE(dl_fault_p2p_lookup_stall_ms);
	const struct dl_p2p_lookup *q = msg->data;
	struct dl_p2p_window w = {};
	struct dl_lent *y;
	int err = -ENOENT;

	/* Tests only: this host's receive work held up, as a stalled host's. */
	if (stall)
		msleep(min(stall, 10000U));

	if (msg->len != sizeof(*q) || q->reserved[0] || q->reserved[1] ||
	    q->reserved[2] || q->reserved2) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		err = -EINVAL;
		goto out_respond;
	}
	y = dl_lent_get(le32_to_cpu(q->dev_id));
	if (!y)
		goto out_respond;
	if (dl_p2p_lock_unless_slow(y)) {
		err = dl_lent_p2p_lookup(y, fab, msg->peer, q, &w);
		mutex_unlock(&y->lock);
	} else {
		err = -EAGAIN;
	}
	dl_lent_put(y);
out_respond:
	dl_lender_respond(fab, msg, err, &w, sizeof(w));
}

/* %DL_MSG_P2P_REVOKE from another lender: drop every mapping onto its device. */
static void dl_lender_on_p2p_revoke(struct dl_fabric *fab,
				    const struct dl_fabric_msg *msg,
				    void *priv)
{
	const struct dl_dev_ref *ref = msg->data;
	unsigned long idx = 0;
	struct dl_lent *x;
	int err = 0;

	if (msg->len != sizeof(*ref) || ref->flags) {
		dl_lent_reject(NULL, DL_REJ_MALFORMED);
		err = -EINVAL;
		goto out_respond;
	}
	if (READ_ONCE(dl_fault_p2p_revoke_ignore))
		return;
	atomic_inc(&dl_p2p_revoke_gen);
	/*
	 * Before the walk: a map that asked before this sees it moved, under
	 * the p2p_lock the walk takes after it.
	 */
	smp_mb__after_atomic();
	while ((x = dl_lent_next(&idx))) {
		dl_lent_p2p_drop_remote(x, fab, msg->peer,
					le32_to_cpu(ref->dev_id), false);
		dl_lent_put(x);
	}
out_respond:
	dl_lender_respond(fab, msg, err, NULL, 0);
}

/* After a peer went down: drop what is mapped onto its BARs. */
static void dl_lender_p2p_gone_work(struct work_struct *work)
{
	unsigned long idx = 0;
	struct dl_lent *x;

	while ((x = dl_lent_next(&idx))) {
		dl_lent_p2p_drop_remote(x, NULL, 0, U32_MAX, true);
		dl_lent_put(x);
	}
}

static DECLARE_WORK(dl_lender_p2p_gone, dl_lender_p2p_gone_work);

/**
 * dl_lender_p2p_peer_down() - a peer went down: what this lender mapped
 *	onto its BARs goes (it may give its devices to others once back).
 *
 * From the fabric notifier: only bumps the generation and queues the walk.
 */
void dl_lender_p2p_peer_down(void)
{
	atomic_inc(&dl_p2p_revoke_gen);
	/* As in the REVOKE handler: seen by maps before the walk runs. */
	smp_mb__after_atomic();
	queue_work(system_unbound_wq, &dl_lender_p2p_gone);
}

/**
 * dl_lender_p2p_flush() - wait for the walk dl_lender_p2p_peer_down()
 *	queued: before a fabric goes away.
 */
void dl_lender_p2p_flush(void)
{
	flush_work(&dl_lender_p2p_gone);
}

/**
 * dl_lender_register_p2p() - answer other lenders' P2P messages on a
 *	fabric.
 * @fab: the fabric.
 *
 * Return: 0 or -errno (then none is registered).
 */
int dl_lender_register_p2p(struct dl_fabric *fab)
{
	int ret;

	ret = dl_fabric_register_handler(fab, DL_MSG_P2P_LOOKUP,
					 dl_lender_on_p2p_lookup, NULL);
	if (ret)
		return ret;
	ret = dl_fabric_register_handler(fab, DL_MSG_P2P_REVOKE,
					 dl_lender_on_p2p_revoke, NULL);
	if (ret)
		dl_fabric_unregister_handler(fab, DL_MSG_P2P_LOOKUP);
	return ret;
}

/**
 * dl_lender_unregister_p2p() - undo dl_lender_register_p2p().
 * @fab: the fabric.
 */
void dl_lender_unregister_p2p(struct dl_fabric *fab)
{
	dl_fabric_unregister_handler(fab, DL_MSG_P2P_REVOKE);
	dl_fabric_unregister_handler(fab, DL_MSG_P2P_LOOKUP);
}
