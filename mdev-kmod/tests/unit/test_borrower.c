// SPDX-License-Identifier: GPL-2.0
/*
 * borrower/dma.c: pinning guest memory, coalescing it into runs for the
 * lender, the extents that say what is pinned, partial unmaps, the cap on
 * pinned pages; and borrower/config.c: the virtual config space (BAR
 * sizing, MSI and MSI-X, command with bus master, FLR, the split of a
 * write among regions). VFIO, the guest's memory and the lender are fakes
 * that log what they are asked.
 */
#include <stdio.h>

#pragma GCC diagnostic push
/* The kernel builds with -Wextra but without these (Makefile.extrawarn). */
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "../../include/dl_dma_rules.h"
/* dma.c's setup and teardown (dl_dma_init(), dl_dma_destroy()), unused here. */
#ifndef INIT_DELAYED_WORK
#define INIT_DELAYED_WORK(dw, fn)	((void)(fn), (dw)->work.queued = 0)
#endif
#ifndef cancel_delayed_work_sync
#define cancel_delayed_work_sync(dw)	((dw)->work.queued = 0)
#endif
#ifndef mutex_init
#define mutex_init(m)			((void)(m))
#endif
#ifndef xa_init
#define xa_init(xa)			memset(xa, 0, sizeof(*(xa)))
#endif
#ifndef mutex_destroy
#define mutex_destroy(m)		((void)(m))
#endif
#include "../../borrower/dma.c"
#include "../../borrower/config.c"
#include "../../borrower/bar_dma.c"
#include "../../borrower/p2p.c"
#include <linux/task_work.h>
#pragma GCC diagnostic pop

#include "unit.h"

#define MiB		BIT_ULL(20)
#define KiB		BIT_ULL(10)
/* Guest pages the fake knows: 32 MiB; everything above is unmapped. */
#define NPFN		8192

bool dl_bulk_pin = true;
unsigned long dl_window_max_pages;
static struct dl_borrower b;
static struct dl_vdev v;
static struct dl_lease lease;
static struct kvm kvm;
static struct kvm_memory_slot slots[8];

/*
 * Guest memory as VFIO sees it: mapped ranges and the host pages; with
 * @moved, QEMU mapped the range on other pages than before.
 */
struct gmap {
	u64 iova, len, phys;
	bool moved;
};

static struct gmap gmaps[8];
static unsigned int ngmaps;
static struct page pages[NPFN], moved_pages[NPFN];
/* Pins of each IOVA's page: VFIO's, and bulk ones (pin_user_pages_remote). */
static int pincount[NPFN], gup_pins[NPFN];
static unsigned int npin_calls, bad_pin_calls, bad_unpins, ngup_calls;
/* The VMM: its memory maps IOVA i at HVA_BASE + i (see add_slot()). */
#define HVA_BASE	0x7f0000000000ULL
static struct mm_struct mm;
/* The VMM's thread, and a kworker (no memory of its own). */
static struct task_struct vmm_task = { .mm = &mm }, worker_task;
/* Most pages the VMM may lock; 0 for no limit. */
static long locked_limit;

/* What the lender was asked. */
struct run {
	u64 iova, addr, len;
};

static struct run runs[64];
static unsigned int nruns, nmaps, nunmaps, nquarantined, nlost, nresets;
static struct dl_dma_unmap last_unmap;
static unsigned int nunmaps_refused;
static int map_ret, unmap_ret, cread_ret;
/* DL_MSG_BAR_DMA: how many, the last one, and the lender's answer. */
static unsigned int nbar_dma;
static struct dl_bar_dma last_bar_dma;
static int bar_dma_ret;
/* DL_MSG_P2P_DMA requests: how many, the last, by whom; the answer. */
static unsigned int np2p;
static struct dl_p2p_dma last_p2p;
static struct dl_vdev *last_p2p_by;
static unsigned int nexport;
static int export_ret;
static struct dl_p2p_export last_export;
static struct dl_vdev *last_export_by;
static int p2p_ret;
static size_t max_payload;
/* The order of events: 'M' map, 'U' unmap, 'W' config write. */
static char events[64];
static unsigned int nevents;

/* The remote device's config space, and the config writes sent. */
static u8 rcfg[PCI_CFG_SPACE_SIZE];
static struct dl_cfg_access cwrites[16];
static unsigned int ncwrites, ncreads, ncblocks;
/* How the fake lender answers DL_MSG_CFG_READ_BLOCK. */
static enum { BLOCKS_OK, BLOCKS_UNKNOWN, BLOCKS_LIE } blocks;

static void event(char c)
{
	if (nevents < sizeof(events) - 1)
		events[nevents++] = c;
}

static struct gmap *gmap_find(u64 iova)
{
	unsigned int i;

	for (i = 0; i < ngmaps; i++)
		if (iova >= gmaps[i].iova && iova - gmaps[i].iova < gmaps[i].len)
			return &gmaps[i];
	return NULL;
}

int vfio_pin_pages(struct vfio_device *device, dma_addr_t iova, int npage,
		   int prot, struct page **out)
{
	int i;

	npin_calls++;
	if (device != &v.vdev || prot != (IOMMU_READ | IOMMU_WRITE) ||
	    npage < 1 || npage > (int)VFIO_PIN_PAGES_MAX_ENTRIES ||
	    iova & (PAGE_SIZE - 1)) {
		bad_pin_calls++;
		return -EINVAL;
	}
	for (i = 0; i < npage; i++)
		if (!gmap_find(iova + ((u64)i << PAGE_SHIFT)))
			return -EFAULT;
	for (i = 0; i < npage; i++) {
		u64 a = iova + ((u64)i << PAGE_SHIFT);
		struct gmap *g = gmap_find(a);
		u64 pfn = a >> PAGE_SHIFT;
		struct page *pg = g->moved ? &moved_pages[pfn] : &pages[pfn];

		pg->phys = g->phys + (a - g->iova);
		pincount[pfn]++;
		out[i] = pg;
	}
	return npage;
}

void vfio_unpin_pages(struct vfio_device *device, dma_addr_t iova, int npage)
{
	int i;

	(void)device;
	for (i = 0; i < npage; i++) {
		u64 pfn = (iova >> PAGE_SHIFT) + i;

		if (pfn >= NPFN || pincount[pfn] <= 0)
			bad_unpins++;
		else
			pincount[pfn]--;
	}
}

long pin_user_pages_remote(struct mm_struct *m, unsigned long start,
			   unsigned long nr_pages, unsigned int gup_flags,
			   struct page **out, int *locked)
{
	unsigned long i;

	ngup_calls++;
	if (m != &mm || locked || start < HVA_BASE || start & (PAGE_SIZE - 1) ||
	    gup_flags != (FOLL_WRITE | FOLL_LONGTERM)) {
		bad_pin_calls++;
		return -EINVAL;
	}
	for (i = 0; i < nr_pages; i++) {
		u64 a = start - HVA_BASE + (i << PAGE_SHIFT);
		struct gmap *g = gmap_find(a);
		u64 pfn = a >> PAGE_SHIFT;
		struct page *pg;

		if (!g)
			break;
		pg = g->moved ? &moved_pages[pfn] : &pages[pfn];
		pg->phys = g->phys + (a - g->iova);
		gup_pins[pfn]++;
		out[i] = pg;
	}
	return i ? (long)i : -EFAULT;
}

/* The IOVA page number of a page of the fake. */
static long page_pfn(struct page *page)
{
	if (page >= pages && page < pages + NPFN)
		return page - pages;
	if (page >= moved_pages && page < moved_pages + NPFN)
		return page - moved_pages;
	return -1;
}

void unpin_user_page(struct page *page)
{
	long pfn = page_pfn(page);

	if (pfn < 0 || gup_pins[pfn] <= 0)
		bad_unpins++;
	else
		gup_pins[pfn]--;
}

void unpin_user_pages(struct page **p, unsigned long n)
{
	while (n--)
		unpin_user_page(*p++);
}

int account_locked_vm(struct mm_struct *m, unsigned long n, bool inc)
{
	if (m != &mm || m->users <= 0) {
		bad_unpins++;
		return -EINVAL;
	}
	if (inc && locked_limit && m->locked_vm + (long)n > locked_limit)
		return -ENOMEM;
	m->locked_vm += inc ? (long)n : -(long)n;
	if (m->locked_vm < 0)
		bad_unpins++;
	return 0;
}

size_t dl_fabric_max_payload(struct dl_fabric *fab)
{
	(void)fab;
	return max_payload;
}

static u32 rcfg_get(unsigned int off, unsigned int size)
{
	u32 val = 0;

	memcpy(&val, &rcfg[off], size);
	return le32_to_cpu(val);
}

int dl_session_request(struct dl_vdev *vd, u16 type, const void *data,
		    size_t len, void *resp, size_t resp_size)
{
	const struct dl_dma_map *m = data;
	const struct dl_cfg_access *acc = data;
	struct dl_cfg_access *r = resp;
	u32 i, count;

	(void)vd;
	switch (type) {
	case DL_MSG_DMA_MAP:
		event('M');
		nmaps++;
		count = le32_to_cpu(m->count);
		if (len != struct_size(m, ranges, count) || len > max_payload)
			return -EMSGSIZE;
		for (i = 0; i < count; i++, nruns++)
			if (nruns < ARRAY_SIZE(runs))
				runs[nruns] = (struct run){
					le64_to_cpu(m->ranges[i].iova),
					le64_to_cpu(m->ranges[i].addr),
					le64_to_cpu(m->ranges[i].len) };
		return map_ret;
	case DL_MSG_CFG_READ_BLOCK: {
		const struct dl_cfg_block_req *q = data;
		struct dl_cfg_block *blk = resp;
		unsigned int off = le16_to_cpu(q->offset);

		ncblocks++;
		if (blocks == BLOCKS_UNKNOWN)
			return -EOPNOTSUPP;
		if (len != sizeof(*q) || resp_size < sizeof(*blk) ||
		    off % 4 || le16_to_cpu(q->len) % 4 || !q->len ||
		    le16_to_cpu(q->len) > DL_CFG_BLOCK_MAX ||
		    off + le16_to_cpu(q->len) > PCI_CFG_SPACE_SIZE)
			return -EINVAL;
		memset(blk, 0, sizeof(*blk));
		blk->dev_id = q->dev_id;
		blk->offset = q->offset;
		blk->len = q->len;
		for (i = 0; i < le16_to_cpu(q->len); i += 4)
			put_unaligned_le32(rcfg_get(off + i, 4), &blk->data[i]);
		/* A lender answering for another run than asked. */
		if (blocks == BLOCKS_LIE && off == 0x40)
			blk->offset = cpu_to_le16(0x80);
		return 0;
	}
	case DL_MSG_CFG_READ:
		ncreads++;
		if (cread_ret)
			return cread_ret;
		if (resp_size < sizeof(*r))
			return -EMSGSIZE;
		*r = *acc;
		r->value = cpu_to_le32(rcfg_get(le16_to_cpu(acc->offset),
						acc->size));
		return 0;
	case DL_MSG_P2P_DMA:
		event('P');
		np2p++;
		if (len != sizeof(last_p2p))
			return -EMSGSIZE;
		memcpy(&last_p2p, data, len);
		last_p2p_by = vd;
		return p2p_ret;
	case DL_MSG_P2P_EXPORT:
		nexport++;
		if (len != sizeof(last_export))
			return -EMSGSIZE;
		memcpy(&last_export, data, len);
		last_export_by = vd;
		return export_ret;
	case DL_MSG_BAR_DMA:
		event('B');
		nbar_dma++;
		if (len != sizeof(last_bar_dma))
			return -EMSGSIZE;
		memcpy(&last_bar_dma, data, len);
		return bar_dma_ret;
	case DL_MSG_CFG_WRITE:
		event('W');
		if (ncwrites < ARRAY_SIZE(cwrites))
			cwrites[ncwrites] = *acc;
		ncwrites++;
		return 0;
	}
	return -EPROTO;
}

int dl_fabric_request_urgent(struct dl_fabric *fab, u32 peer, u16 type,
			     const void *data, size_t len,
			     unsigned int timeout_ms)
{
	(void)fab;
	(void)peer;
	(void)timeout_ms;
	event('U');
	nunmaps++;
	if (type != DL_MSG_DMA_UNMAP || len != sizeof(last_unmap))
		return -EPROTO;
	memcpy(&last_unmap, data, len);
	/* What the real lender refuses is refused here too. */
	if (dl_unmap_check(le32_to_cpu(last_unmap.flags),
			   le64_to_cpu(last_unmap.iova),
			   le64_to_cpu(last_unmap.len)) < 0) {
		nunmaps_refused++;
		return -EINVAL;
	}
	return unmap_ret;
}

/* The mdev checks whether it still holds the device. */
static unsigned int nrefused;

void dl_session_refused(struct dl_vdev *vd, int err)
{
	(void)vd;
	if (err)
		nrefused++;
}

/* The config snapshot's reads and the DMA maps, answered at once. */
int dl_fabric_req_submit(struct dl_fabric *fab, u32 peer, u16 type,
			 const void *data, size_t len,
			 struct dl_fabric_req *req)
{
	(void)fab;
	(void)peer;
	(void)len;
	req->status = dl_session_request(&v, type, data, len, req->resp,
				      req->resp_size);
	req->resp_len = req->resp_size;
	return 0;
}

int dl_fabric_req_wait(struct dl_fabric *fab, struct dl_fabric_req *req,
		       unsigned int timeout_ms)
{
	(void)fab;
	(void)timeout_ms;
	return req->status;
}

void dl_lease_quarantine(struct dl_borrower *bb, struct dl_lease *l,
			 struct page *page)
{
	(void)bb;
	(void)page;
	if (l == &lease)
		nquarantined++;
}

/*
 * The fabric's inbound windows: without @win_mode, addresses are physical
 * (the emulated fabric); with it, a bounded window of @win_cap pages from
 * which offsets are handed out in order from WIN_BASE.
 */
#define WIN_BASE	0x41000ULL
static bool win_mode;
static unsigned long win_cap, win_held, win_quarantined, win_calls;
static u64 win_next;

bool dl_fabric_inbound_windowed(struct dl_fabric *fab)
{
	(void)fab;
	return win_mode;
}

int dl_fabric_inbound_map(struct dl_fabric *fab, u32 peer, phys_addr_t phys,
			  u64 len, u64 *addr)
{
	(void)fab;
	(void)peer;
	win_calls++;
	if (!win_mode) {
		*addr = phys;
		return 0;
	}
	if (win_held + (len >> PAGE_SHIFT) > win_cap)
		return -ENOSPC;
	*addr = win_next;
	win_next += len;
	win_held += len >> PAGE_SHIFT;
	return 0;
}

void dl_fabric_inbound_unmap(struct dl_fabric *fab, u32 peer, u64 addr,
			     u64 len)
{
	(void)fab;
	(void)peer;
	if (addr < WIN_BASE || addr + len > win_next ||
	    win_held < (len >> PAGE_SHIFT))
		unit_fail(__FILE__, __LINE__, "unmap of 0x%llx+0x%llx: not handed out",
			  addr, len);
	else
		win_held -= len >> PAGE_SHIFT;
}

void dl_lease_quarantine_win(struct dl_borrower *bb, struct dl_lease *l,
			     u64 addr, u64 len)
{
	(void)bb;
	(void)addr;
	if (l == &lease)
		win_quarantined += len >> PAGE_SHIFT;
}

void dl_session_lost(struct dl_vdev *vd, const char *why)
{
	(void)why;
	nlost++;
	vd->sess.state = DL_VDEV_LOST;
}

int dl_session_borrow(struct dl_vdev *vd)
{
	(void)vd;
	return 0;
}

bool dl_session_incoming(struct dl_vdev *vd)
{
	return vd->sess.state == DL_VDEV_INCOMING;
}

static int fake_reset(struct dl_vdev *vd)
{
	(void)vd;
	nresets++;
	return 0;
}

/* mmap.c's part: decode off zaps ('Z'), on lets faults map ('D'). */
static void fake_mem_decode(struct dl_vdev *vd, bool on)
{
	(void)vd;
	event(on ? 'D' : 'Z');
}

/* What vdev.c registers: the real DMA layer, a counted reset. */
static const struct dl_config_ops config_ops = {
	.dma_enable = dl_dma_enable,
	.dma_disable = dl_dma_disable,
	.reset = fake_reset,
	.mem_decode = fake_mem_decode,
	.bars_changed = dl_bar_dma_sync,
};

static void reset_all(void)
{
	memset(&b, 0, sizeof(b));
	memset(&v, 0, sizeof(v));
	memset(&lease, 0, sizeof(lease));
	memset(&kvm, 0, sizeof(kvm));
	memset(slots, 0, sizeof(slots));
	memset(pages, 0, sizeof(pages));
	memset(moved_pages, 0, sizeof(moved_pages));
	memset(pincount, 0, sizeof(pincount));
	memset(gup_pins, 0, sizeof(gup_pins));
	memset(&mm, 0, sizeof(mm));
	mm.users = 1;
	locked_limit = 0;
	ngup_calls = 0;
	ngmaps = 0;
	npin_calls = 0;
	bad_pin_calls = 0;
	bad_unpins = 0;
	nruns = 0;
	nmaps = 0;
	nunmaps = 0;
	nunmaps_refused = 0;
	kshim_current = &vmm_task;
	nquarantined = 0;
	nlost = 0;
	nresets = 0;
	nevents = 0;
	ncwrites = 0;
	ncreads = 0;
	cread_ret = 0;
	ncblocks = 0;
	nrefused = 0;
	blocks = BLOCKS_OK;
	memset(events, 0, sizeof(events));
	map_ret = 0;
	unmap_ret = 0;
	nbar_dma = 0;
	memset(&last_bar_dma, 0, sizeof(last_bar_dma));
	bar_dma_ret = 0;
	max_payload = 256;
	win_mode = false;
	win_cap = 0;
	win_held = 0;
	win_quarantined = 0;
	win_calls = 0;
	win_next = WIN_BASE;
	dl_window_max_pages = 0;
	v.b = &b;
	INIT_LIST_HEAD(&b.p2p_vdevs);
	INIT_LIST_HEAD(&b.p2p_maps);
	v.sess.dev_id = 7;
	v.sess.state = DL_VDEV_BORROWED;
	v.sess.lease = &lease;
	v.config_ops = &config_ops;
	INIT_LIST_HEAD(&v.dma.pinned);
	kvm.memslots.slots = slots;
	kvm.mm = &mm;
	v.vdev.kvm = &kvm;
}

static void add_slot(u64 iova, u64 len, u32 flags)
{
	struct kvm_memory_slot *s = &slots[kvm.memslots.n++];

	s->base_gfn = iova >> PAGE_SHIFT;
	s->npages = len >> PAGE_SHIFT;
	s->userspace_addr = HVA_BASE + iova;
	s->flags = flags;
}

static void add_gmap(u64 iova, u64 len, u64 phys)
{
	gmaps[ngmaps++] = (struct gmap){ iova, len, phys, false };
}

/* The fake's page at a guest IOVA (not moved). */
static struct page *page_at(u64 iova)
{
	return &pages[iova >> PAGE_SHIFT];
}

/* No page holds a reference of ours. */
static void check_no_refs(void)
{
	unsigned int i;

	for (i = 0; i < NPFN; i++) {
		if (!pages[i].refs && !moved_pages[i].refs)
			continue;
		unit_fail(__FILE__, __LINE__, "page %u: %d refs, moved %d", i,
			  pages[i].refs, moved_pages[i].refs);
		return;
	}
}

static void check_run(unsigned int i, u64 iova, u64 addr, u64 len)
{
	if (i >= nruns) {
		unit_fail(__FILE__, __LINE__, "run %u missing (%u runs)", i,
			  nruns);
		return;
	}
	CHECK_EQ(runs[i].iova, iova);
	CHECK_EQ(runs[i].addr, addr);
	CHECK_EQ(runs[i].len, len);
}

/* The extents, in list order, are exactly @want (iova, pages) pairs. */
static void check_extents(const u64 *want, unsigned int n)
{
	struct dl_pin_extent *e;
	unsigned int i = 0;
	u64 total = 0;

	list_for_each_entry(e, &v.dma.pinned, node) {
		if (i < n) {
			CHECK_EQ(e->iova, want[2 * i]);
			CHECK_EQ(e->npages, want[2 * i + 1]);
		}
		total += e->npages;
		i++;
	}
	CHECK_EQ(i, n);
	CHECK_EQ(total, v.dma.npinned);
}

/* Pages pinned in [from, to): all @want times. */
/* Every page in [@from, @to) is pinned @want times, VFIO's and bulk. */
static void check_pins(u64 from, u64 to, int want)
{
	u64 a, pfn;

	for (a = from; a < to; a += PAGE_SIZE) {
		pfn = a >> PAGE_SHIFT;
		if (pincount[pfn] + gup_pins[pfn] == want)
			continue;
		unit_fail(__FILE__, __LINE__,
			  "page 0x%llx pinned %d + %d times, want %d", a,
			  pincount[pfn], gup_pins[pfn], want);
		return;
	}
}

/* Pages pinned in bulk (not through VFIO) in [@from, @to). */
static int gup_pinned(u64 from, u64 to)
{
	int n = 0;
	u64 a;

	for (a = from; a < to; a += PAGE_SIZE)
		n += gup_pins[a >> PAGE_SHIFT];
	return n;
}

/*
 * QEMU unmaps guest memory through VFIO, whose dma_unmap() calls ours,
 * and the unmap returns to QEMU (its task works run).
 */
static void qemu_unmap(u64 iova, u64 len)
{
	dl_dma_unmap_range(&v, iova, len);
	kshim_run_task_works();
}

static void test_add_run(void)
{
	struct dl_dma_batch bt = { .v = &v, .max = 3 };
	unsigned int i, sent;

	reset_all();
	bt.msg = calloc(1, struct_size(bt.msg, ranges, 3));
	bt.reqs = calloc(DL_MAP_INFLIGHT, sizeof(*bt.reqs));
	max_payload = struct_size(bt.msg, ranges, 3);

	CHECK_EQ(dl_dma_add_run(&bt, 0x0000, 0x10000, 0x1000), 0);
	/* Contiguous in both IOVA and host memory: one run. */
	CHECK_EQ(dl_dma_add_run(&bt, 0x1000, 0x11000, 0x1000), 0);
	/* Host memory not contiguous; then IOVA not contiguous. */
	CHECK_EQ(dl_dma_add_run(&bt, 0x2000, 0x30000, 0x1000), 0);
	CHECK_EQ(dl_dma_add_run(&bt, 0x5000, 0x31000, 0x1000), 0);
	CHECK_EQ(dl_dma_add_run(&bt, 0x6000, 0x32000, 0x2000), 0);
	CHECK_EQ(le32_to_cpu(bt.msg->count), 3);
	CHECK_EQ(le64_to_cpu(bt.msg->ranges[0].len), 0x2000);
	CHECK_EQ(le64_to_cpu(bt.msg->ranges[2].len), 0x3000);
	CHECK_EQ(nmaps, 0);

	/* The message is full: it goes, the run starts the next one. */
	CHECK_EQ(dl_dma_add_run(&bt, 0x8000, 0x40000, 0x1000), 0);
	CHECK_EQ(nmaps, 1);
	CHECK_EQ(nruns, 3);
	check_run(0, 0x0000, 0x10000, 0x2000);
	check_run(1, 0x2000, 0x30000, 0x1000);
	check_run(2, 0x5000, 0x31000, 0x3000);
	CHECK_EQ(le32_to_cpu(bt.msg->count), 1);
	CHECK(bt.sent);
	/* A run still coalesces with the first of the new message. */
	CHECK_EQ(dl_dma_add_run(&bt, 0x9000, 0x41000, 0x1000), 0);
	CHECK_EQ(dl_dma_flush(&bt), 0);
	CHECK_EQ(dl_dma_flush(&bt), 0);		/* nothing left: no message */
	CHECK_EQ(nmaps, 2);
	check_run(3, 0x8000, 0x40000, 0x2000);
	CHECK_EQ(bt.nruns, 4);
	CHECK_EQ(bt.nmsgs, 2);
	CHECK_EQ(le32_to_cpu(bt.msg->dev_id), 7);

	/* Sent without waiting: both answers are still to be taken. */
	CHECK_EQ(bt.inflight, 2);
	CHECK_EQ(dl_dma_drain(&bt), 0);
	CHECK_EQ(bt.inflight, 0);

	/* At most DL_MAP_INFLIGHT out: the next waits for the oldest. */
	for (i = 0; i <= DL_MAP_INFLIGHT; i++) {
		CHECK_EQ(dl_dma_add_run(&bt, 0x100000 + i * 0x2000, 0x90000, 0x1000), 0);
		CHECK_EQ(dl_dma_flush(&bt), 0);
	}
	CHECK_EQ(bt.inflight, DL_MAP_INFLIGHT);
	CHECK_EQ(dl_dma_drain(&bt), 0);

	/*
	 * The lender fails a message: that shows when its answer is taken
	 * (here at the drain), and nothing is sent after it.
	 */
	map_ret = -ETIMEDOUT;
	CHECK_EQ(dl_dma_add_run(&bt, 0x10000, 0x50000, 0x1000), 0);
	CHECK_EQ(dl_dma_flush(&bt), 0);
	CHECK_EQ(dl_dma_drain(&bt), -ETIMEDOUT);
	CHECK_EQ(nrefused, 1);
	sent = nmaps;
	CHECK_EQ(dl_dma_add_run(&bt, 0x20000, 0x60000, 0x1000), 0);
	CHECK_EQ(dl_dma_add_run(&bt, 0x30000, 0x70000, 0x1000), 0);
	CHECK_EQ(dl_dma_add_run(&bt, 0x40000, 0x80000, 0x1000), 0);
	CHECK_EQ(dl_dma_add_run(&bt, 0x50000, 0x90000, 0x1000), -ETIMEDOUT);
	CHECK_EQ(dl_dma_flush(&bt), -ETIMEDOUT);
	CHECK_EQ(nmaps, sent);
	free(bt.reqs);
	free(bt.msg);
}

/*
 * A guest with 640 KiB at 0, a read-only slot at 768 KiB, and 4 MiB at
 * 1 MiB whose host pages jump at 3 MiB and whose page at 4 MiB VFIO
 * cannot pin. Runs go two to a message.
 */
static void setup_guest(void)
{
	reset_all();
	add_slot(0, 640 * KiB, 0);
	add_slot(768 * KiB, 256 * KiB, KVM_MEM_READONLY);
	add_slot(1 * MiB, 4 * MiB, 0);
	add_slot(8 * MiB, 0, 0);
	add_gmap(0, 640 * KiB, 0x100000000ULL);
	add_gmap(768 * KiB, 256 * KiB, 0x180000000ULL);
	add_gmap(1 * MiB, 2 * MiB, 0x200000000ULL);
	add_gmap(3 * MiB, 1 * MiB, 0x300000000ULL);
	add_gmap(4 * MiB + 4 * KiB, 1 * MiB - 4 * KiB, 0x300101000ULL);
	max_payload = struct_size((struct dl_dma_map *)NULL, ranges, 2);
}

static void test_enable(void)
{
	static const u64 ext[] = {
		0, 160, 1 * MiB, 768, 4 * MiB + 4 * KiB, 255,
	};

	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK_EQ(bad_pin_calls, 0);
	CHECK_EQ(nruns, 4);
	CHECK_EQ(nmaps, 2);
	check_run(0, 0, 0x100000000ULL, 640 * KiB);
	check_run(1, 1 * MiB, 0x200000000ULL, 2 * MiB);
	check_run(2, 3 * MiB, 0x300000000ULL, 1 * MiB);
	check_run(3, 4 * MiB + 4 * KiB, 0x300101000ULL, 1 * MiB - 4 * KiB);
	CHECK_EQ(v.dma.npinned, 160 + 1024 - 1);
	check_extents(ext, 3);
	check_pins(0, 640 * KiB, 1);
	check_pins(640 * KiB, 1 * MiB, 0);	/* a hole, and read-only */
	check_pins(1 * MiB, 4 * MiB, 1);
	check_pins(4 * MiB, 4 * MiB + 4 * KiB, 0);
	check_pins(4 * MiB + 4 * KiB, 5 * MiB, 1);
	CHECK_EQ(v.dma.pin_pages.n, v.dma.npinned);
	CHECK(v.dma.mapped);
	CHECK(v.dma.on);
	CHECK_EQ(nunmaps, 0);
	/* What the benchmark reads: one fill, its pages, runs and messages. */
	CHECK_EQ(v.dma.fill.fills, 1);
	CHECK_EQ(v.dma.fill.pages, v.dma.npinned);
	CHECK_EQ(v.dma.fill.runs, 4);
	CHECK_EQ(v.dma.fill.msgs, 2);
}

static void test_unmap_range(void)
{
	static const u64 ext1[] = {
		0, 160, 1 * MiB, 256, 2 * MiB + 8 * KiB, 510,
		4 * MiB + 4 * KiB, 255,
	};
	static const u64 ext2[] = {
		0, 128, 1 * MiB + 8 * KiB, 254, 2 * MiB + 8 * KiB, 510,
		4 * MiB + 4 * KiB, 255,
	};

	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);

	/*
	 * A hole in the middle of an extent splits it. Bus mastering is on:
	 * VFIO gets its pins back, the pages are kept, and the lender is not
	 * asked (it keeps its mapping until the re-pin).
	 */
	nevents = 0;
	qemu_unmap(2 * MiB, 8 * KiB);
	CHECK_EQ(nunmaps, 0);
	check_extents(ext1, 4);
	check_pins(2 * MiB, 2 * MiB + 8 * KiB, 0);
	check_pins(2 * MiB + 8 * KiB, 4 * MiB, 1);
	CHECK_EQ(v.dma.npinned, 1183 - 2);
	CHECK_EQ(v.dma.nkept, 2);
	CHECK_EQ(page_at(2 * MiB)->refs, 1);
	/* Queued by the unmap, and again as it returned to QEMU. */
	CHECK_EQ(v.dma.repin_work.work.queued, 2);
	CHECK_EQ(v.dma.repin_work.delay, DL_REPIN_DELAY_MS);

	/* The tail of one extent and the head of the next. */
	qemu_unmap(512 * KiB, 512 * KiB + 8 * KiB);
	check_extents(ext2, 4);
	check_pins(512 * KiB, 640 * KiB, 0);
	check_pins(0, 512 * KiB, 1);
	CHECK_EQ(v.dma.npinned, 1181 - 32 - 2);
	CHECK_EQ(v.dma.nkept, 36);
	CHECK_EQ(nunmaps, 0);

	/* Nothing pinned there: nothing happens. */
	qemu_unmap(640 * KiB, 384 * KiB);
	CHECK_EQ(nunmaps, 0);
	CHECK_EQ(v.dma.nkept, 36);
	CHECK_EQ(nquarantined, 0);
	CHECK_EQ(bad_unpins, 0);

	/* Bus mastering off: everything goes, the lender told first. */
	dl_dma_disable(&v);
	CHECK_EQ(nunmaps, 1);
	CHECK_EQ(v.dma.nkept, 0);
	CHECK_EQ(v.dma.kept_dropped, 36);
	check_no_refs();
	CHECK_EQ(le32_to_cpu(last_unmap.flags), DL_DMA_UNMAP_F_ALL);
	CHECK(list_empty(&v.dma.pinned));
	CHECK_EQ(v.dma.npinned, 0);
	CHECK_EQ(v.dma.pin_pages.n, 0);
	check_pins(0, 32 * MiB, 0);
	CHECK(!v.dma.mapped);
	CHECK(!v.dma.on);
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);

	/*
	 * Bus mastering off, or no KVM (a userspace driver unmaps its buffer
	 * for good): the lender is asked first.
	 */
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	v.dma.on = false;
	qemu_unmap(2 * MiB, 8 * KiB);
	CHECK_EQ(nunmaps, 1);
	CHECK_EQ(le64_to_cpu(last_unmap.iova), 2 * MiB);
	CHECK_EQ(le64_to_cpu(last_unmap.len), 8 * KiB);
	CHECK_EQ(le32_to_cpu(last_unmap.flags), 0);
	CHECK_EQ(le32_to_cpu(last_unmap.dev_id), 7);
	check_extents(ext1, 4);
	CHECK_EQ(v.dma.nkept, 0);
	CHECK_EQ(v.dma.repin_work.work.queued, 0);
	dl_dma_disable(&v);
	check_no_refs();
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);
}

static void test_unmap_unacked(void)
{
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);

	/* QEMU unmaps: kept, nothing asked. */
	unmap_ret = -ETIMEDOUT;
	qemu_unmap(0, 16 * KiB);
	CHECK_EQ(nunmaps, 0);
	CHECK_EQ(v.dma.nkept, 4);
	check_pins(0, 16 * KiB, 0);
	CHECK_EQ(v.dma.npinned, 1183 - 4);

	/*
	 * Bus mastering off, and the lender does not answer: VFIO gets its
	 * pages, we keep every pinned and kept page in quarantine.
	 */
	dl_dma_disable(&v);
	CHECK_EQ(nunmaps, 1);
	CHECK_EQ(nlost, 1);
	CHECK_EQ(nquarantined, 1183);
	CHECK_EQ(v.dma.npinned, 0);
	CHECK_EQ(v.dma.nkept, 0);
	CHECK(v.dma.mapped);	/* the lender may still hold mappings */
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);

	/* A lender busy resetting answers EIO: asked again, bounded. */
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	unmap_ret = -EIO;
	dl_dma_disable(&v);
	CHECK_EQ(nunmaps, DL_B_BUSY_TRIES + 1);
	CHECK_EQ(nquarantined, 1183);
	CHECK_EQ(nlost, 1);
	xa_destroy(&v.dma.pin_pages);

	/*
	 * The re-pin finds kept pages moved, and the lender does not answer
	 * their unmap: quarantined, the device given up, nothing mapped.
	 */
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	v.open = true;
	qemu_unmap(1 * MiB, 2 * MiB);
	gmaps[2].moved = true;
	unmap_ret = -ETIMEDOUT;
	nmaps = 0;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(nunmaps, 1);
	CHECK(nlost >= 1);
	/*
	 * The moved pages of the first chunk re-pinned ([1 MiB, 2 MiB)), then
	 * everything pinned or still kept (the fill failed).
	 */
	CHECK_EQ(nquarantined, 256 + 1183);
	CHECK_EQ(nmaps, 0);
	CHECK_EQ(v.dma.nkept, 0);
	dl_dma_disable(&v);
	CHECK_EQ(v.dma.npinned, 0);
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);

	/* A settled lease needs no quarantine. */
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	lease.settled = true;
	dl_dma_disable(&v);
	CHECK_EQ(nunmaps, 0);
	CHECK_EQ(nquarantined, 0);
	CHECK_EQ(v.dma.npinned, 0);
	xa_destroy(&v.dma.pin_pages);
}

/*
 * A bounded window (real NTB): runs carry window offsets, given back
 * only once the lender acknowledged their unmap, quarantined with their
 * pages when it did not; a map beyond the budget fails the whole fill.
 */
static void test_window(void)
{
	unsigned int i;
	u64 sum = 0;

	setup_guest();
	win_mode = true;
	win_cap = 4096;
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK_EQ(v.dma.npinned, 1183);
	CHECK_EQ(v.dma.nwin, 1183);
	CHECK_EQ(win_held, 1183);
	/* Offsets handed out in order coalesce where the IOVAs do. */
	CHECK_EQ(nruns, 3);
	check_run(0, 0, WIN_BASE, 640 * KiB);
	check_run(1, 1 * MiB, WIN_BASE + 640 * KiB, 3 * MiB);
	check_run(2, 4 * MiB + 4 * KiB, WIN_BASE + 640 * KiB + 3 * MiB,
		  1 * MiB - 4 * KiB);
	for (i = 0; i < nruns; i++)
		sum += runs[i].len;
	CHECK_EQ(sum, 1183 * PAGE_SIZE);

	/* QEMU unmaps under bus mastering: kept, window space too. */
	qemu_unmap(0, 16 * KiB);
	CHECK_EQ(v.dma.nkept, 4);
	CHECK_EQ(v.dma.nwin, 1183);
	CHECK_EQ(win_held, 1183);

	/* Acknowledged unmap: every offset back to the fabric. */
	dl_dma_disable(&v);
	CHECK_EQ(v.dma.nwin, 0);
	CHECK_EQ(win_held, 0);
	CHECK_EQ(win_quarantined, 0);
	check_no_refs();
	xa_destroy(&v.dma.pin_pages);

	/* Unacknowledged: the offsets stay out, with the lease. */
	setup_guest();
	win_mode = true;
	win_cap = 4096;
	CHECK_EQ(dl_dma_enable(&v), 0);
	unmap_ret = -ETIMEDOUT;
	dl_dma_disable(&v);
	CHECK_EQ(nquarantined, 1183);
	CHECK_EQ(win_quarantined, 1183);
	CHECK_EQ(win_held, 1183);
	CHECK_EQ(v.dma.nwin, 0);
	xa_destroy(&v.dma.pin_pages);

	/* This mdev's budget: refused, counted, nothing left behind. */
	setup_guest();
	win_mode = true;
	win_cap = 4096;
	dl_window_max_pages = 500;
	CHECK_EQ(dl_dma_enable(&v), -ENOSPC);
	CHECK_EQ(v.dma.win_refused, 1);
	CHECK_EQ(v.dma.npinned, 0);
	CHECK_EQ(v.dma.nwin, 0);
	CHECK_EQ(win_held, 0);
	CHECK(!v.dma.on);
	check_pins(0, 32 * MiB, 0);
	xa_destroy(&v.dma.pin_pages);

	/* The lender's window full: the same. */
	setup_guest();
	win_mode = true;
	win_cap = 1000;
	CHECK_EQ(dl_dma_enable(&v), -ENOSPC);
	CHECK_EQ(v.dma.win_refused, 1);
	CHECK_EQ(v.dma.nwin, 0);
	CHECK_EQ(win_held, 0);
	check_pins(0, 32 * MiB, 0);
	xa_destroy(&v.dma.pin_pages);

	/* Physical addresses (the emulated fabric): nothing recorded. */
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK(win_calls > 0);
	CHECK_EQ(v.dma.nwin, 0);
	check_run(0, 0, 0x100000000ULL, 640 * KiB);
	dl_dma_disable(&v);
	xa_destroy(&v.dma.pin_pages);
}

static void test_enable_failures(void)
{
	struct dl_dma_batch bt = { .v = &v, .max = 4 };
	struct page *pp[2];

	/*
	 * The lender refuses the maps; the refusal comes back while the
	 * second message is already out (they are not waited for one by
	 * one). Nothing is left, and the unmap waits for both answers.
	 */
	setup_guest();
	map_ret = -ENOSPC;
	CHECK_EQ(dl_dma_enable(&v), -ENOSPC);
	CHECK_EQ(nmaps, 2);
	CHECK_EQ(nrefused, 2);
	CHECK_EQ(nunmaps, 1);	/* it may have mapped some */
	CHECK_EQ(le32_to_cpu(last_unmap.flags), DL_DMA_UNMAP_F_ALL);
	CHECK(list_empty(&v.dma.pinned));
	CHECK_EQ(v.dma.npinned, 0);
	check_pins(0, 32 * MiB, 0);
	CHECK(!v.dma.on);
	CHECK_EQ(bad_unpins, 0);

	/* No memory VFIO will pin: -ENOENT, no message at all. */
	setup_guest();
	ngmaps = 0;
	CHECK_EQ(dl_dma_enable(&v), -ENOENT);
	CHECK_EQ(nmaps + nunmaps, 0);

	/* The cap on pinned pages, exactly. */
	reset_all();
	CHECK_EQ(DL_B_MAX_PINNED_PAGES, 16ULL * 1024 * MiB / PAGE_SIZE);
	add_gmap(0, 1 * MiB, 0x100000000ULL);
	bt.msg = calloc(1, struct_size(bt.msg, ranges, 4));
	bt.pages = pp;
	v.dma.npinned = DL_B_MAX_PINNED_PAGES - 1;
	CHECK_EQ(dl_dma_pin_chunk(&bt, 0, 2, 0), -ENOSPC);
	CHECK_EQ(npin_calls, 0);
	CHECK_EQ(dl_dma_pin_chunk(&bt, 0, 1, 0), 0);
	CHECK_EQ(v.dma.npinned, DL_B_MAX_PINNED_PAGES);
	CHECK_EQ(dl_dma_pin_chunk(&bt, PAGE_SIZE, 1, 0), -ENOSPC);
	/* And a refusal is told apart from an error. */
	v.dma.npinned = 0;
	CHECK_EQ(dl_dma_pin_chunk(&bt, 2 * MiB, 1, 0), DL_PIN_REFUSED);
	free(bt.msg);
	xa_destroy(&v.dma.pin_pages);
	list_del(&list_first_entry(&v.dma.pinned, struct dl_pin_extent,
				   node)->node);
}

static void test_repin_failure(void)
{
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	v.open = true;

	/*
	 * QEMU unmaps part of the guest and maps it on other pages; the
	 * re-pin's map of them is refused.
	 */
	qemu_unmap(1 * MiB, 2 * MiB);
	CHECK_EQ(v.dma.npinned, 1183 - 512);
	CHECK(v.dma.window_start != 0);
	gmaps[2].moved = true;
	map_ret = -ENOSPC;
	dl_dma_repin_work(&v.dma.repin_work.work);
	/*
	 * Nothing may stay pinned but unsent: everything goes, to retry,
	 * unmapped at the lender as "all" (a range of 0 + U64_MAX is not
	 * one, and the lender refuses it).
	 */
	CHECK_EQ(v.dma.npinned, 0);
	CHECK_EQ(le32_to_cpu(last_unmap.flags), DL_DMA_UNMAP_F_ALL);
	CHECK_EQ(nunmaps_refused, 0);
	check_pins(0, 32 * MiB, 0);
	CHECK_EQ(v.dma.repin_tries, 1);
	CHECK_EQ(v.dma.repin_work.delay, DL_REPIN_RETRY_MS);
	CHECK_EQ(nlost, 0);
	CHECK_EQ(nquarantined, 0);

	/* The retry maps it all again; the window is closed and counted. */
	map_ret = 0;
	nruns = 0;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.npinned, 1183);
	CHECK_EQ(nruns, 4);
	check_pins(1 * MiB, 4 * MiB, 1);
	CHECK_EQ(v.dma.repin_tries, 0);
	CHECK_EQ(v.dma.window_start, 0);
	CHECK_EQ(v.dma.windows, 1);
	CHECK_EQ(v.dma.kept_moved, 512);
	dl_dma_disable(&v);
	check_no_refs();
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);
}

static void test_repin_waits(void)
{
	struct gmap saved;

	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	v.open = true;

	/* QEMU unmaps [1 MiB, 3 MiB) and has not mapped it again yet. */
	qemu_unmap(1 * MiB, 2 * MiB);
	CHECK_EQ(v.dma.nholes, 1);
	saved = gmaps[2];
	CHECK_EQ(saved.iova, 1 * MiB);
	gmaps[2].len = 0;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.npinned, 1183 - 512);
	/* Not a failure: the window stays open and the re-pin looks again. */
	CHECK(v.dma.window_start != 0);
	CHECK_EQ(v.dma.repin_tries, 0);
	CHECK_EQ(v.dma.repin_work.delay, DL_REPIN_RETRY_MS);
	CHECK_EQ(v.dma.nholes, 1);

	/* Its memslot gone too (QEMU adds it back after VFIO's map): waited. */
	slots[2].npages = 0;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK(v.dma.window_start != 0);
	CHECK_EQ(v.dma.nholes, 1);
	slots[2].npages = 4 * MiB / PAGE_SIZE;

	/* Meanwhile the lender kept its mapping: nothing was sent. */
	CHECK_EQ(v.dma.nkept, 512);
	CHECK_EQ(nunmaps, 0);

	/* Mapped again: the next look pins it and the window closes. */
	gmaps[2] = saved;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.npinned, 1183);
	check_pins(1 * MiB, 4 * MiB, 1);
	CHECK_EQ(v.dma.window_start, 0);
	CHECK_EQ(v.dma.nholes, 0);
	CHECK_EQ(v.dma.nkept, 0);
	CHECK_EQ(v.dma.kept_same, 512);

	/*
	 * Gone for good: past DL_REPIN_WAIT_S the re-pin stops waiting and
	 * has the kept pages unmapped.
	 */
	qemu_unmap(1 * MiB, 2 * MiB);
	gmaps[2].len = 0;
	jiffies += DL_REPIN_WAIT_S * HZ;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.window_start, 0);
	CHECK_EQ(v.dma.nholes, 0);
	CHECK_EQ(v.dma.npinned, 1183 - 512);
	CHECK_EQ(v.dma.windows, 2);
	CHECK_EQ(nunmaps, 1);
	CHECK_EQ(le64_to_cpu(last_unmap.iova), 1 * MiB);
	CHECK_EQ(le64_to_cpu(last_unmap.len), 2 * MiB);
	CHECK_EQ(v.dma.nkept, 0);
	CHECK_EQ(v.dma.kept_dropped, 512);

	/* Read-only now (the BIOS's shadow area): not waited for. */
	gmaps[2] = saved;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.npinned, 1183);
	qemu_unmap(1 * MiB, 2 * MiB);
	slots[2].flags = KVM_MEM_READONLY;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.window_start, 0);
	CHECK_EQ(v.dma.nholes, 0);
	CHECK_EQ(v.dma.nkept, 0);		/* unmapped: it is read-only now */
	CHECK_EQ(nunmaps, 2);
	slots[2].flags = 0;

	dl_dma_disable(&v);
	check_no_refs();
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);
}

/*
 * VFIO tells every mdev of the container of an unmap, then looks at its
 * pins again: a re-pin in between would pin the old mapping again (VFIO
 * BUG()s after ten such rounds). It waits for the unmap to return.
 */
static void test_repin_waits_for_unmap_return(void)
{
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	v.open = true;
	nmaps = 0;

	/* Told of the unmap; another mdev's callback still runs. */
	dl_dma_unmap_range(&v, 1 * MiB, 2 * MiB);
	CHECK_EQ(v.dma.nkept, 512);
	CHECK_EQ(v.dma.unmaps_open, 1);
	CHECK_EQ(v.vdev.device.refs, 1);
	v.dma.repin_work.work.queued = 0;
	/* The re-pin runs meanwhile: it pins nothing. */
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.repin_held, 1);
	CHECK_EQ(v.dma.npinned, 1183 - 512);
	check_pins(1 * MiB, 3 * MiB, 0);
	CHECK_EQ(v.dma.nkept, 512);
	CHECK_EQ(nmaps + nunmaps, 0);
	CHECK_EQ(v.dma.repin_work.work.queued, 0);

	/* The unmap returns: the re-pin is queued again, and pins. */
	CHECK_EQ(kshim_run_task_works(), 1);
	CHECK_EQ(v.dma.unmaps_open, 0);
	CHECK_EQ(v.vdev.device.refs, 0);
	CHECK_EQ(v.dma.repin_work.work.queued, 1);
	CHECK_EQ(v.dma.repin_work.delay, DL_REPIN_DELAY_MS);
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.npinned, 1183);
	check_pins(1 * MiB, 3 * MiB, 1);
	CHECK_EQ(v.dma.kept_same, 512);
	CHECK_EQ(v.dma.nkept, 0);

	/*
	 * A kernel thread, or a task that exits, has no return to wait for:
	 * nothing is held back.
	 */
	kshim_current->flags = PF_KTHREAD;
	dl_dma_unmap_range(&v, 1 * MiB, 2 * MiB);
	kshim_current->flags = 0;
	kshim_task_exiting = true;
	dl_dma_unmap_range(&v, 1 * MiB, 2 * MiB);
	kshim_task_exiting = false;
	CHECK_EQ(v.dma.unmaps_open, 0);
	CHECK_EQ(v.vdev.device.refs, 0);
	CHECK(!kshim_task_works);
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.npinned, 1183);
	CHECK_EQ(v.dma.repin_held, 1);

	dl_dma_disable(&v);
	check_no_refs();
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);
	xa_destroy(&v.dma.kept);
}

static void test_repin_keeps(void)
{
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	v.open = true;
	nmaps = 0;
	nruns = 0;
	nevents = 0;

	/*
	 * QEMU unmaps [1 MiB, 3 MiB) and maps the same RAM again: the lender
	 * keeps its mapping throughout and is told nothing.
	 */
	qemu_unmap(1 * MiB, 2 * MiB);
	CHECK_EQ(v.dma.nkept, 512);
	CHECK_EQ(page_at(1 * MiB)->refs, 1);
	check_pins(1 * MiB, 3 * MiB, 0);
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(nmaps + nunmaps, 0);
	CHECK_EQ(v.dma.npinned, 1183);
	check_pins(1 * MiB, 3 * MiB, 1);
	CHECK_EQ(v.dma.nkept, 0);
	CHECK_EQ(v.dma.kept_same, 512);
	CHECK_EQ(v.dma.window_start, 0);
	check_no_refs();
	/* The re-pin pinned 512 pages again and sent nothing. */
	CHECK_EQ(v.dma.fill.fills, 2);
	CHECK_EQ(v.dma.fill.pages, 1183 + 512);
	CHECK_EQ(v.dma.fill.msgs, 2);

	/*
	 * Mapped on other pages: the old ones are unmapped (one message per
	 * pinned chunk: [1 MiB, 2 MiB), [2 MiB, 3 MiB)) before the new ones
	 * are mapped; then let go.
	 */
	qemu_unmap(1 * MiB, 2 * MiB);
	gmaps[2].moved = true;
	gmaps[2].phys = 0x700000000ULL;
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(nunmaps, 2);
	CHECK_EQ(le64_to_cpu(last_unmap.iova), 2 * MiB);
	CHECK_EQ(le64_to_cpu(last_unmap.len), 1 * MiB);
	CHECK_EQ(le32_to_cpu(last_unmap.flags), 0);
	CHECK_EQ(nmaps, 1);
	CHECK_EQ(nruns, 1);
	check_run(0, 1 * MiB, 0x700000000ULL, 2 * MiB);
	CHECK(!strcmp(events, "UUM"));
	CHECK_EQ(v.dma.kept_moved, 512);
	CHECK_EQ(v.dma.nkept, 0);
	check_no_refs();

	/* Half of a run unmapped twice before the re-pin: kept once. */
	qemu_unmap(1 * MiB, 1 * MiB);
	qemu_unmap(1 * MiB, 2 * MiB);
	CHECK_EQ(v.dma.nkept, 512);
	dl_dma_repin_work(&v.dma.repin_work.work);
	CHECK_EQ(v.dma.kept_same, 1024);
	CHECK_EQ(nunmaps, 2);

	/* A reset while pages are kept: all unmapped at once, let go. */
	qemu_unmap(0, 8 * KiB);
	dl_dma_disable(&v);
	CHECK_EQ(nunmaps, 3);
	CHECK_EQ(le32_to_cpu(last_unmap.flags), DL_DMA_UNMAP_F_ALL);
	CHECK_EQ(v.dma.nkept, 0);
	check_no_refs();
	CHECK_EQ(nquarantined, 0);
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);
	xa_destroy(&v.dma.kept);
}

static void test_bulk_pins(void)
{
	setup_guest();
	CHECK_EQ(dl_dma_enable(&v), 0);
	/*
	 * Chunks end at 2 MiB: [0, 640K), [1M, 2M), [2M, 4M) are pinned in
	 * one call each, their first and last page through VFIO. [4M, 5M)
	 * has no first page in VFIO: VFIO pins it, page by page.
	 */
	CHECK_EQ(ngup_calls, 3);
	CHECK_EQ(v.dma.fill.bulk_pages, 160 + 256 + 512);
	CHECK_EQ(v.dma.fill.bulk_refused, 0);
	CHECK_EQ(gup_pinned(0, 8 * MiB), 160 + 256 + 512 - 6);
	CHECK_EQ(gup_pinned(4 * MiB, 5 * MiB), 0);
	check_pins(4 * MiB + 4 * KiB, 5 * MiB, 1);
	CHECK_EQ(pincount[0], 1);
	CHECK_EQ(pincount[159], 1);	/* the last page below 640 KiB */
	CHECK_EQ(gup_pins[0], 0);
	CHECK_EQ(pincount[1], 0);
	CHECK_EQ(gup_pins[1], 1);
	CHECK_EQ(v.dma.nbulk, 160 + 256 + 512 - 6);
	CHECK_EQ(mm.locked_vm, (long)v.dma.nbulk);
	CHECK(v.dma.pin_mm == &mm);
	CHECK_EQ(mm.count, 1);
	CHECK_EQ(mm.users, 1);
	/* What the lender maps is the same as when VFIO pins it all. */
	CHECK_EQ(nruns, 4);
	check_run(1, 1 * MiB, 0x200000000ULL, 2 * MiB);

	/* Part of a chunk unmapped: VFIO's and our pins there go. */
	dl_dma_disable(&v);
	CHECK_EQ(dl_dma_enable(&v), 0);
	v.dma.on = false;
	qemu_unmap(1 * MiB + 8 * KiB, 8 * KiB);
	check_pins(1 * MiB + 8 * KiB, 1 * MiB + 16 * KiB, 0);
	check_pins(1 * MiB, 1 * MiB + 8 * KiB, 1);
	CHECK_EQ(mm.locked_vm, (long)v.dma.nbulk);

	/* Everything given back: no pin, no locked page, no hold on the VMM. */
	dl_dma_disable(&v);
	check_pins(0, 8 * MiB, 0);
	CHECK_EQ(mm.locked_vm, 0);
	CHECK_EQ(v.dma.nbulk, 0);
	CHECK(!v.dma.pin_mm);
	CHECK_EQ(mm.count, 0);
	CHECK_EQ(bad_unpins, 0);
	CHECK_EQ(bad_pin_calls, 0);
	check_no_refs();
	xa_destroy(&v.dma.pin_pages);
}

static void test_bulk_refused(void)
{
	/* The VMM maps a memslot elsewhere than VFIO: VFIO pins it all. */
	setup_guest();
	slots[2].userspace_addr += 2 * MiB;
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK(v.dma.fill.bulk_refused > 0);
	CHECK_EQ(gup_pinned(0, 8 * MiB), gup_pinned(0, 640 * KiB) +
		 gup_pinned(4 * MiB, 5 * MiB));
	check_pins(0, 640 * KiB, 1);
	check_pins(1 * MiB, 4 * MiB, 1);
	check_run(1, 1 * MiB, 0x200000000ULL, 2 * MiB);
	dl_dma_disable(&v);
	check_pins(0, 8 * MiB, 0);
	CHECK_EQ(mm.locked_vm, 0);
	xa_destroy(&v.dma.pin_pages);

	/* Over the VMM's locked-memory limit: VFIO pins, and decides. */
	setup_guest();
	locked_limit = 16;
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK(v.dma.fill.bulk_refused > 0);
	CHECK(mm.locked_vm <= 16);
	check_pins(1 * MiB, 4 * MiB, 1);
	dl_dma_disable(&v);
	CHECK_EQ(mm.locked_vm, 0);

	/* Bulk pinning turned off (module parameter): VFIO pins it all. */
	setup_guest();
	dl_bulk_pin = false;
	CHECK_EQ(dl_dma_enable(&v), 0);
	dl_bulk_pin = true;
	CHECK_EQ(ngup_calls, 0);
	CHECK_EQ(v.dma.fill.bulk_pages, 0);
	check_pins(1 * MiB, 4 * MiB, 1);
	dl_dma_disable(&v);
	xa_destroy(&v.dma.pin_pages);

	/* The VMM has exited: nothing in bulk, nothing accounted. */
	setup_guest();
	mm.users = 0;
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK_EQ(v.dma.fill.bulk_pages, 0);
	CHECK_EQ(ngup_calls, 0);
	dl_dma_disable(&v);
	check_pins(0, 8 * MiB, 0);
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);

	/*
	 * In a kworker (the re-pin work), whose CAP_IPC_LOCK would pass any
	 * limit: VFIO pins, charged to the VMM, even over its limit.
	 */
	setup_guest();
	locked_limit = 16;
	kshim_current = &worker_task;
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK_EQ(v.dma.fill.bulk_pages, 0);
	CHECK_EQ(ngup_calls, 0);
	CHECK_EQ(mm.locked_vm, 0);
	check_pins(1 * MiB, 4 * MiB, 1);
	dl_dma_disable(&v);
	check_pins(0, 8 * MiB, 0);
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);
}

/* Shows @w as an mdev of @vm on lender 3, device @dev, BAR 2 at @bar2. */
static void p2p_show(struct dl_vdev *w, const void *vm, u32 dev, bool master,
		     u64 bar2)
{
	w->b = &b;
	w->p2p.vm = vm;
	w->p2p.host = 3;
	w->p2p.dev_id = dev;
	w->p2p.master = master;
	memset(w->p2p.bar, 0, sizeof(w->p2p.bar));
	w->p2p.bar[2] = bar2;
	if (!w->p2p.shown)
		list_add(&w->p2p.node, &b.p2p_vdevs);
	w->p2p.shown = true;
}

/*
 * Two mdevs of one VM on one lender: each one's BARs are asked for the
 * other's DMA while it masters; nothing for mdevs of another VM, or for
 * a device that does not master; one on another lender is shown to the
 * DMAing device's lender first; a place refused is not
 * asked again; a BAR moved is asked where it went, one gone is unmapped;
 * closing forgets, and so does the lender dropping a device's mappings.
 */
static void test_p2p_pairs(void)
{
	static struct dl_vdev x, y, z, w;
	static int vm1, vm2;

	memset(&x, 0, sizeof(x));
	memset(&y, 0, sizeof(y));
	memset(&z, 0, sizeof(z));
	INIT_LIST_HEAD(&b.p2p_vdevs);
	INIT_LIST_HEAD(&b.p2p_maps);
	np2p = 0;
	p2p_ret = 0;
	nexport = 0;
	export_ret = 0;
	p2p_show(&x, &vm1, 10, true, 0);
	p2p_show(&y, &vm1, 11, false, 0xc0000000);
	p2p_show(&z, &vm2, 12, true, 0xd0000000);

	/* x masters, y decodes: y's BAR 2 for x's DMA, at y's address. */
	mutex_lock(&b.p2p_lock);
	dl_p2p_pair(&b, &x, &y);
	dl_p2p_pair(&b, &y, &x);
	dl_p2p_pair(&b, &x, &z);	/* another VM */
	dl_p2p_pair(&b, &z, &y);
	CHECK_EQ(np2p, 1);
	CHECK(last_p2p_by == &x);
	CHECK_EQ(le32_to_cpu(last_p2p.dev_id), 10);
	CHECK_EQ(le32_to_cpu(last_p2p.target_id), 11);
	CHECK_EQ(le32_to_cpu(last_p2p.target_host), 3);
	CHECK_EQ(last_p2p.bar, 2);
	CHECK_EQ(last_p2p.flags, DL_P2P_DMA_F_MAP);
	CHECK_EQ(le64_to_cpu(last_p2p.iova), 0xc0000000ULL);
	CHECK_EQ(b.p2p_sent, 1);
	/* The same again: nothing. */
	dl_p2p_pair(&b, &x, &y);
	CHECK_EQ(np2p, 1);
	CHECK_EQ(nexport, 0);	/* one lender: nothing to show across */
	/* Unmapped, then refused where it is: not asked again until it moves. */
	y.p2p.bar[2] = 0;
	dl_p2p_pair(&b, &x, &y);
	CHECK_EQ(np2p, 2);
	CHECK_EQ(last_p2p.flags, 0);
	CHECK_EQ(le64_to_cpu(last_p2p.iova), 0);
	y.p2p.bar[2] = 0xc0000000;
	p2p_ret = -EOPNOTSUPP;
	dl_p2p_pair(&b, &x, &y);
	dl_p2p_pair(&b, &x, &y);
	CHECK_EQ(np2p, 3);
	CHECK_EQ(b.p2p_refused, 1);
	p2p_ret = 0;
	y.p2p.bar[2] = 0xc0100000;
	dl_p2p_pair(&b, &x, &y);
	CHECK_EQ(np2p, 4);
	CHECK_EQ(le64_to_cpu(last_p2p.iova), 0xc0100000ULL);
	/* Its decode off: unmapped. */
	y.p2p.bar[2] = 0;
	dl_p2p_pair(&b, &x, &y);
	CHECK_EQ(np2p, 5);
	CHECK_EQ(last_p2p.flags, 0);
	CHECK(list_empty(&b.p2p_maps));
	y.p2p.bar[2] = 0xc0000000;
	dl_p2p_pair(&b, &x, &y);
	CHECK_EQ(np2p, 6);
	mutex_unlock(&b.p2p_lock);

	/* The lender dropped x's mappings: forgotten, x no longer masters. */
	dl_p2p_forget(&x);
	CHECK(list_empty(&b.p2p_maps));
	CHECK(!x.p2p.master);
	x.p2p.master = true;
	mutex_lock(&b.p2p_lock);
	dl_p2p_pair(&b, &x, &y);
	mutex_unlock(&b.p2p_lock);
	CHECK_EQ(np2p, 7);
	/* y closes: forgotten without a word (its lender revokes them). */
	dl_p2p_close(&y);
	CHECK(list_empty(&b.p2p_maps));
	CHECK(!y.p2p.shown);
	CHECK_EQ(np2p, 7);

	/*
	 * w of the same VM on another lender (case 3): its lender is asked
	 * first to show its BAR to x's, then x's lender to map it; a refused
	 * export asks x's lender nothing; an unmap needs no export.
	 */
	memset(&w, 0, sizeof(w));
	p2p_show(&w, &vm1, 20, false, 0xe0000000);
	w.p2p.host = 4;
	mutex_lock(&b.p2p_lock);
	dl_p2p_pair(&b, &x, &w);
	CHECK_EQ(nexport, 1);
	CHECK(last_export_by == &w);
	CHECK_EQ(le32_to_cpu(last_export.dev_id), 20);
	CHECK_EQ(last_export.bar, 2);
	CHECK_EQ(le32_to_cpu(last_export.to_host), 3);
	CHECK_EQ(np2p, 8);
	CHECK(last_p2p_by == &x);
	CHECK_EQ(le32_to_cpu(last_p2p.target_host), 4);
	CHECK_EQ(le32_to_cpu(last_p2p.target_id), 20);
	CHECK_EQ(le64_to_cpu(last_p2p.iova), 0xe0000000ULL);
	export_ret = -EOPNOTSUPP;
	w.p2p.bar[2] = 0xe0100000;
	dl_p2p_pair(&b, &x, &w);
	CHECK_EQ(nexport, 2);
	CHECK_EQ(np2p, 8);
	CHECK_EQ(b.p2p_refused, 2);
	export_ret = 0;
	/* Nothing mapped where it was refused: nothing to undo. */
	w.p2p.bar[2] = 0;
	dl_p2p_pair(&b, &x, &w);
	CHECK_EQ(np2p, 8);
	CHECK_EQ(nexport, 2);
	/* Mapped, then unmapped: one word to x's lender, no export. */
	w.p2p.bar[2] = 0xe0000000;
	dl_p2p_pair(&b, &x, &w);
	CHECK_EQ(nexport, 3);
	CHECK_EQ(np2p, 9);
	w.p2p.bar[2] = 0;
	dl_p2p_pair(&b, &x, &w);
	CHECK_EQ(np2p, 10);
	CHECK_EQ(last_p2p.flags, 0);
	CHECK_EQ(nexport, 3);
	p2p_ret = 0;
	mutex_unlock(&b.p2p_lock);
	dl_p2p_close(&w);
	dl_p2p_close(&x);
	dl_p2p_close(&z);
	CHECK(list_empty(&b.p2p_vdevs));
}

static void test_probe(void)
{
	static const u64 ext[] = { 0, 512, 6 * MiB, 2 };

	/* No KVM: 2 MiB blocks whose first page is mapped, below 4 GiB. */
	reset_all();
	v.vdev.kvm = NULL;
	add_gmap(0, 2 * MiB, 0x100000000ULL);
	add_gmap(6 * MiB, 8 * KiB, 0x100200000ULL);
	add_gmap(4 * MiB + 4 * KiB, 8 * KiB, 0x500000000ULL);
	CHECK_EQ(dl_dma_enable(&v), 0);
	CHECK_EQ(bad_pin_calls, 0);
	CHECK_EQ(v.dma.npinned, 514);
	check_extents(ext, 2);
	check_pins(4 * MiB, 6 * MiB, 0);	/* its first page is not mapped */
	/* Contiguous in host memory across the hole in IOVA: two runs. */
	CHECK_EQ(nruns, 2);
	check_run(0, 0, 0x100000000ULL, 2 * MiB);
	check_run(1, 6 * MiB, 0x100200000ULL, 8 * KiB);
	/* One call per block, a few more where the block is mapped. */
	CHECK(npin_calls < 2048 + 520);
	/* The driver unmaps a buffer: gone at once, nothing kept. */
	qemu_unmap(6 * MiB, 8 * KiB);
	CHECK_EQ(nunmaps, 1);
	CHECK_EQ(le64_to_cpu(last_unmap.iova), 6 * MiB);
	CHECK_EQ(v.dma.nkept, 0);
	check_pins(6 * MiB, 6 * MiB + 8 * KiB, 0);
	dl_dma_disable(&v);
	check_no_refs();
	CHECK_EQ(bad_unpins, 0);
	xa_destroy(&v.dma.pin_pages);
}

static const struct unit_test dma_tests[] = {
	{ "runs: contiguous IOVA and host pages coalesce; full messages go",
	  test_add_run },
	{ "enable: memslots pinned, read-only and unpinnable pages skipped",
	  test_enable },
	{ "unmap: extents split and trimmed; kept under BME, else the lender asked first",
	  test_unmap_range },
	{ "unmap: unacknowledged pages (pinned, kept, moved) quarantined, the device given up",
	  test_unmap_unacked },
	{ "enable: failures leave nothing pinned; the pinned page cap",
	  test_enable_failures },
	{ "window: offsets sent, given back when acknowledged, quarantined when not; budget refusals",
	  test_window },
	{ "re-pin: a failed map leaves no page pinned but unsent; retried",
	  test_repin_failure },
	{ "re-pin: waits for what QEMU has not mapped again (not read-only), then gives up",
	  test_repin_waits },
	{ "re-pin: kept pages stay mapped; same ones send nothing, moved ones unmapped first",
	  test_repin_keeps },
	{ "re-pin: held back until VFIO's unmap returns (else VFIO loops, then BUG()s)",
	  test_repin_waits_for_unmap_return },
	{ "P2P: one mdev's BARs asked for another's DMA, same VM; another lender's shown first",
	  test_p2p_pairs },
	{ "bulk pins: a call per 2 MiB, VFIO anchors at both ends, accounted, all given back",
	  test_bulk_pins },
	{ "bulk pins refused (another mapping, locked limit, turned off, exited VMM, kworker): VFIO pins",
	  test_bulk_refused },
	{ "without KVM: probing 2 MiB blocks; an unmap is not kept",
	  test_probe },
};

UNIT_SUITE(borrower_dma_suite, "borrower/dma.c: pinning, runs, extents",
	   dma_tests);

/* The remote device: MSI at 0x40, MSI-X at 0x60, PCIe at 0x70. */
static void setup_config(void)
{
	reset_all();
	memset(rcfg, 0, sizeof(rcfg));
	memset(cwrites, 0, sizeof(cwrites));
	v.info.cfg_size = PCI_CFG_SPACE_SIZE;
	v.info.flags = DL_DEV_F_PCIE | DL_DEV_F_MSI | DL_DEV_F_MSIX;
	v.info.bar_size[0] = 0x4000;
	v.info.bar_flags[0] = DL_BAR_F_PRESENT | DL_BAR_F_MEM64;
	v.info.bar_size[2] = 0x100;
	v.info.bar_flags[2] = DL_BAR_F_PRESENT | DL_BAR_F_IO;
	v.info.bar_size[4] = 0x100000;
	v.info.bar_flags[4] = DL_BAR_F_PRESENT | DL_BAR_F_PREFETCH;

	memcpy(rcfg, "\x86\x80\x53\x09", 4);
	rcfg[PCI_COMMAND] = PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER;
	rcfg[PCI_COMMAND + 1] = PCI_COMMAND_INTX_DISABLE >> 8;
	rcfg[PCI_STATUS] = PCI_STATUS_CAP_LIST;
	memcpy(&rcfg[PCI_BASE_ADDRESS_0], "\x04\x00\x00\xfe\x00\x00\x00\x00", 8);
	memcpy(&rcfg[PCI_ROM_ADDRESS], "\x01\x00\x0e\xfe", 4);
	memcpy(&rcfg[PCI_INTERRUPT_LINE], "\x0b\x01\x22\x33", 4);
	rcfg[PCI_CAPABILITY_LIST] = 0x40;
	/* MSI: 64-bit, masking, 4 vectors, enabled with 2. */
	rcfg[0x40] = PCI_CAP_ID_MSI;
	rcfg[0x41] = 0x60;
	rcfg[0x42] = PCI_MSI_FLAGS_ENABLE | 2 << 1 | 1 << 4 |
		     PCI_MSI_FLAGS_64BIT;
	rcfg[0x43] = PCI_MSI_FLAGS_MASKBIT >> 8;
	/* MSI-X: 32 vectors, enabled and masked. */
	rcfg[0x60] = PCI_CAP_ID_MSIX;
	rcfg[0x61] = 0x70;
	rcfg[0x62] = 31;
	rcfg[0x63] = (PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL) >> 8;
	rcfg[0x70] = PCI_CAP_ID_EXP;
	rcfg[0x70 + PCI_EXP_DEVCTL] = 0x10;
	rcfg[0x70 + PCI_EXP_DEVCTL + 1] = 0x28;
}

static u32 cfg_read(unsigned int pos, unsigned int size)
{
	__le32 le = 0;

	CHECK_EQ(dl_config_rw(&v, (char *)&le, size, pos, false), size);
	return le32_to_cpu(le);
}

static void cfg_write(unsigned int pos, unsigned int size, u32 val)
{
	__le32 le = cpu_to_le32(val);

	CHECK_EQ(dl_config_rw(&v, (char *)&le, size, pos, true), size);
}

static void check_cwrite(unsigned int i, unsigned int off, unsigned int size,
			 u32 val)
{
	if (i >= ncwrites) {
		unit_fail(__FILE__, __LINE__, "config write %u missing", i);
		return;
	}
	CHECK_EQ(le16_to_cpu(cwrites[i].offset), off);
	CHECK_EQ(cwrites[i].size, size);
	CHECK_EQ(le32_to_cpu(cwrites[i].value), val);
	CHECK_EQ(le32_to_cpu(cwrites[i].dev_id), 7);
}

static void test_config_init(void)
{
	unsigned int off;

	setup_config();
	CHECK_EQ(dl_config_init(&v), 0);
	/* The copy comes in blocks, not dword by dword. */
	CHECK_EQ(ncblocks, PCI_CFG_SPACE_SIZE / DL_CFG_BLOCK_MAX);
	CHECK_EQ(ncreads, 0);
	CHECK_EQ(dl_config_cap_pos(&v, PCI_CAP_ID_MSI), 0x40);
	CHECK_EQ(v.cfg.nvcaps, 2);
	CHECK_EQ(v.cfg.vcaps[0].len, 24);
	CHECK_EQ(dl_config_cap_pos(&v, PCI_CAP_ID_MSIX), 0x60);
	CHECK_EQ(v.cfg.vcaps[1].len, PCI_CAP_MSIX_SIZEOF);
	CHECK_EQ(dl_config_cap_pos(&v, PCI_CAP_ID_PM), 0);
	CHECK_EQ(v.cfg.pcie_cap, 0x70);
	for (off = 0; off < PCI_CFG_SPACE_SIZE; off++) {
		enum dl_cfg_region want = DL_CFG_DEV;

		if (off < 4 || (off >= 8 && off < 0x0c))
			want = DL_CFG_ID;
		else if (off == 4 || off == 5)
			want = DL_CFG_COMMAND;
		else if (off >= 0x10 && off < 0x28)
			want = DL_CFG_BAR;
		else if (off >= 0x30 && off < 0x34)
			want = DL_CFG_ROM;
		else if (off == 0x3d)
			want = DL_CFG_INTX_PIN;
		else if ((off >= 0x40 && off < 0x58) ||
			 (off >= 0x60 && off < 0x6c))
			want = DL_CFG_VCAP;
		if (dl_config_region(&v, off) != want) {
			unit_fail(__FILE__, __LINE__, "byte 0x%x: region %d, want %d",
				  off, dl_config_region(&v, off), want);
			break;
		}
	}
	/* What the guest starts with: no decoding, no vectors, no ROM. */
	ncreads = 0;
	CHECK_EQ(cfg_read(PCI_COMMAND, 2), PCI_COMMAND_INTX_DISABLE);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_0, 4), PCI_BASE_ADDRESS_MEM_TYPE_64);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_1, 4), 0);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_2, 4), 0);	/* I/O: not offered */
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_4, 4), PCI_BASE_ADDRESS_MEM_PREFETCH);
	CHECK_EQ(cfg_read(PCI_ROM_ADDRESS, 4), 0);
	CHECK_EQ(cfg_read(0x42, 2), PCI_MSI_FLAGS_64BIT | PCI_MSI_FLAGS_MASKBIT |
				     2 << 1);
	CHECK_EQ(cfg_read(0x62, 2), 31);
	CHECK_EQ(ncreads, 0);	/* all of those are virtual */
	/* Mixed: line and the last two bytes from the device, pin virtual. */
	CHECK_EQ(cfg_read(PCI_INTERRUPT_LINE, 4), 0x3322000b);
	CHECK_EQ(ncreads, 1);
	/* Out of range. */
	CHECK_EQ(dl_config_rw(&v, (char *)&off, 4, PCI_CFG_SPACE_SIZE, false),
		 -EINVAL);
	CHECK_EQ(dl_config_rw(&v, (char *)&off, 4, 0xfe, false), -EINVAL);
	CHECK_EQ(ncwrites, 0);
	dl_config_free(&v);
}

/* Lenders without block reads, and lenders that answer something else. */
static void test_config_snapshot_fallback(void)
{
	u8 copy[PCI_CFG_SPACE_SIZE];

	setup_config();
	CHECK_EQ(dl_config_init(&v), 0);
	memcpy(copy, v.cfg.vconfig, sizeof(copy));
	dl_config_free(&v);

	/* An older lender: one batch refused, then dword by dword, the same copy. */
	setup_config();
	blocks = BLOCKS_UNKNOWN;
	CHECK_EQ(dl_config_init(&v), 0);
	CHECK_EQ(ncblocks, PCI_CFG_SPACE_SIZE / DL_CFG_BLOCK_MAX);
	CHECK_EQ(ncreads, PCI_CFG_SPACE_SIZE / 4);
	CHECK(!memcmp(copy, v.cfg.vconfig, sizeof(copy)));
	dl_config_free(&v);

	/* A block for another offset than asked: the open fails. */
	setup_config();
	blocks = BLOCKS_LIE;
	CHECK_EQ(dl_config_init(&v), -EPROTO);
	CHECK(!v.cfg.vconfig);
	CHECK_EQ(ncreads, 0);
}

/* IDs from the device description; a device out of reach reads all-ones. */
static void test_config_ids_and_unreachable(void)
{
	setup_config();
	v.info.vendor = 0x1b36;
	v.info.device = 0x0010;
	v.info.class_rev = 0x01080202;
	CHECK_EQ(dl_config_init(&v), 0);
	ncreads = 0;
	/* The description wins over the snapshot, and is never asked for. */
	CHECK_EQ(cfg_read(PCI_VENDOR_ID, 4), 0x00101b36);
	CHECK_EQ(cfg_read(PCI_CLASS_REVISION, 4), 0x01080202);
	CHECK_EQ(ncreads, 0);
	cfg_write(PCI_VENDOR_ID, 4, 0x12345678);
	CHECK_EQ(cfg_read(PCI_VENDOR_ID, 4), 0x00101b36);
	CHECK_EQ(ncwrites, 0);
	/* A failed read: the device's bytes all-ones, virtual ones kept. */
	cread_ret = -ETIMEDOUT;
	CHECK_EQ(cfg_read(PCI_STATUS, 2), 0xffff);
	CHECK_EQ(cfg_read(PCI_INTERRUPT_LINE, 4), 0xffff00ff);
	CHECK_EQ(cfg_read(PCI_COMMAND, 2), PCI_COMMAND_INTX_DISABLE);
	/*
	 * Lost: not even asked, and gone whole, IDs included (what
	 * pci_device_is_present() in the guest reads).
	 */
	cread_ret = 0;
	ncreads = 0;
	v.sess.state = DL_VDEV_LOST;
	CHECK_EQ(cfg_read(0x70 + PCI_EXP_DEVCTL, 2), 0xffff);
	CHECK_EQ(cfg_read(PCI_VENDOR_ID, 4), 0xffffffff);
	CHECK_EQ(cfg_read(PCI_DEVICE_ID, 2), 0xffff);
	CHECK_EQ(cfg_read(PCI_COMMAND, 1), 0xff);
	CHECK_EQ(ncreads, 0);
	dl_config_free(&v);
}

static void test_config_bars(void)
{
	setup_config();
	CHECK_EQ(dl_config_init(&v), 0);
	/* Sizing: all ones reads back the size mask and the type. */
	cfg_write(PCI_BASE_ADDRESS_0, 4, ~0U);
	cfg_write(PCI_BASE_ADDRESS_1, 4, ~0U);
	cfg_write(PCI_BASE_ADDRESS_2, 4, ~0U);
	cfg_write(PCI_BASE_ADDRESS_3, 4, ~0U);
	cfg_write(PCI_BASE_ADDRESS_4, 4, ~0U);
	cfg_write(PCI_ROM_ADDRESS, 4, ~0U);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_0, 4), 0xffffc004);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_1, 4), 0xffffffff);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_2, 4), 0);	/* I/O: not offered */
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_3, 4), 0);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_4, 4), 0xfff00008);
	CHECK_EQ(cfg_read(PCI_ROM_ADDRESS, 4), 0);
	/* An address, and a 16-bit write to its upper half. */
	cfg_write(PCI_BASE_ADDRESS_0, 4, 0x12345678);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_0, 4), 0x12344004);
	cfg_write(PCI_BASE_ADDRESS_0 + 2, 2, 0xabcd);
	CHECK_EQ(cfg_read(PCI_BASE_ADDRESS_0, 4), 0xabcd4004);
	/* None of it reaches the lender. */
	CHECK_EQ(ncwrites, 0);
	dl_config_free(&v);
}

static void test_config_msi(void)
{
	setup_config();
	CHECK_EQ(dl_config_init(&v), 0);
	/* MSI-X: only enable and function mask take; the size stays. */
	cfg_write(0x62, 2, 0xffff);
	CHECK_EQ(cfg_read(0x62, 2), 0xc000 | 31);
	cfg_write(0x60, 4, 0);
	CHECK_EQ(cfg_read(0x60, 4), (31U << 16) | 0x7000 | PCI_CAP_ID_MSIX);
	/* MSI: no more vectors enabled than it has (4). */
	cfg_write(0x42, 2, PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE |
		  PCI_MSI_FLAGS_QMASK);
	CHECK_EQ(cfg_read(0x42, 2), PCI_MSI_FLAGS_64BIT | PCI_MSI_FLAGS_MASKBIT |
				    2 << 1 | 2 << 4 | PCI_MSI_FLAGS_ENABLE);
	/* Address, data and mask bits take; pending bits do not. */
	cfg_write(0x40 + PCI_MSI_ADDRESS_LO, 4, 0xfee01000);
	cfg_write(0x40 + PCI_MSI_ADDRESS_HI, 4, 0x1);
	cfg_write(0x40 + PCI_MSI_DATA_64, 2, 0x4041);
	cfg_write(0x40 + PCI_MSI_MASK_64, 4, 0x5);
	cfg_write(0x40 + PCI_MSI_PENDING_64, 4, ~0U);
	CHECK_EQ(cfg_read(0x40 + PCI_MSI_ADDRESS_LO, 4), 0xfee01000);
	CHECK_EQ(cfg_read(0x40 + PCI_MSI_ADDRESS_HI, 4), 0x1);
	CHECK_EQ(cfg_read(0x40 + PCI_MSI_DATA_64, 4), 0x4041);
	CHECK_EQ(cfg_read(0x40 + PCI_MSI_MASK_64, 4), 0x5);
	CHECK_EQ(cfg_read(0x40 + PCI_MSI_PENDING_64, 4), 0);
	CHECK_EQ(ncwrites, 0);
	dl_config_free(&v);
}

static void test_config_command(void)
{
	setup_config();
	add_slot(0, 1 * MiB, 0);
	add_gmap(0, 1 * MiB, 0x100000000ULL);
	CHECK_EQ(dl_config_init(&v), 0);

	/* Command and status at once: each goes its own way. */
	nevents = 0;
	memset(events, 0, sizeof(events));
	cfg_write(PCI_COMMAND, 4, 0xffff0403);
	/* Memory decode on: the BARs may be mapped after its write. */
	CHECK(!strcmp(events, "WDW"));
	CHECK_EQ(ncwrites, 2);
	check_cwrite(0, PCI_COMMAND, 2, 0x0403);
	check_cwrite(1, PCI_STATUS, 2, 0xffff);
	CHECK_EQ(cfg_read(PCI_COMMAND, 2), 0x0403);
	CHECK_EQ(nmaps, 0);

	/* Bus master on: memory mapped first, then the write goes. */
	nevents = 0;
	memset(events, 0, sizeof(events));
	cfg_write(PCI_COMMAND, 2, 0x0407);
	CHECK(!strcmp(events, "MW"));
	CHECK(v.dma.on);
	CHECK_EQ(v.dma.npinned, 256);
	check_cwrite(2, PCI_COMMAND, 2, 0x0407);
	/* Off: the write first, then unmapped and unpinned. */
	nevents = 0;
	memset(events, 0, sizeof(events));
	cfg_write(PCI_COMMAND, 1, 0x03);
	CHECK(!strcmp(events, "WU"));
	CHECK_EQ(v.dma.npinned, 0);
	CHECK(!v.dma.on);
	/* Writes of the same command do neither. */
	nevents = 0;
	memset(events, 0, sizeof(events));
	cfg_write(PCI_COMMAND, 1, 0x03);
	CHECK(!strcmp(events, "W"));
	/*
	 * Memory decode off: the BARs' mappings are zapped before the
	 * device stops decoding (CVE-2020-12888); on again after the write.
	 */
	nevents = 0;
	memset(events, 0, sizeof(events));
	cfg_write(PCI_COMMAND, 1, 0x01);
	CHECK(!strcmp(events, "ZW"));
	nevents = 0;
	memset(events, 0, sizeof(events));
	cfg_write(PCI_COMMAND, 1, 0x03);
	CHECK(!strcmp(events, "WD"));
	dl_config_free(&v);
	xa_destroy(&v.dma.pin_pages);
}

static void clear_events(void)
{
	nevents = 0;
	memset(events, 0, sizeof(events));
}

static void check_bar_dma(unsigned int bar, bool map, u64 iova)
{
	CHECK_EQ(le32_to_cpu(last_bar_dma.dev_id), 7);
	CHECK_EQ(last_bar_dma.bar, bar);
	CHECK_EQ(last_bar_dma.flags, map ? DL_BAR_DMA_F_MAP : 0);
	CHECK_EQ(le64_to_cpu(last_bar_dma.iova), iova);
	CHECK_EQ(last_bar_dma.reserved, 0);
}

/*
 * The lender maps the memory BARs for the device's own DMA where the
 * guest put them, while decode and bus mastering are on; once per place;
 * a refused place is not asked again; decode off unmaps; bus mastering
 * off forgets (the lender's unmap of everything takes them).
 */
static void test_config_bar_dma(void)
{
	setup_config();
	add_slot(0, 1 * MiB, 0);
	add_gmap(0, 1 * MiB, 0x100000000ULL);
	CHECK_EQ(dl_config_init(&v), 0);
	cfg_write(PCI_BASE_ADDRESS_0, 4, 0xfe000000);
	cfg_write(PCI_BASE_ADDRESS_1, 4, 0x1);
	cfg_write(PCI_BASE_ADDRESS_4, 4, 0xfd000000);
	cfg_write(PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
	CHECK_EQ(nbar_dma, 0);

	clear_events();
	cfg_write(PCI_COMMAND, 2, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
	CHECK(!strcmp(events, "MWBB"));
	check_bar_dma(4, true, 0xfd000000);
	CHECK_EQ(v.bar_dma.iova[0], 0x1fe000000ULL);
	CHECK_EQ(v.bar_dma.mapped, BIT(0) | BIT(4));
	/* The same again: nothing to tell. */
	clear_events();
	cfg_write(PCI_COMMAND, 2, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
	CHECK(!strcmp(events, "W"));
	/* A BAR moved is mapped where it went. */
	cfg_write(PCI_BASE_ADDRESS_4, 4, 0xfc000000);
	check_bar_dma(4, true, 0xfc000000);
	CHECK_EQ(nbar_dma, 3);
	/* A place the lender refuses is not asked again. */
	bar_dma_ret = -EOPNOTSUPP;
	cfg_write(PCI_BASE_ADDRESS_0, 4, 0xfb000000);
	cfg_write(PCI_BASE_ADDRESS_0, 4, 0xfb000000);
	CHECK_EQ(nbar_dma, 4);
	CHECK_EQ(v.bar_dma.mapped, BIT(4));
	CHECK_EQ(v.bar_dma.refusals, 1);
	bar_dma_ret = 0;
	/* Decode off: what is mapped is unmapped, after the write. */
	clear_events();
	cfg_write(PCI_COMMAND, 2, PCI_COMMAND_MASTER);
	CHECK(!strcmp(events, "ZWB"));
	check_bar_dma(4, false, 0);
	CHECK_EQ(v.bar_dma.mapped, 0);
	/* On again: both asked for (the refusal was for decode on). */
	clear_events();
	cfg_write(PCI_COMMAND, 2, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
	CHECK(!strcmp(events, "WDBB"));
	/* Bus mastering off: the lender drops them with everything. */
	clear_events();
	cfg_write(PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
	CHECK(!strcmp(events, "WU"));
	CHECK_EQ(v.bar_dma.mapped, 0);
	CHECK_EQ(nbar_dma, 7);
	dl_config_free(&v);
	xa_destroy(&v.dma.pin_pages);
}

/*
 * Bus master on with no window space for the guest's memory: the bit
 * stays off, the rest of the command goes to the device, and the VMM's
 * config write fails with ENOSPC; with room, it takes.
 */
static void test_config_bme_no_window(void)
{
	__le32 le = cpu_to_le32(0x0407);

	setup_config();
	add_slot(0, 1 * MiB, 0);
	add_gmap(0, 1 * MiB, 0x100000000ULL);
	CHECK_EQ(dl_config_init(&v), 0);
	win_mode = true;
	win_cap = 4096;
	dl_window_max_pages = 8;
	CHECK_EQ(dl_config_rw(&v, (char *)&le, 2, PCI_COMMAND, true), -ENOSPC);
	CHECK_EQ(cfg_read(PCI_COMMAND, 2), 0x0403);
	CHECK_EQ(ncwrites, 1);
	check_cwrite(0, PCI_COMMAND, 2, 0x0403);
	CHECK(!v.dma.on);
	CHECK_EQ(v.dma.npinned, 0);
	CHECK_EQ(v.dma.win_refused, 1);
	CHECK_EQ(win_held, 0);

	dl_window_max_pages = 0;
	cfg_write(PCI_COMMAND, 2, 0x0407);
	CHECK_EQ(cfg_read(PCI_COMMAND, 2), 0x0407);
	CHECK(v.dma.on);
	CHECK_EQ(v.dma.nwin, 256);
	cfg_write(PCI_COMMAND, 2, 0x0403);
	CHECK_EQ(v.dma.nwin, 0);
	CHECK_EQ(win_held, 0);
	dl_config_free(&v);
	xa_destroy(&v.dma.pin_pages);
}

static void test_config_flr(void)
{
	static const u8 zero8[8];

	setup_config();
	CHECK_EQ(dl_config_init(&v), 0);
	/* FLR takes the reset path; the rest of the write goes through. */
	cfg_write(0x70 + PCI_EXP_DEVCTL, 2, PCI_EXP_DEVCTL_BCR_FLR | 0x2810);
	CHECK_EQ(nresets, 1);
	CHECK_EQ(ncwrites, 1);
	check_cwrite(0, 0x70 + PCI_EXP_DEVCTL, 2, 0x2810);
	/* A 4-byte write with it in its upper half, split at nothing. */
	cfg_write(0x70 + PCI_EXP_DEVCAP, 4, 0);
	cfg_write(0x70 + PCI_EXP_DEVCTL, 1, 0x10);
	CHECK_EQ(nresets, 1);
	/* Without PCIe in the lender's flags, the bit is the device's. */
	v.info.flags &= ~DL_DEV_F_PCIE;
	cfg_write(0x70 + PCI_EXP_DEVCTL + 1, 1, PCI_EXP_DEVCTL_BCR_FLR >> 8);
	CHECK_EQ(nresets, 1);
	check_cwrite(3, 0x70 + PCI_EXP_DEVCTL + 1, 1, 0x80);
	/* A write across the end of MSI-X and the device's bytes. */
	v.info.flags |= DL_DEV_F_PCIE;
	ncwrites = 0;
	CHECK_EQ(dl_config_rw(&v, (char *)zero8, 8, 0x68, true), 8);
	CHECK_EQ(ncwrites, 1);
	check_cwrite(0, 0x6c, 4, 0);
	dl_config_free(&v);
}

/* INTx: the device's pin only where the lender can mask INTx. */
static void test_config_intx_pin(void)
{
	setup_config();
	CHECK_EQ(dl_config_init(&v), 0);
	CHECK_EQ(cfg_read(PCI_INTERRUPT_PIN, 1), 0);
	dl_config_free(&v);

	setup_config();
	v.info.flags |= DL_DEV_F_INTX;
	CHECK_EQ(dl_config_init(&v), 0);
	ncreads = 0;
	CHECK_EQ(cfg_read(PCI_INTERRUPT_PIN, 1), 1);
	CHECK_EQ(ncreads, 0);
	cfg_write(PCI_INTERRUPT_PIN, 1, 3);	/* read-only */
	CHECK_EQ(cfg_read(PCI_INTERRUPT_PIN, 1), 1);
	CHECK_EQ(ncwrites, 0);
	dl_config_free(&v);

	/* A pin no PCI device has: none. */
	setup_config();
	v.info.flags |= DL_DEV_F_INTX;
	rcfg[PCI_INTERRUPT_PIN] = 9;
	CHECK_EQ(dl_config_init(&v), 0);
	CHECK_EQ(cfg_read(PCI_INTERRUPT_PIN, 1), 0);
	dl_config_free(&v);
}

static const struct unit_test config_tests[] = {
	{ "init: capabilities found, regions, the guest's starting view",
	  test_config_init },
	{ "snapshot: dwords from an older lender; a block for elsewhere fails",
	  test_config_snapshot_fallback },
	{ "IDs from the description; out of reach reads all-ones",
	  test_config_ids_and_unreachable },
	{ "BARs: sizing, addresses, ROM; nothing sent", test_config_bars },
	{ "MSI and MSI-X: only vfio-pci's writable bits; vectors clamped",
	  test_config_msi },
	{ "command: split from status; bus master maps before, unmaps after; decode off zaps before",
	  test_config_command },
	{ "command: bus master with no window space stays off, the VMM told ENOSPC",
	  test_config_bme_no_window },
	{ "BARs mapped for the device's own DMA where the guest put them",
	  test_config_bar_dma },
	{ "PCIe FLR is a reset; writes split at region ends",
	  test_config_flr },
	{ "INTx pin offered only where the lender masks INTx",
	  test_config_intx_pin },
};

UNIT_SUITE(borrower_config_suite, "borrower/config.c: virtual config space",
	   config_tests);
