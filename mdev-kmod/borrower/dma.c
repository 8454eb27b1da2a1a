// SPDX-License-Identifier: GPL-2.0
/*
 * DMA for a borrowed device: pin the guest's RAM and have the lender map
 * it for the device.
 *
 * When the guest sets Bus Master Enable, the guest's RAM is pinned
 * (IOVA = guest-physical address). The ranges come from the KVM memslots
 * of the VFIO device's KVM (read-only slots skipped), or without KVM from
 * probing IOVAs below 4 GiB in 2 MiB blocks (a block is tried if its first
 * page is mapped). Under KVM each chunk of up to 2 MiB is pinned in bulk
 * from the memslot's mapping in the VMM, with its first and last page
 * pinned through VFIO too as anchors (dl_dma_pin_bulk()); otherwise, and
 * when that does not match, with vfio_pin_pages(). What VFIO refuses to
 * pin (not mapped in the container) is skipped page by page. Physically
 * contiguous runs are coalesced and sent to the lender in batches of
 * DL_MSG_DMA_MAP, as many runs as fit a message; it maps each IOVA onto
 * the pinned page through its window onto this host. What a run carries
 * is what the fabric hands out for the pages (dl_fabric_inbound_map()):
 * their physical address where the lender sees all of this host's RAM,
 * else an offset of the lender's bounded window onto this host, taken
 * from a budget (the window, and window_max_pages per mdev) and given
 * back with the page (dl_dma_win_take()).
 *
 * What is pinned is kept as extents of IOVA, so that clearing BME, a
 * reset, close, or VFIO's dma_unmap() undoes exactly that: first the
 * lender unmaps (so the device can no longer reach the pages), then the
 * pages are unpinned. VFIO waits for dma_unmap() to unpin everything in
 * the range, so it unpins even when the lender cannot be reached (and the
 * device is then given up).
 *
 * While bus mastering stays on under KVM, a dma_unmap() is QEMU changing
 * the guest's memory layout (it unmaps and maps the same RAM again, e.g. when
 * the BIOS write-protects its shadow area), and it never tells mdevs of
 * the map. So the pages are unpinned for VFIO but "kept": held by a
 * reference of ours and left mapped by the lender, and pinned again a
 * moment later. Where the re-pin finds the same page at the IOVA, nothing
 * is sent and the device never lost it; a page that moved is unmapped
 * before the new one is mapped; what never comes back is unmapped when
 * the re-pin stops waiting. The lender can only ever reach pages we hold,
 * so the DMA ownership rule (lease.c) is kept.
 *
 * The re-pin must not pin before QEMU's unmap has returned. VFIO tells
 * every device of the container in turn, then looks again: a page pinned
 * meanwhile in the range (the old mapping is still there until the unmap
 * returns) makes it tell them all again, and after ten rounds it BUG()s
 * (vfio_dma_do_unmap()). Another mdev's round trip to its lender in the
 * middle is time enough for a re-pin to run. So each such dma_unmap()
 * leaves a task work on the caller, run as its unmap returns, and the
 * re-pin does nothing while one is open (dl_dma_unmap_ends()).
 * Every failure on the way unwinds through the same teardown, which is
 * idempotent (CVE-2022-3707 was a double free on such a path).
 */
#include <linux/delay.h>
#include <linux/iommu.h>
#include <linux/jiffies.h>
#include <linux/ktime.h>
#include <linux/kvm_host.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/task_work.h>
#include <linux/vfio.h>

#include "internal.h"

/* Most pages per vfio_pin_pages() call. */
#define DL_PIN_BATCH		VFIO_PIN_PAGES_MAX_ENTRIES
/*
 * DL_MSG_DMA_MAPs in flight while pinning goes on: the lender maps one
 * batch while this host pins the next, instead of a round trip each.
 */
#define DL_MAP_INFLIGHT		8
/* How long after a dma_unmap() the memory is pinned again. */
#define DL_REPIN_DELAY_MS	100
/* How often, and how far apart, a failed re-pin is tried again. */
#define DL_REPIN_TRIES		10
#define DL_REPIN_RETRY_MS	500
/*
 * How long the re-pin waits for QEMU to map again what it unmapped from
 * under the pins: mapping a large guest's RAM into VFIO pins all of it and
 * takes seconds (minutes on a debug kernel under TCG).
 */
#define DL_REPIN_WAIT_S		120

/**
 * struct dl_pin_extent - pages pinned at consecutive IOVAs.
 * @node: in &dl_vdev_dma.pinned.
 * @iova: the first IOVA, page aligned.
 * @npages: pages.
 */
struct dl_pin_extent {
	struct list_head node;
	u64 iova;
	u64 npages;
};

/**
 * struct dl_dma_batch - the DL_MSG_DMA_MAP being filled, and those in
 *	flight.
 * @v: the mdev.
 * @msg: the message (the fabric copies it when it is sent).
 * @max: runs that fit in it.
 * @reqs: %DL_MAP_INFLIGHT requests, used in turn.
 * @cur: the request the next message goes with.
 * @inflight: requests sent before @cur and not waited for.
 * @err: the first error a sent message got.
 * @pages: result of vfio_pin_pages().
 * @probe: no KVM: the spans are probed, not known to be memory.
 * @sent: a message was sent, so the lender may hold mappings.
 * @nruns: runs sent.
 * @nmsgs: messages sent.
 */
struct dl_dma_batch {
	struct dl_vdev *v;
	struct dl_dma_map *msg;
	unsigned int max;
	struct dl_fabric_req *reqs;
	unsigned int cur;
	unsigned int inflight;
	int err;
	struct page **pages;
	bool probe;
	bool sent;
	unsigned int nruns;
	unsigned int nmsgs;
};

/*
 * An IOVA range to pin: a memslot, or the probed range. @hva: where the
 * memslot maps it in the VMM, 0 if not known (no KVM).
 */
struct dl_dma_span {
	u64 iova;
	u64 npages;
	u64 hva;
};

/* Waits for the oldest DL_MSG_DMA_MAP in flight; keeps the first error. */
static void dl_dma_wait_oldest(struct dl_dma_batch *bt)
{
	unsigned int i = (bt->cur + DL_MAP_INFLIGHT - bt->inflight) %
			 DL_MAP_INFLIGHT;
	int ret;

	ret = dl_fabric_req_wait(bt->v->b->fab, &bt->reqs[i], DL_B_TIMEOUT_MS);
	bt->inflight--;
	if (ret) {
		dl_session_refused(bt->v, ret);
		if (!bt->err)
			bt->err = ret;
	}
}

/*
 * Waits for every DL_MSG_DMA_MAP in flight (the fabric references their
 * requests until then). Return: 0, or the first error one got.
 */
static int dl_dma_drain(struct dl_dma_batch *bt)
{
	while (bt->inflight)
		dl_dma_wait_oldest(bt);
	return bt->err;
}

/*
 * Sends the message being filled, without waiting for its answer unless
 * %DL_MAP_INFLIGHT are out already. After an error nothing more is sent:
 * the caller undoes the whole fill.
 */
static int dl_dma_flush(struct dl_dma_batch *bt)
{
	struct dl_vdev *v = bt->v;
	u32 count = le32_to_cpu(bt->msg->count);
	struct dl_fabric_req *req;
	int ret;

	if (!count)
		return bt->err;
	if (bt->inflight == DL_MAP_INFLIGHT)
		dl_dma_wait_oldest(bt);
	if (bt->err)
		return bt->err;
	bt->msg->dev_id = cpu_to_le32(v->sess.dev_id);
	bt->sent = true;
	bt->nruns += count;
	bt->nmsgs++;
	req = &bt->reqs[bt->cur];
	req->resp = NULL;
	req->resp_size = 0;
	req->urgent = false;
	ret = dl_fabric_req_submit(v->b->fab, v->sess.host, DL_MSG_DMA_MAP, bt->msg,
				   struct_size(bt->msg, ranges, count), req);
	bt->msg->count = 0;
	if (ret) {
		bt->err = ret;
		return ret;
	}
	bt->inflight++;
	bt->cur = (bt->cur + 1) % DL_MAP_INFLIGHT;
	return 0;
}

static int dl_dma_add_run(struct dl_dma_batch *bt, u64 iova, u64 addr,
			  u64 len)
{
	u32 count = le32_to_cpu(bt->msg->count);
	struct dl_dma_range *last = count ? &bt->msg->ranges[count - 1] : NULL;
	int ret;

	if (last && le64_to_cpu(last->iova) + le64_to_cpu(last->len) == iova &&
	    le64_to_cpu(last->addr) + le64_to_cpu(last->len) == addr) {
		last->len = cpu_to_le64(le64_to_cpu(last->len) + len);
		return 0;
	}
	if (count == bt->max) {
		ret = dl_dma_flush(bt);
		if (ret)
			return ret;
		count = 0;
	}
	bt->msg->ranges[count].iova = cpu_to_le64(iova);
	bt->msg->ranges[count].addr = cpu_to_le64(addr);
	bt->msg->ranges[count].len = cpu_to_le64(len);
	bt->msg->count = cpu_to_le32(count + 1);
	return 0;
}

static int dl_dma_record(struct dl_vdev *v, u64 iova, u64 npages)
{
	struct dl_pin_extent *e;

	lockdep_assert_held(&v->dma.lock);

	v->dma.npinned += npages;
	if (!list_empty(&v->dma.pinned)) {
		e = list_last_entry(&v->dma.pinned, struct dl_pin_extent, node);
		if (e->iova + (e->npages << PAGE_SHIFT) == iova) {
			e->npages += npages;
			return 0;
		}
	}
	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e) {
		v->dma.npinned -= npages;
		return -ENOMEM;
	}
	e->iova = iova;
	e->npages = npages;
	list_add_tail(&e->node, &v->dma.pinned);
	return 0;
}

/*
 * Window space (where the fabric hands it out: a lender's bounded NTB
 * window onto this host). Each page the lender is sent has the address
 * it was mapped at in @v->dma.win; it goes back to the fabric with the
 * page, only once the lender acknowledged the unmap, or to the lease's
 * quarantine with the page when it did not. Given back or quarantined a
 * run at a time: pages of consecutive IOVAs mostly have consecutive
 * addresses.
 */
struct dl_win_run {
	u64 addr;
	u64 len;
	bool acked;
};

/* Gives @r back to the fabric, or quarantines it; caller holds b->lock. */
static void dl_dma_win_flush(struct dl_vdev *v, struct dl_win_run *r)
{
	lockdep_assert_held(&v->b->lock);

	if (!r->len)
		return;
	if (r->acked)
		dl_fabric_inbound_unmap(v->b->fab, v->dma.win_peer, r->addr,
					r->len);
	else if (!WARN_ON_ONCE(!v->sess.lease))
		dl_lease_quarantine_win(v->b, v->sess.lease, r->addr, r->len);
	/* (Nobody to hold it: leaked, as its page is.) */
	r->len = 0;
}

/* Takes the window space of IOVA page @idx off the mdev, into @r. */
static void dl_dma_win_take(struct dl_vdev *v, unsigned long idx,
			    struct dl_win_run *r)
{
	void *entry;
	u64 addr;

	lockdep_assert_held(&v->dma.lock);

	if (!v->dma.nwin)
		return;
	entry = xa_erase(&v->dma.win, idx);
	if (!entry)
		return;
	v->dma.nwin--;
	addr = (u64)xa_to_value(entry) << PAGE_SHIFT;
	if (r->len && r->addr + r->len == addr) {
		r->len += PAGE_SIZE;
		return;
	}
	dl_dma_win_flush(v, r);
	r->addr = addr;
	r->len = PAGE_SIZE;
}

/*
 * Has the fabric let the lender reach @npages pages from @phys (physically
 * contiguous) for IOVA @iova, and sets *@addr to what the lender is to be
 * given for them. Window space taken is recorded by IOVA page.
 * Return: 0, or -errno: -ENOSPC when window space runs out (the lender's
 * window, or window_max_pages for this mdev), -ERANGE where the window
 * cannot show the pages.
 */
static int dl_dma_win_map(struct dl_vdev *v, u64 iova, phys_addr_t phys,
			  unsigned long npages, u64 *addr)
{
	struct dl_fabric *fab = v->b->fab;
	unsigned long max = READ_ONCE(dl_window_max_pages);
	unsigned long idx = iova >> PAGE_SHIFT, i;
	u32 host = v->sess.host;
	int ret;

	lockdep_assert_held(&v->dma.lock);

	if (!dl_fabric_inbound_windowed(fab)) {
		ret = dl_fabric_inbound_map(fab, host, phys,
					    (u64)npages << PAGE_SHIFT, addr);
		if (ret)
			v->dma.win_refused++;
		return ret;
	}
	if (v->dma.nwin && host != v->dma.win_peer) {
		WARN_ONCE(1, "devlend: window space of host %u held on a borrow from host %u\n",
			  v->dma.win_peer, host);
		return -EBUSY;
	}
	if (max && v->dma.nwin + npages > max) {
		v->dma.win_refused++;
		dev_err_ratelimited(dl_vdev_dev(v),
				    "DMA: no window space left for this device (window_max_pages %lu)\n",
				    max);
		return -ENOSPC;
	}
	ret = dl_fabric_inbound_map(fab, host, phys, (u64)npages << PAGE_SHIFT,
				    addr);
	if (ret) {
		v->dma.win_refused++;
		dev_err_ratelimited(dl_vdev_dev(v),
				    "DMA: host %u's window onto this host has no room for %lu more pages: %d\n",
				    host, npages, ret);
		return ret;
	}
	v->dma.win_peer = host;
	for (i = 0; i < npages; i++) {
		ret = xa_err(xa_store(&v->dma.win, idx + i,
				      xa_mk_value((*addr >> PAGE_SHIFT) + i),
				      GFP_KERNEL));
		if (ret)
			goto err_erase;
	}
	v->dma.nwin += npages;
	return 0;

err_erase:
	while (i--)
		xa_erase(&v->dma.win, idx + i);
	/* Never sent to the lender: nothing reaches it. */
	dl_fabric_inbound_unmap(fab, host, *addr, (u64)npages << PAGE_SHIFT);
	return ret;
}

/*
 * Whether the lender may map pages of this mdev: it was sent mappings and
 * has not said since that it holds none.
 */
static bool dl_dma_lender_may_map(struct dl_vdev *v)
{
	return v->dma.mapped && !(v->sess.lease && v->sess.lease->settled);
}

/*
 * DMA_UNMAP, asked again while the lender answers EIO: a lender refuses
 * requests for a device while it resets it (VFIO's dma_unmap() does not
 * wait for the mdev's own reset), and a refusal here would give the device
 * up. Bounded: past it the pages are quarantined as for any other failure.
 */
static int dl_dma_unmap_request(struct dl_vdev *v,
				const struct dl_dma_unmap *um)
{
	unsigned int tries = 0;
	int ret;

	for (;;) {
		ret = dl_fabric_request_urgent(v->b->fab, v->sess.host,
					       DL_MSG_DMA_UNMAP, um, sizeof(*um),
					       DL_B_TIMEOUT_MS);
		if (ret != -EIO || ++tries > DL_B_BUSY_TRIES)
			return ret;
		msleep(DL_B_BUSY_MS);
	}
}

/*
 * Has the lender unmap [@iova, @iova + @len) (everything with @all).
 * Return: 0 once it has, or when it holds nothing of ours; -errno when it
 * did not acknowledge, and then the device is given up.
 */
static int dl_dma_lender_unmap(struct dl_vdev *v, u64 iova, u64 len,
			       bool all)
{
	struct dl_dma_unmap um = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.flags = cpu_to_le32(all ? DL_DMA_UNMAP_F_ALL : 0),
		.iova = cpu_to_le64(iova),
		.len = cpu_to_le64(len),
	};
	int ret = -ENOTCONN;

	if (!dl_dma_lender_may_map(v))
		return 0;
	if (READ_ONCE(v->sess.state) == DL_VDEV_BORROWED)
		ret = dl_dma_unmap_request(v, &um);
	if (ret) {
		dev_err_ratelimited(dl_vdev_dev(v),
				    "the lender did not unmap 0x%llx+0x%llx: %d; quarantining its pages, giving the device up\n",
				    iova, len, ret);
		mutex_lock(&v->b->lock);
		dl_session_lost(v, "DMA unmap failed");
		mutex_unlock(&v->b->lock);
	}
	return ret;
}

/*
 * Lets go of the kept pages in [@s, @t): the lender no longer maps them
 * (@acked), or may still, and then they are quarantined as in
 * dl_dma_unpin(). Return: how many.
 */
static unsigned long dl_dma_kept_let_go(struct dl_vdev *v, u64 s, u64 t,
					bool acked)
{
	struct dl_borrower *b = v->b;
	unsigned long idx, n = 0;
	struct dl_win_run r = {};
	struct page *page;

	lockdep_assert_held(&v->dma.lock);

	if (!v->dma.nkept || s >= t)
		return 0;
	mutex_lock(&b->lock);
	/* The release work may have settled the lease meanwhile. */
	if (v->sess.lease && v->sess.lease->settled)
		acked = true;
	r.acked = acked;
	xa_for_each_range(&v->dma.kept, idx, page, s >> PAGE_SHIFT,
			  (t - 1) >> PAGE_SHIFT) {
		xa_erase(&v->dma.kept, idx);
		v->dma.nkept--;
		n++;
		/* Its window space goes the way the page goes. */
		dl_dma_win_take(v, idx, &r);
		if (!acked) {
			if (WARN_ON_ONCE(!v->sess.lease))
				continue;	/* nobody to hold it: leak it */
			dl_lease_quarantine(b, v->sess.lease, page);
		}
		put_page(page);
	}
	dl_dma_win_flush(v, &r);
	mutex_unlock(&b->lock);
	return n;
}

/*
 * Has the lender unmap the kept pages in [@s, @t), one message per run of
 * consecutive IOVAs, and lets go of them. Return: how many.
 */
static unsigned long dl_dma_drop_kept(struct dl_vdev *v, u64 s, u64 t)
{
	unsigned long first = s >> PAGE_SHIFT, last = (t - 1) >> PAGE_SHIFT;
	unsigned long end, n = 0;
	int ret;

	lockdep_assert_held(&v->dma.lock);

	while (v->dma.nkept && s < t && first <= last &&
	       xa_find(&v->dma.kept, &first, last, XA_PRESENT)) {
		for (end = first + 1; end <= last && xa_load(&v->dma.kept, end);
		     end++)
			;
		ret = dl_dma_lender_unmap(v, (u64)first << PAGE_SHIFT,
					  (u64)(end - first) << PAGE_SHIFT,
					  false);
		n += dl_dma_kept_let_go(v, (u64)first << PAGE_SHIFT,
					(u64)end << PAGE_SHIFT, !ret);
		first = end;
	}
	return n;
}

/*
 * The re-pin pinned @n pages at @iova. Those it found kept on the same
 * page the lender maps already: their entry in @pages is cleared, and no
 * run is sent. Kept pages whose IOVA is another page now are unmapped
 * before the new page is mapped.
 * Return: 0, or -errno if the lender did not unmap.
 */
static int dl_dma_kept_found(struct dl_vdev *v, u64 iova, int n,
			     struct page **pages)
{
	unsigned long idx = iova >> PAGE_SHIFT, moved;
	struct page *old;
	int i;

	lockdep_assert_held(&v->dma.lock);

	if (!v->dma.nkept)
		return 0;
	for (i = 0; i < n; i++) {
		old = xa_load(&v->dma.kept, idx + i);
		if (!old || old != pages[i])
			continue;
		xa_erase(&v->dma.kept, idx + i);
		v->dma.nkept--;
		v->dma.kept_same++;
		put_page(old);		/* VFIO's pin holds it now */
		pages[i] = NULL;
	}
	moved = dl_dma_drop_kept(v, iova, iova + ((u64)n << PAGE_SHIFT));
	v->dma.kept_moved += moved;
	if (moved && READ_ONCE(v->sess.state) != DL_VDEV_BORROWED)
		return -ENOTCONN;
	return 0;
}

/* vfio_pin_pages() refused: some page is not mapped in the container. */
#define DL_PIN_REFUSED		1

/*
 * The tag of a @pin_pages entry pinned by dl_dma_pin_bulk() (a page of
 * ours, given back with unpin_user_page()); untagged entries are VFIO's.
 */
#define DL_PIN_TAG_BULK		1

/* Takes @n pages off the locked memory of the VMM that bulk pins count in. */
static void dl_dma_unaccount(struct dl_vdev *v, unsigned long n)
{
	struct mm_struct *mm = v->dma.pin_mm;

	lockdep_assert_held(&v->dma.lock);

	if (!n || WARN_ON_ONCE(!mm || n > v->dma.nbulk))
		return;
	/* As VFIO does: an exited process has no locked memory to count. */
	if (mmget_not_zero(mm)) {
		account_locked_vm(mm, n, false);
		mmput(mm);
	}
	v->dma.nbulk -= n;
	if (!v->dma.nbulk) {
		v->dma.pin_mm = NULL;
		mmdrop(mm);
	}
}

/*
 * Pins the @n pages at @iova, mapped at @hva in the VMM by the guest's
 * memslot, with one pin_user_pages_remote() call: VFIO pins page by page,
 * each with a lookup, an allocation and its own locked-memory accounting,
 * which is most of what pinning a guest costs. The first and the last
 * page are pinned through VFIO as well ("anchors"), and must be the pages
 * the memslot gives:
 * - VFIO tells of a dma_unmap() only of mappings with pages pinned through
 *   it; the anchors make it tell of the mapping(s) this chunk lies in (the
 *   VMM maps guest RAM into VFIO as it maps it into KVM, one mapping per
 *   memslot, and every chunk starts at a memslot or at 2 MiB);
 * - memory VFIO does not map at both ends (not the guest's RAM as VFIO
 *   sees it) is pinned through VFIO instead, which refuses what it lacks.
 * Pages pinned here are accounted as locked memory of the VMM as VFIO
 * would (RLIMIT_MEMLOCK of the caller); they are pages of the VMM's own
 * memory and held until unpinned, so the DMA ownership rule holds
 * whatever the VMM maps.
 * Return: 0 with @bt->pages filled, or %DL_PIN_REFUSED: pin it through
 * VFIO instead.
 */
static int dl_dma_pin_bulk(struct dl_dma_batch *bt, u64 iova, int n, u64 hva)
{
	struct dl_vdev *v = bt->v;
	struct mm_struct *mm = v->vdev.kvm->mm;
	u64 last = iova + ((u64)(n - 1) << PAGE_SHIFT);
	struct page *first, *end;
	long got = 0;
	bool ok;

	/*
	 * Only in the VMM's own context (the BME write), never in the re-pin
	 * work: account_locked_vm() checks the limit of the current task,
	 * and a kworker has CAP_IPC_LOCK, which would let bulk pins escape
	 * the VMM's RLIMIT_MEMLOCK. VFIO's own pins are charged to the task
	 * that mapped the memory, so they are right anywhere.
	 */
	if (current->mm != mm || (v->dma.pin_mm && v->dma.pin_mm != mm))
		return DL_PIN_REFUSED;
	if (vfio_pin_pages(&v->vdev, iova, 1, IOMMU_READ | IOMMU_WRITE,
			   &first) != 1)
		return DL_PIN_REFUSED;
	if (vfio_pin_pages(&v->vdev, last, 1, IOMMU_READ | IOMMU_WRITE,
			   &end) != 1)
		goto err_first;
	if (!mmget_not_zero(mm))
		goto err_anchors;
	mmap_read_lock(mm);
	got = pin_user_pages_remote(mm, hva, n, FOLL_WRITE | FOLL_LONGTERM,
				    bt->pages, NULL);
	mmap_read_unlock(mm);
	ok = got == n && bt->pages[0] == first && bt->pages[n - 1] == end &&
	     !account_locked_vm(mm, n - 2, true);
	mmput(mm);
	if (!ok)
		goto err_pinned;
	/* The anchors stay VFIO's pins only. */
	unpin_user_page(bt->pages[0]);
	unpin_user_page(bt->pages[n - 1]);
	if (!v->dma.pin_mm) {
		mmgrab(mm);
		v->dma.pin_mm = mm;
	}
	v->dma.nbulk += n - 2;
	v->dma.fill.bulk_pages += n;
	return 0;

err_pinned:
	if (got > 0)
		unpin_user_pages(bt->pages, got);
	v->dma.fill.bulk_refused++;
err_anchors:
	vfio_unpin_pages(&v->vdev, last, 1);
err_first:
	vfio_unpin_pages(&v->vdev, iova, 1);
	return DL_PIN_REFUSED;
}

/* Gives back the pins of a chunk just pinned, before it was recorded. */
static void dl_dma_unpin_chunk(struct dl_vdev *v, u64 iova, int n,
			       bool bulk, struct page **pages)
{
	if (!bulk) {
		vfio_unpin_pages(&v->vdev, iova, n);
		return;
	}
	unpin_user_pages(pages + 1, n - 2);
	dl_dma_unaccount(v, n - 2);
	vfio_unpin_pages(&v->vdev, iova, 1);
	vfio_unpin_pages(&v->vdev, iova + ((u64)(n - 1) << PAGE_SHIFT), 1);
}

/*
 * Pins @n pages at @iova (@hva: where the VMM maps them, 0 if not known)
 * and queues their runs.
 * Return: 0, %DL_PIN_REFUSED, or -errno.
 */
static int dl_dma_pin_chunk(struct dl_dma_batch *bt, u64 iova, int n,
			    u64 hva)
{
	struct dl_vdev *v = bt->v;
	unsigned long idx = iova >> PAGE_SHIFT;
	bool bulk = false;
	void *entry;
	u64 t0, addr;
	int ret, i, j;

	if (v->dma.npinned + n > DL_B_MAX_PINNED_PAGES)
		return -ENOSPC;
	t0 = ktime_get_ns();
	if (hva && n > 2 && READ_ONCE(dl_bulk_pin))
		bulk = !dl_dma_pin_bulk(bt, iova, n, hva);
	if (!bulk) {
		ret = vfio_pin_pages(&v->vdev, iova, n,
				     IOMMU_READ | IOMMU_WRITE, bt->pages);
		if (ret != n) {
			/* Not what VFIO promises; give back what it pinned. */
			if (ret > 0)
				vfio_unpin_pages(&v->vdev, iova, ret);
			return DL_PIN_REFUSED;
		}
	}
	v->dma.fill.pin_ns += ktime_get_ns() - t0;
	/* Kept so that an unacknowledged unmap can quarantine them. */
	for (i = 0; i < n; i++) {
		entry = bt->pages[i];
		if (bulk && i && i < n - 1)
			entry = xa_tag_pointer(entry, DL_PIN_TAG_BULK);
		ret = xa_err(xa_store(&v->dma.pin_pages, idx + i, entry,
				      GFP_KERNEL));
		if (ret)
			goto err_erase;
	}
	ret = dl_dma_record(v, iova, n);
	if (ret)
		goto err_erase;
	ret = dl_dma_kept_found(v, iova, n, bt->pages);
	if (ret)
		return ret;
	/* Physically contiguous pages take one run of window space. */
	for (i = 0; i < n; i = j) {
		if (!bt->pages[i]) {	/* the lender maps it already */
			j = i + 1;
			continue;
		}
		for (j = i + 1; j < n && bt->pages[j] &&
		     page_to_phys(bt->pages[j]) ==
		     page_to_phys(bt->pages[j - 1]) + PAGE_SIZE; j++)
			;
		ret = dl_dma_win_map(v, iova + ((u64)i << PAGE_SHIFT),
				     page_to_phys(bt->pages[i]), j - i, &addr);
		if (ret)
			return ret;
		ret = dl_dma_add_run(bt, iova + ((u64)i << PAGE_SHIFT), addr,
				     (u64)(j - i) << PAGE_SHIFT);
		if (ret)
			return ret;
	}
	return 0;

err_erase:
	while (i--)
		xa_erase(&v->dma.pin_pages, idx + i);
	dl_dma_unpin_chunk(v, iova, n, bulk, bt->pages);
	return ret;
}

/*
 * The first IOVA at or after @p that is not pinned, and in *@gap_end where
 * that hole ends (at most @end).
 */
static u64 dl_dma_next_gap(struct dl_vdev *v, u64 p, u64 end, u64 *gap_end)
{
	struct dl_pin_extent *e;
	bool moved;

	lockdep_assert_held(&v->dma.lock);

	do {
		moved = false;
		list_for_each_entry(e, &v->dma.pinned, node) {
			u64 e_end = e->iova + (e->npages << PAGE_SHIFT);

			if (e->iova <= p && p < e_end) {
				p = e_end;
				moved = true;
			}
		}
	} while (moved && p < end);

	*gap_end = end;
	list_for_each_entry(e, &v->dma.pinned, node)
		if (e->iova > p && e->iova < *gap_end)
			*gap_end = e->iova;
	return p;
}

/*
 * Pins what VFIO lets us pin of [iova, end) of span @s, none of it pinned
 * yet. Chunks end at 2 MiB boundaries where the span is a memslot (bulk
 * pinning anchors each chunk) or is probed: when probing, a 2 MiB block
 * whose first page is not mapped is skipped whole, since probing 4 GiB
 * page by page would take a million calls.
 */
static int dl_dma_pin_gap(struct dl_dma_batch *bt,
			  const struct dl_dma_span *s, u64 iova, u64 end)
{
	u64 left = (end - iova) >> PAGE_SHIFT, i;
	int n, ret;

	while (left) {
		n = min_t(u64, left, DL_PIN_BATCH);
		if (bt->probe || s->hva)
			n = min_t(u64, n, (ALIGN(iova + 1, SZ_2M) - iova) >> PAGE_SHIFT);
		if (bt->probe && IS_ALIGNED(iova, SZ_2M)) {
			ret = dl_dma_pin_chunk(bt, iova, 1, 0);
			if (ret < 0)
				return ret;
			if (ret == DL_PIN_REFUSED)
				goto next;
			iova += PAGE_SIZE;
			left--;
			if (!--n)
				continue;
		}
		ret = dl_dma_pin_chunk(bt, iova, n,
				       s->hva ? s->hva + (iova - s->iova) : 0);
		if (ret < 0)
			return ret;
		/* Some page is not mapped: pin page by page, skip those. */
		for (i = 0; ret == DL_PIN_REFUSED && i < n; i++) {
			ret = dl_dma_pin_chunk(bt, iova + (i << PAGE_SHIFT), 1,
					       0);
			if (ret < 0)
				return ret;
			if (i + 1 < n)
				ret = DL_PIN_REFUSED;
		}
next:
		iova += (u64)n << PAGE_SHIFT;
		left -= n;
		cond_resched();
	}
	return 0;
}

/* Pins what VFIO lets us pin of a span and is not pinned yet. */
static int dl_dma_pin_span(struct dl_dma_batch *bt, const struct dl_dma_span *s)
{
	u64 end = s->iova + (s->npages << PAGE_SHIFT), p = s->iova, gap_end;
	int ret;

	for (;;) {
		p = dl_dma_next_gap(bt->v, p, end, &gap_end);
		if (p >= end)
			return 0;
		ret = dl_dma_pin_gap(bt, s, p, gap_end);
		if (ret)
			return ret;
		p = gap_end;
	}
}

/*
 * The guest's writable memslots (every one), or the probe range without
 * KVM; with @readonly its read-only memslots instead. In a new array;
 * *@nr set to their count.
 */
static struct dl_dma_span *dl_dma_slots(struct dl_vdev *v, bool readonly,
					unsigned int *nr)
{
	struct kvm *kvm = v->vdev.kvm;
	struct kvm_memory_slot *slot;
	struct kvm_memslots *slots;
	struct dl_dma_span *spans;
	unsigned int max = 0;
	int idx, bkt;

	*nr = 0;
	if (!kvm) {
		spans = kzalloc(sizeof(*spans), GFP_KERNEL);
		if (spans && !readonly) {
			spans->npages = SZ_4G >> PAGE_SHIFT;
			*nr = 1;
		}
		return spans;
	}
	idx = srcu_read_lock(&kvm->srcu);
	slots = kvm_memslots(kvm);
	kvm_for_each_memslot(slot, bkt, slots)
		max++;
	spans = kvcalloc(max ?: 1, sizeof(*spans), GFP_KERNEL);
	if (spans) {
		kvm_for_each_memslot(slot, bkt, slots) {
			if (!!(slot->flags & KVM_MEM_READONLY) != readonly ||
			    !slot->npages)
				continue;
			spans[*nr].iova = (u64)slot->base_gfn << PAGE_SHIFT;
			spans[*nr].npages = slot->npages;
			spans[*nr].hva = slot->userspace_addr;
			(*nr)++;
		}
	}
	srcu_read_unlock(&kvm->srcu, idx);
	return spans;
}

/* The memory to pin: the guest's writable memslots, or the probe range. */
static struct dl_dma_span *dl_dma_spans(struct dl_vdev *v, unsigned int *nr)
{
	return dl_dma_slots(v, false, nr);
}

/*
 * Notes that QEMU unmapped [@start, @end), which was pinned: the re-pin
 * waits for it to be mapped again. Past DL_DMA_HOLES ranges, all of them
 * become the one range that spans them.
 */
static void dl_dma_hole_add(struct dl_vdev *v, u64 start, u64 end)
{
	unsigned int i;

	lockdep_assert_held(&v->dma.lock);

	if (v->dma.nholes < DL_DMA_HOLES) {
		v->dma.holes[v->dma.nholes].start = start;
		v->dma.holes[v->dma.nholes].end = end;
		v->dma.nholes++;
		return;
	}
	for (i = 0; i < v->dma.nholes; i++) {
		start = min(start, v->dma.holes[i].start);
		end = max(end, v->dma.holes[i].end);
	}
	v->dma.holes[0].start = start;
	v->dma.holes[0].end = end;
	v->dma.nholes = 1;
}

/* Bytes of [@a, @z) in @ro, the read-only memslots. */
static u64 dl_dma_in_slots(const struct dl_dma_span *ro, unsigned int nr,
			   u64 a, u64 z)
{
	u64 in = 0, s, t;
	unsigned int i;

	for (i = 0; i < nr; i++) {
		s = max(a, ro[i].iova);
		t = min(z, ro[i].iova + (ro[i].npages << PAGE_SHIFT));
		if (s < t)
			in += t - s;
	}
	return in;
}

/*
 * Bytes of the holes that are not pinned again yet, less what the guest
 * now has as read-only memory (the BIOS write-protects its shadow area:
 * VFIO maps that read-only, and it is never pinned again). Memory with no
 * memslot is waited for: QEMU may add the memslot only after VFIO's map.
 * Without KVM (a userspace driver unmaps its own buffers, for good)
 * nothing is waited for.
 */
static u64 dl_dma_holes_left(struct dl_vdev *v)
{
	struct dl_dma_span *ro;
	unsigned int nr, i;
	u64 left = 0, p, end, gap_end;

	lockdep_assert_held(&v->dma.lock);

	if (!v->dma.nholes || !v->vdev.kvm)
		return 0;
	ro = dl_dma_slots(v, true, &nr);
	if (!ro)
		return 0;
	for (i = 0; i < v->dma.nholes; i++) {
		end = v->dma.holes[i].end;
		for (p = v->dma.holes[i].start; p < end; p = gap_end) {
			p = dl_dma_next_gap(v, p, end, &gap_end);
			if (p < end)
				left += gap_end - p -
					dl_dma_in_slots(ro, nr, p, gap_end);
		}
	}
	kvfree(ro);
	return left;
}

/* What becomes of pages unpinned for VFIO. */
enum dl_unpin_how {
	DL_UNPIN_FREE,		/* the lender acknowledged their unmap */
	DL_UNPIN_QUARANTINE,	/* it did not: held until the lease settles */
	DL_UNPIN_KEEP,		/* the lender keeps them mapped: kept */
};

/* Gives VFIO back its pins in [@s, @t), in calls of at most DL_PIN_BATCH. */
static void dl_dma_vfio_unpin(struct dl_vdev *v, u64 s, u64 t)
{
	u64 n;

	for (n = s; n < t; n += (u64)DL_PIN_BATCH << PAGE_SHIFT)
		vfio_unpin_pages(&v->vdev, n,
				 min_t(u64, DL_PIN_BATCH, (t - n) >> PAGE_SHIFT));
}

/*
 * Unpins [s, t), pages of one extent. Unless the lender acknowledged their
 * unmap, each page is quarantined or kept first: its pin (VFIO's, or ours
 * for bulk-pinned pages) is given back, but the page stays out of the
 * allocator until the lease settles (lease.c), or until the re-pin finds
 * it again or has it unmapped.
 */
static void dl_dma_unpin(struct dl_vdev *v, u64 s, u64 t,
			 enum dl_unpin_how how)
{
	struct dl_win_run freed = { .acked = true }, held = {};
	struct dl_borrower *b = v->b;
	unsigned long nbulk = 0;
	struct page *page;
	u64 n, run;
	void *entry;

	lockdep_assert_held(&v->dma.lock);

	mutex_lock(&b->lock);
	/* The release work may have settled the lease meanwhile. */
	if (v->sess.lease && v->sess.lease->settled)
		how = DL_UNPIN_FREE;
	for (n = s; n < t; n += PAGE_SIZE) {
		entry = xa_load(&v->dma.pin_pages, n >> PAGE_SHIFT);
		page = xa_untag_pointer(entry);
		if (how == DL_UNPIN_FREE || !page) {
			dl_dma_win_take(v, n >> PAGE_SHIFT, &freed);
			goto unpin_ours;
		}
		/* A kept page keeps its window space too. */
		if (how == DL_UNPIN_KEEP &&
		    !xa_err(xa_store(&v->dma.kept, n >> PAGE_SHIFT, page,
				     GFP_KERNEL))) {
			get_page(page);
			v->dma.nkept++;
			goto unpin_ours;
		}
		/*
		 * Not kept (no memory for the entry): quarantined instead.
		 * The lender still maps it, so the re-pin's map of this IOVA
		 * is refused (-EEXIST) and everything is mapped anew.
		 */
		dl_dma_win_take(v, n >> PAGE_SHIFT, &held);
		if (WARN_ON_ONCE(!v->sess.lease))
			get_page(page);	/* nobody to hold it: leak it */
		else
			dl_lease_quarantine(b, v->sess.lease, page);
unpin_ours:
		if (xa_pointer_tag(entry) == DL_PIN_TAG_BULK) {
			unpin_user_page(page);
			nbulk++;
		}
	}
	dl_dma_win_flush(v, &freed);
	dl_dma_win_flush(v, &held);
	mutex_unlock(&b->lock);
	/* VFIO's pins: the runs between the bulk-pinned pages. */
	for (n = s, run = s; n < t; n += PAGE_SIZE) {
		entry = xa_erase(&v->dma.pin_pages, n >> PAGE_SHIFT);
		if (xa_pointer_tag(entry) != DL_PIN_TAG_BULK)
			continue;
		dl_dma_vfio_unpin(v, run, n);
		run = n + PAGE_SIZE;
	}
	dl_dma_vfio_unpin(v, run, t);
	dl_dma_unaccount(v, nbulk);
	v->dma.npinned -= (t - s) >> PAGE_SHIFT;
}

/* Unpins what is pinned in [iova, end), trimming the extents. */
static void dl_dma_unpin_range(struct dl_vdev *v, u64 iova, u64 end,
			       enum dl_unpin_how how)
{
	struct dl_pin_extent *e, *tmp, *split;
	u64 s, t;

	lockdep_assert_held(&v->dma.lock);

	list_for_each_entry_safe(e, tmp, &v->dma.pinned, node) {
		u64 e_end = e->iova + (e->npages << PAGE_SHIFT);

		s = max(e->iova, iova);
		t = min(e_end, end);
		if (s >= t)
			continue;
		dl_dma_unpin(v, s, t, how);

		if (s > e->iova && t < e_end) {
			/* A hole in the middle: keep the tail apart. */
			split = kzalloc(sizeof(*split), GFP_KERNEL | __GFP_NOFAIL);
			split->iova = t;
			split->npages = (e_end - t) >> PAGE_SHIFT;
			list_add(&split->node, &e->node);
			e->npages = (s - e->iova) >> PAGE_SHIFT;
		} else if (s > e->iova) {
			e->npages = (s - e->iova) >> PAGE_SHIFT;
		} else if (t < e_end) {
			e->npages = (e_end - t) >> PAGE_SHIFT;
			e->iova = t;
		} else {
			list_del(&e->node);
			kfree(e);
		}
	}
}

/*
 * Has the lender unmap [iova, iova + len) (everything with @all), then
 * unpins what is pinned there and lets go of what is kept there. What the
 * lender did not acknowledge is quarantined, and the device is given up
 * and returned later.
 */
static void dl_dma_release(struct dl_vdev *v, u64 iova, u64 len, bool all)
{
	u64 end = len > U64_MAX - iova ? U64_MAX : iova + len;
	bool acked;

	lockdep_assert_held(&v->dma.lock);

	acked = !dl_dma_lender_unmap(v, iova, len, all);
	if (all && acked)
		v->dma.mapped = false;
	dl_dma_unpin_range(v, iova, end,
			   acked ? DL_UNPIN_FREE : DL_UNPIN_QUARANTINE);
	v->dma.kept_dropped += dl_dma_kept_let_go(v, iova, end, acked);
}

/*
 * Pins what is not pinned yet of the guest's memory and has the lender map
 * it. With @fresh, nothing is pinned before and on error nothing is left.
 */
static int dl_dma_fill(struct dl_vdev *v, bool fresh)
{
	struct dl_dma_batch bt = { .v = v };
	size_t max_payload = dl_fabric_max_payload(v->b->fab);
	unsigned long before = v->dma.npinned;
	u64 t0 = ktime_get_ns();
	struct dl_dma_span *spans;
	unsigned int nr, i;
	int ret = 0, err;

	lockdep_assert_held(&v->dma.lock);

	if (max_payload < struct_size(bt.msg, ranges, 1))
		return -EMSGSIZE;
	bt.max = (max_payload - sizeof(*bt.msg)) / sizeof(bt.msg->ranges[0]);
	bt.msg = kzalloc(max_payload, GFP_KERNEL);
	bt.reqs = kcalloc(DL_MAP_INFLIGHT, sizeof(*bt.reqs), GFP_KERNEL);
	bt.pages = kcalloc(DL_PIN_BATCH, sizeof(*bt.pages), GFP_KERNEL);
	spans = dl_dma_spans(v, &nr);
	if (!bt.msg || !bt.reqs || !bt.pages || !spans) {
		ret = -ENOMEM;
		goto out_free;
	}

	bt.probe = !v->vdev.kvm;
	for (i = 0; i < nr && !ret; i++)
		ret = dl_dma_pin_span(&bt, &spans[i]);
	if (!ret)
		ret = dl_dma_flush(&bt);
	/* Every answer, even after a failure: the lender may have mapped. */
	err = dl_dma_drain(&bt);
	if (!ret)
		ret = err;
	if (bt.sent) {
		v->dma.mapped = true;
		v->dma.map_gen++;
	}
	if (v->dma.npinned > before) {
		v->dma.fill.fills++;
		v->dma.fill.ns += ktime_get_ns() - t0;
		v->dma.fill.pages += v->dma.npinned - before;
		v->dma.fill.runs += bt.nruns;
		v->dma.fill.msgs += bt.nmsgs;
	}
	if (fresh && !ret && !v->dma.npinned)
		ret = -ENOENT;
	if (ret && fresh) {
		dl_dma_release(v, 0, U64_MAX, true);
	} else if (ret) {
		/*
		 * Some pages pinned now may never have reached the lender, and
		 * no later fill would send them: they are not gaps. Unmap and
		 * unpin everything (unmapping what is not mapped is harmless)
		 * so that the retry maps it all again; meanwhile it is one
		 * more window, counted as such. "Everything" is the all flag
		 * on the wire: the lender refuses 0 + U64_MAX as a range.
		 */
		dl_dma_release(v, 0, U64_MAX, true);
		if (!v->dma.window_start)
			v->dma.window_start = jiffies ?: 1;
	} else if (v->dma.npinned != before) {
		dev_info_ratelimited(dl_vdev_dev(v),
				     "DMA: %lu MiB more guest memory pinned, mapped in %u runs (%u messages); %lu MiB in all\n",
				     (v->dma.npinned - before) >> (20 - PAGE_SHIFT),
				     bt.nruns, bt.nmsgs,
				     v->dma.npinned >> (20 - PAGE_SHIFT));
	}
out_free:
	kvfree(spans);
	kfree(bt.pages);
	kfree(bt.reqs);
	kfree(bt.msg);
	return ret;
}

/**
 * dl_dma_enable() - pin the guest's memory and have the lender map it.
 * @v: the mdev, borrowed; caller holds v->lock.
 *
 * Return: 0, or -errno with nothing pinned or mapped.
 */
int dl_dma_enable(struct dl_vdev *v)
{
	int ret;

	lockdep_assert_held(&v->lock);

	/* The lender's BAR mappings for the device go with the rest. */
	dl_bar_dma_forget(v);
	dl_p2p_forget(v);
	mutex_lock(&v->dma.lock);
	if (v->dma.mapped || !list_empty(&v->dma.pinned)) {
		/* Still mapped from before (BME never cleared): start over. */
		dl_dma_release(v, 0, U64_MAX, true);
	}
	v->dma.nholes = 0;
	ret = dl_dma_fill(v, true);
	v->dma.on = !ret;
	mutex_unlock(&v->dma.lock);
	return ret;
}

/*
 * The re-pin is done: the window between QEMU's unmap and its map again
 * is closed. The device kept what came back on the same pages; DMA to
 * pages that moved, between their unmap and map, and to what never came
 * back faulted (and a device like QEMU's NVMe reports success anyway), so
 * the window is counted and reported.
 */
static void dl_dma_window_closed(struct dl_vdev *v)
{
	unsigned int ms;

	lockdep_assert_held(&v->dma.lock);

	if (!v->dma.window_start)
		return;
	ms = jiffies_to_msecs(jiffies - v->dma.window_start);
	v->dma.window_ms += ms;
	v->dma.window_start = 0;
	dev_info_ratelimited(dl_vdev_dev(v),
			     "guest memory that QEMU unmapped was pinned again after %u ms (%u such windows, %llu ms in all); pages kept mapped across them: %llu, moved: %llu, not mapped again: %llu\n",
			     ms, v->dma.windows, v->dma.window_ms, v->dma.kept_same,
			     v->dma.kept_moved, v->dma.kept_dropped);
}

/*
 * Kept pages that are read-only guest memory now (the BIOS write-protects
 * its shadow area: VFIO maps it read-only, and it is never pinned again)
 * are unmapped at once, not when the wait ends.
 */
static void dl_dma_drop_kept_readonly(struct dl_vdev *v)
{
	struct dl_dma_span *ro;
	unsigned int nr, i;

	lockdep_assert_held(&v->dma.lock);

	if (!v->dma.nkept)
		return;
	ro = dl_dma_slots(v, true, &nr);
	if (!ro)
		return;
	for (i = 0; i < nr; i++)
		v->dma.kept_dropped +=
			dl_dma_drop_kept(v, ro[i].iova,
					 ro[i].iova + (ro[i].npages << PAGE_SHIFT));
	kvfree(ro);
}

/*
 * A re-pin went through. If QEMU has not mapped all it unmapped again yet,
 * looks again shortly (the window stays open, kept pages stay mapped); it
 * gives up waiting after DL_REPIN_WAIT_S, has what is still kept unmapped
 * and says how much that is.
 */
static void dl_dma_repin_settle(struct dl_vdev *v)
{
	u64 left;

	lockdep_assert_held(&v->dma.lock);

	dl_dma_drop_kept_readonly(v);
	left = dl_dma_holes_left(v);

	if (left && v->dma.window_start &&
	    time_before(jiffies, v->dma.window_start +
				 (unsigned long)DL_REPIN_WAIT_S * HZ)) {
		mod_delayed_work(system_unbound_wq, &v->dma.repin_work,
				 msecs_to_jiffies(DL_REPIN_RETRY_MS));
		return;
	}
	if (left)
		dev_warn_ratelimited(dl_vdev_dev(v),
				     "%llu KiB of guest memory that QEMU unmapped were not mapped again within %u s; unmapped, the device's DMA there faults\n",
				     left >> 10, DL_REPIN_WAIT_S);
	v->dma.kept_dropped += dl_dma_drop_kept(v, 0, U64_MAX);
	v->dma.nholes = 0;
	dl_dma_window_closed(v);
}

/*
 * Pins and maps again what VFIO's dma_unmap() took away while bus
 * mastering stays on (&dl_vdev_dma.repin_work).
 *
 * QEMU unmaps guest memory from the container and maps it again when the
 * guest's memory layout changes (e.g. when the BIOS write-protects its
 * shadow ROM area, the RAM section is split); VFIO tells mdevs of the
 * unmap only. Runs a moment later, when the new mapping is in place.
 */
static void dl_dma_repin_work(struct work_struct *work)
{
	struct dl_vdev *v = container_of(to_delayed_work(work), struct dl_vdev,
					 dma.repin_work);
	int ret;

	mutex_lock(&v->lock);
	mutex_lock(&v->dma.lock);
	if (v->dma.unmaps_open && v->open && v->dma.on) {
		/* Queued again when the last of them returns. */
		v->dma.repin_held++;
	} else if (!v->open || !v->dma.on ||
		   READ_ONCE(v->sess.state) != DL_VDEV_BORROWED) {
		/* Unmapped, or quarantined if the lender cannot be told. */
		v->dma.kept_dropped += dl_dma_drop_kept(v, 0, U64_MAX);
		v->dma.nholes = 0;
	} else {
		ret = dl_dma_fill(v, false);
		if (!ret) {
			v->dma.repin_tries = 0;
			dl_dma_repin_settle(v);
		} else if (++v->dma.repin_tries < DL_REPIN_TRIES) {
			dev_warn_ratelimited(dl_vdev_dev(v),
					     "cannot map guest memory again: %d; retrying\n",
					     ret);
			mod_delayed_work(system_unbound_wq, &v->dma.repin_work,
					 msecs_to_jiffies(DL_REPIN_RETRY_MS));
		} else {
			dev_err_ratelimited(dl_vdev_dev(v),
					    "cannot map guest memory again after %u tries: %d; giving the device up\n",
					    v->dma.repin_tries, ret);
			mutex_lock(&v->b->lock);
			dl_session_lost(v, "guest memory cannot be mapped");
			mutex_unlock(&v->b->lock);
		}
	}
	mutex_unlock(&v->dma.lock);
	mutex_unlock(&v->lock);
}

/**
 * dl_dma_disable() - have the lender unmap everything, then unpin it.
 * @v: the mdev; caller holds v->lock.
 */
void dl_dma_disable(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	dl_bar_dma_forget(v);
	dl_p2p_forget(v);
	mutex_lock(&v->dma.lock);
	v->dma.on = false;
	v->dma.nholes = 0;
	if (v->dma.mapped || !list_empty(&v->dma.pinned))
		dl_dma_release(v, 0, U64_MAX, true);
	mutex_unlock(&v->dma.lock);
}

/**
 * dl_dma_lease_gone() - the session let go of its lease at close: what
 *	the lender may still map of the mdev is the lease's business now.
 * @v: the mdev, closing, DMA disabled; caller holds v->lock.
 */
void dl_dma_lease_gone(struct dl_vdev *v)
{
	lockdep_assert_held(&v->lock);

	mutex_lock(&v->dma.lock);
	v->dma.mapped = false;
	mutex_unlock(&v->dma.lock);
}

/**
 * struct dl_dma_unmap_end - a task work on the caller of VFIO's unmap,
 *	run when the unmap has returned.
 * @cb: the task work.
 * @v: the mdev it told, with a reference on its device.
 */
struct dl_dma_unmap_end {
	struct callback_head cb;
	struct dl_vdev *v;
};

/* The unmap returned: the re-pin may pin the range again. */
static void dl_dma_unmap_ended(struct callback_head *cb)
{
	struct dl_dma_unmap_end *end = container_of(cb, struct dl_dma_unmap_end,
						    cb);
	struct dl_vdev *v = end->v;

	mutex_lock(&v->dma.lock);
	if (!WARN_ON_ONCE(!v->dma.unmaps_open) && !--v->dma.unmaps_open &&
	    v->dma.window_start)
		mod_delayed_work(system_unbound_wq, &v->dma.repin_work,
				 msecs_to_jiffies(DL_REPIN_DELAY_MS));
	mutex_unlock(&v->dma.lock);
	put_device(&v->vdev.device);
	kfree(end);
}

/*
 * Holds the re-pin back until the current task's unmap has returned (see
 * the top of this file). A kernel thread (or an exiting task) has no
 * return to wait for: VFIO does not loop on it, the re-pin only waits.
 */
static void dl_dma_unmap_ends(struct dl_vdev *v)
{
	struct dl_dma_unmap_end *end;

	lockdep_assert_held(&v->dma.lock);

	if (current->flags & PF_KTHREAD)
		return;
	end = kzalloc(sizeof(*end), GFP_KERNEL);
	if (!end)
		return;
	end->v = v;
	get_device(&v->vdev.device);
	init_task_work(&end->cb, dl_dma_unmap_ended);
	if (task_work_add(current, &end->cb, TWA_RESUME)) {
		put_device(&v->vdev.device);
		kfree(end);
		return;
	}
	v->dma.unmaps_open++;
}

/**
 * dl_dma_unmap_range() - VFIO's dma_unmap: unpin what lies in a range;
 *	keep it mapped until the re-pin while bus mastering is on, unmap it
 *	first otherwise. Safe at any time, a no-op when nothing is pinned.
 * @v: the mdev.
 * @iova: start.
 * @len: bytes.
 */
void dl_dma_unmap_range(struct dl_vdev *v, u64 iova, u64 len)
{
	struct dl_pin_extent *e;
	u64 s = ALIGN_DOWN(iova, PAGE_SIZE);
	u64 t = len > U64_MAX - iova ? U64_MAX : iova + len;
	u64 hole_start = U64_MAX, hole_end = 0;
	bool hit = false;

	mutex_lock(&v->dma.lock);
	list_for_each_entry(e, &v->dma.pinned, node) {
		u64 e_end = e->iova + (e->npages << PAGE_SHIFT);

		if (e->iova < t && s < e_end) {
			hole_start = min(hole_start, max(e->iova, s));
			hole_end = max(hole_end, min(e_end, t));
			hit = true;
		}
	}
	/*
	 * With KVM this is QEMU changing the guest's memory layout: the
	 * lender keeps its mapping until the re-pin. Without, a userspace
	 * driver unmaps its buffer for good, and expects the device to lose
	 * it now, as on vfio-pci.
	 */
	if (hit && v->dma.on && v->vdev.kvm &&
	    READ_ONCE(v->sess.state) == DL_VDEV_BORROWED && dl_dma_lender_may_map(v))
		dl_dma_unpin_range(v, s, t, DL_UNPIN_KEEP);
	else if (hit)
		dl_dma_release(v, s, t - s, false);
	if (hit) {
		/* Pushed back by every unmap: QEMU maps again after the last. */
		if (v->dma.on) {
			dl_dma_hole_add(v, hole_start, hole_end);
			if (!v->dma.window_start)
				v->dma.window_start = jiffies ?: 1;
			v->dma.windows++;
			dl_dma_unmap_ends(v);
			mod_delayed_work(system_unbound_wq, &v->dma.repin_work,
					 msecs_to_jiffies(DL_REPIN_DELAY_MS));
		}
	}
	mutex_unlock(&v->dma.lock);
}

/**
 * dl_dma_init() - set up the DMA part of a new mdev: nothing pinned.
 * @v: the mdev, being initialized.
 */
void dl_dma_init(struct dl_vdev *v)
{
	mutex_init(&v->dma.lock);
	INIT_LIST_HEAD(&v->dma.pinned);
	xa_init(&v->dma.pin_pages);
	xa_init(&v->dma.kept);
	xa_init(&v->dma.win);
	INIT_DELAYED_WORK(&v->dma.repin_work, dl_dma_repin_work);
}

/**
 * dl_dma_cancel_repin() - wait for a re-pin under way and cancel one
 *	pending, at close, before v->lock is taken (the re-pin takes it).
 * @v: the mdev.
 */
void dl_dma_cancel_repin(struct dl_vdev *v)
{
	cancel_delayed_work_sync(&v->dma.repin_work);
}

/**
 * dl_dma_wrote_since() - whether the device may have written guest memory
 *	since a mark: it is mapped for its DMA now, or was mapped again since.
 * @v: the mdev; caller holds v->lock.
 * @mark: what the last call left here (0 at first); updated.
 *
 * For device dirty logging (migrate.c): only the lender's IOMMU sees the
 * device's writes, and it does not say which pages they hit, so every
 * page the device may reach counts as written while it may reach it.
 *
 * Return: true if it may have.
 */
bool dl_dma_wrote_since(struct dl_vdev *v, u64 *mark)
{
	bool wrote;

	lockdep_assert_held(&v->lock);

	mutex_lock(&v->dma.lock);
	wrote = v->dma.mapped || v->dma.map_gen != *mark;
	*mark = v->dma.map_gen;
	mutex_unlock(&v->dma.lock);
	return wrote;
}

/**
 * dl_dma_destroy() - the DMA part of an mdev being freed; nothing is
 *	pinned or kept any more.
 * @v: the mdev.
 */
void dl_dma_destroy(struct dl_vdev *v)
{
	cancel_delayed_work_sync(&v->dma.repin_work);
	WARN_ON_ONCE(v->dma.nkept);
	WARN_ON_ONCE(v->dma.nwin);
	xa_destroy(&v->dma.kept);
	xa_destroy(&v->dma.win);
	xa_destroy(&v->dma.pin_pages);
	mutex_destroy(&v->dma.lock);
}
