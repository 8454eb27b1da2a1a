// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests of lender/p2p.c and p2p_remote.c: one device's DMA to a BAR
 * of another device of the same holder (%DL_MSG_P2P_DMA), on this lender
 * or on another (%DL_MSG_P2P_EXPORT, LOOKUP and REVOKE). The table of
 * devices is lent.c's own; what lies below (dma.c, the IOMMU, the fabric)
 * is faked here: each device's domain records what is mapped in it, and
 * the other lender's answers are the fake fabric's.
 */
#include <limits.h>
#include <stdio.h>

#include "kshim.h"
#include <linux/kref.h>

#define __MUTEX_INITIALIZER(m)	{ 0 }
#define LIST_HEAD_INIT(n)	{ &(n), &(n) }
#define XARRAY_INIT(n, f)	{ 0 }
#define xa_lock(xa)		((void)(xa))
#define xa_unlock(xa)		((void)(xa))
#define pci_info_ratelimited(p, ...)	((void)(p), kshim_log("info", __VA_ARGS__))
#define pci_dev_put(p)		((void)(p))
#define kfree_rcu(p, f)		((void)(p))

/* lent.c's names, so that they clash with test_lender_msg.c's copy. */
#define dl_lender		p2pt_lender
#define dl_lent_put		p2pt_lent_put
#define dl_lent_get		p2pt_lent_get
#define dl_lent_next		p2pt_lent_next
#define dl_lent_is_holder	p2pt_lent_is_holder
/* What lies below p2p.c: this file's fakes. */
#define dl_dma_in_resv		p2pt_in_resv
#define dl_dma_busy		p2pt_busy
#define dl_dma_tables_room	p2pt_tables_room
#define dl_dma_tables_note	p2pt_tables_note
#define dl_dma_iommu_map	p2pt_iommu_map
#define dl_dma_iommu_unmap	p2pt_iommu_unmap
#define dl_fabric_peer_info	p2pt_peer_info
#define dl_fabric_request	p2pt_request
#define dl_fabric_request_urgent	p2pt_request_urgent
#define dl_fabric_bar_expose	p2pt_bar_expose
#define dl_fabric_bar_revoke	p2pt_bar_revoke
#define dl_fabric_peer_bar	p2pt_peer_bar
#define dl_fabric_host_id	p2pt_host_id
#define dl_fabric_link_is_up	p2pt_link_is_up
#define dl_fabric_register_handler	p2pt_register_handler
#define dl_fabric_unregister_handler	p2pt_unregister_handler
#define dl_lender_respond	p2pt_respond

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "../../lender/lent.c"
#include "../../lender/p2p.c"
#include "../../lender/p2p_remote.c"
#pragma GCC diagnostic pop

#include "unit.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

/* A domain that records its mappings. */
#define MAX_MAPS	32
struct fake_domain {
	struct iommu_domain d;
	struct {
		u64 iova, phys, len;
		int prot;
	} m[MAX_MAPS];
	unsigned int n;
};

static char fab_storage;
static struct dl_fabric *const fab = (struct dl_fabric *)&fab_storage;
enum { HOLDER = 1, OTHER = 2, NDEVS = 4 };
static struct pci_dev pdevs[NDEVS];
static struct dl_lent devs[NDEVS];
static struct fake_domain doms[NDEVS];
static bool ram_busy, tables_full;

bool dl_dma_in_resv(struct dl_lent *lent, u64 iova, u64 last)
{
	return false;
}

bool dl_dma_busy(struct maple_tree *mt, u64 first, u64 last)
{
	return ram_busy;
}

bool dl_dma_tables_room(struct dl_lent *lent, u64 iova, u64 last, u64 ram)
{
	return !tables_full;
}

int dl_dma_tables_note(struct dl_lent *lent, u64 iova, u64 last)
{
	return 0;
}

int dl_dma_iommu_map(struct dl_lent *lent, u64 iova, phys_addr_t phys,
		     u64 len, int prot)
{
	struct fake_domain *d = container_of(lent->domain, struct fake_domain,
					     d);

	if (d->n == MAX_MAPS)
		return -ENOMEM;
	d->m[d->n].iova = iova;
	d->m[d->n].phys = phys;
	d->m[d->n].len = len;
	d->m[d->n++].prot = prot;
	return 0;
}

size_t iommu_unmap(struct iommu_domain *domain, unsigned long iova,
		   size_t size)
{
	struct fake_domain *d = container_of(domain, struct fake_domain, d);
	unsigned int i;

	for (i = 0; i < d->n; i++) {
		if (d->m[i].iova != iova || d->m[i].len != size)
			continue;
		d->m[i] = d->m[--d->n];
		return size;
	}
	return 0;
}

void dl_dma_iommu_unmap(struct dl_lent *lent, u64 iova, u64 len)
{
	iommu_unmap(lent->domain, iova, len);
}

/* This host, the other lender, its incarnation; a host that is down. */
enum { SELF = 0, L2 = 3, L2_INC = 42, NHOSTS = 8 };
static u32 down_host = U32_MAX;
bool dl_fault_p2p_revoke_ignore;

/* If set, the only host that answers REVOKEs. */
static u32 fence_answers_from = U32_MAX;

int dl_fabric_peer_info(struct dl_fabric *f, u32 peer,
			struct dl_fabric_peer_info *info)
{
	if (peer >= NHOSTS || peer == SELF)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->up = peer != down_host;
	info->incarnation = peer == L2 ? L2_INC : 7;
	info->ram_size = 1ULL << 30;
	return 0;
}

u32 dl_fabric_host_id(struct dl_fabric *f)
{
	return SELF;
}

bool dl_fabric_link_is_up(struct dl_fabric *f, u32 peer)
{
	return peer != down_host;
}

int dl_fabric_register_handler(struct dl_fabric *f, u16 type,
			       dl_fabric_msg_fn fn, void *priv)
{
	return 0;
}

void dl_fabric_unregister_handler(struct dl_fabric *f, u16 type)
{
}

/* The other lender, as the fake fabric plays it. */
static struct {
	/* LOOKUP: the last question, and the answer to give. */
	struct dl_p2p_lookup q;
	u32 asked, to;
	int status;
	struct dl_p2p_window w;
	size_t w_len;
	/* Something that happens while the question is out. */
	void (*meanwhile)(void);
	/* REVOKE, this lender to others. */
	u32 revokes, revoke_to, revoke_dev;
	int revoke_status;
	/* Windows shown (bar_expose) and closed (bar_revoke). */
	u32 exposed, expose_to, expose_nskip, closed;
	int expose_status;
	/* The answer to the holder. */
	u32 responded;
	int resp;
} fk;

int dl_fabric_request(struct dl_fabric *f, u32 peer, u16 type,
		      const void *data, size_t len, void *resp,
		      size_t resp_size, size_t *resp_len,
		      unsigned int timeout_ms)
{
	if (type != DL_MSG_P2P_LOOKUP || len != sizeof(fk.q) ||
	    resp_size < sizeof(fk.w))
		return -EPROTO;
	fk.asked++;
	fk.to = peer;
	memcpy(&fk.q, data, len);
	if (fk.meanwhile)
		fk.meanwhile();
	if (fk.status)
		return fk.status;
	memcpy(resp, &fk.w, sizeof(fk.w));
	*resp_len = fk.w_len;
	return 0;
}

int dl_fabric_request_urgent(struct dl_fabric *f, u32 peer, u16 type,
			     const void *data, size_t len,
			     unsigned int timeout_ms)
{
	const struct dl_dev_ref *ref = data;

	if (type != DL_MSG_P2P_REVOKE || len != sizeof(*ref))
		return -EPROTO;
	fk.revokes++;
	fk.revoke_to = peer;
	fk.revoke_dev = le32_to_cpu(ref->dev_id);
	if (fence_answers_from != U32_MAX && peer != fence_answers_from)
		return -ETIMEDOUT;
	return fk.revoke_status;
}

int dl_fabric_bar_expose(struct dl_fabric *f, u32 peer, struct pci_dev *pdev,
			 int bar, const struct dl_fabric_span *skip,
			 unsigned int nskip, u64 *token, u64 *len)
{
	if (fk.expose_status)
		return fk.expose_status;
	fk.exposed++;
	fk.expose_to = peer;
	fk.expose_nskip = nskip;
	*token = 0x90 + fk.exposed;
	*len = 0x4000;
	return 0;
}

void dl_fabric_bar_revoke(struct dl_fabric *f, u32 peer, u64 token, u64 len)
{
	fk.closed++;
}

/* This host's window onto the other lender's BAR: token 0x77 only. */
#define WINDOW_PHYS	0xc0000000ULL
int dl_fabric_peer_bar(struct dl_fabric *f, u32 peer, u64 token, u64 len,
		       phys_addr_t *phys)
{
	if (peer != L2 || token != 0x77 || len > 0x8000)
		return -ENOENT;
	*phys = WINDOW_PHYS;
	return 0;
}

void dl_lender_respond(struct dl_fabric *f, const struct dl_fabric_msg *msg,
		       int err, const void *data, size_t len)
{
	fk.responded++;
	fk.resp = err;
}

/* What @x's domain maps at @iova: its target address, or 0. */
static u64 mapped_at(unsigned int x, u64 iova)
{
	unsigned int i;

	for (i = 0; i < doms[x].n; i++)
		if (iova >= doms[x].m[i].iova &&
		    iova < doms[x].m[i].iova + doms[x].m[i].len)
			return doms[x].m[i].phys + (iova - doms[x].m[i].iova);
	return 0;
}

/*
 * Device i: dev_id 10 + i, held by HOLDER; BAR 2 of 16 KiB at
 * 0xf0000000 + i * 1 MiB, its MSI-X table in its third page; BAR 0 of
 * 1 KiB; BAR 4 an I/O BAR.
 */
static void setup(void)
{
	unsigned int i;

	memset(&dl_lender.devs, 0, sizeof(dl_lender.devs));
	memset(devs, 0, sizeof(devs));
	memset(doms, 0, sizeof(doms));
	ram_busy = false;
	tables_full = false;
	memset(&fk, 0, sizeof(fk));
	fk.w.token = cpu_to_le64(0x77);
	fk.w.len = cpu_to_le64(0x8000);
	fk.w_len = sizeof(fk.w);
	down_host = U32_MAX;
	fence_answers_from = U32_MAX;
	for (i = 0; i < NDEVS; i++) {
		struct dl_lent *l = &devs[i];

		kref_init(&l->ref);
		l->pdev = &pdevs[i];
		l->dev_id = 10 + i;
		l->state = DL_LENT_BORROWED;
		l->borrower = HOLDER;
		l->borrower_inc = 7;
		l->fab = fab;
		doms[i].d.geometry.aperture_end = (1ULL << 48) - 1;
		l->domain = &doms[i].d;
		pdevs[i].bar_start[2] = 0xf0000000ULL + i * 0x100000;
		l->bars[2].size = 0x4000;
		l->bars[2].map = (void __iomem *)1;
		l->bars[0].size = 0x400;
		l->bars[0].map = (void __iomem *)1;
		l->bars[4].size = 0x100;
		l->bars[4].flags = DL_BAR_F_IO;
		l->msix_bar = 2;
		l->msix_start = 0x2000;
		l->msix_end = 0x2000 + 16 * 16;
		l->pba_bar = -1;
		xa_store(&dl_lender.devs, l->dev_id, l, GFP_KERNEL);
		dl_lent_holder_publish(l);
	}
}

static void teardown(void)
{
	xa_destroy(&dl_lender.devs);
}

static int p2p(unsigned int x, unsigned int y, unsigned int bar, bool map,
	       u64 iova)
{
	return dl_lent_p2p_dma(&devs[x], fab, HOLDER, 10 + y, bar, map, iova);
}

#define IOVA	0x80000000ULL

/*
 * Device 0 reaches device 1's BAR at the guest's address, all of it but
 * the MSI-X table's page, as MMIO; a replay changes nothing, a map
 * elsewhere moves it, an unmap takes it away, and an unmap of nothing
 * is no error. The target is referenced while it is mapped.
 */
static void test_map_unmap(void)
{
	setup();
	CHECK_EQ(p2p(0, 1, 2, true, IOVA), 0);
	CHECK_EQ(devs[0].np2p, 1);
	CHECK_EQ(doms[0].n, 2);
	CHECK_EQ(mapped_at(0, IOVA), 0xf0100000ULL);
	CHECK_EQ(mapped_at(0, IOVA + 0x1fff), 0xf0101fffULL);
	CHECK_EQ(mapped_at(0, IOVA + 0x2000), 0);	/* the MSI-X table */
	CHECK_EQ(mapped_at(0, IOVA + 0x3000), 0xf0103000ULL);
	CHECK(doms[0].m[0].prot & IOMMU_MMIO);
	CHECK_EQ(devs[1].ref.refcount, 2);
	CHECK_EQ(atomic64_read(&devs[0].cnt[DL_LCNT_P2P_MAPS]), 1);
	/* Nothing in the target's own domain. */
	CHECK_EQ(doms[1].n, 0);

	CHECK_EQ(p2p(0, 1, 2, true, IOVA), 0);
	CHECK_EQ(doms[0].n, 2);
	CHECK_EQ(atomic64_read(&devs[0].cnt[DL_LCNT_P2P_MAPS]), 1);

	CHECK_EQ(p2p(0, 1, 2, true, IOVA + 0x100000), 0);
	CHECK_EQ(doms[0].n, 2);
	CHECK_EQ(mapped_at(0, IOVA), 0);
	CHECK_EQ(mapped_at(0, IOVA + 0x100000), 0xf0100000ULL);
	CHECK_EQ(devs[1].ref.refcount, 2);

	CHECK_EQ(p2p(0, 1, 2, false, 0), 0);
	CHECK_EQ(doms[0].n, 0);
	CHECK_EQ(devs[0].np2p, 0);
	CHECK_EQ(devs[1].ref.refcount, 1);
	CHECK_EQ(p2p(0, 1, 2, false, 0), 0);
	CHECK_EQ(p2p(0, 3 + 90, 2, false, 0), 0);	/* no such device */
	teardown();
}

/* What the holder may not have mapped, and nothing is. */
static void test_refused(void)
{
	setup();
	/* Its own BAR (DL_MSG_BAR_DMA's), a device that is not there. */
	CHECK_EQ(p2p(0, 0, 2, true, IOVA), -EINVAL);
	CHECK_EQ(p2p(0, 90, 2, true, IOVA), -EINVAL);
	/* No such BAR, an I/O BAR, a BAR smaller than a page. */
	CHECK_EQ(p2p(0, 1, 1, true, IOVA), -EINVAL);
	CHECK_EQ(p2p(0, 1, 6, true, IOVA), -EINVAL);
	CHECK_EQ(p2p(0, 1, 4, true, IOVA), -EOPNOTSUPP);
	CHECK_EQ(p2p(0, 1, 0, true, IOVA), -EOPNOTSUPP);
	/* An IOVA off a page, one that wraps, past the aperture. */
	CHECK_EQ(p2p(0, 1, 2, true, IOVA + 8), -EINVAL);
	CHECK_EQ(p2p(0, 1, 2, true, ~0ULL & ~0xfffULL), -EINVAL);
	CHECK_EQ(p2p(0, 1, 2, true, 1ULL << 48), -EINVAL);
	/* Over guest RAM, over the device's own BAR mapping. */
	ram_busy = true;
	CHECK_EQ(p2p(0, 1, 2, true, IOVA), -EINVAL);
	ram_busy = false;
	devs[0].bars[2].dma = true;
	devs[0].bars[2].dma_iova = IOVA + 0x3000;
	CHECK_EQ(p2p(0, 1, 2, true, IOVA), -EINVAL);
	devs[0].bars[2].dma = false;
	/* Over another device's BAR it maps already. */
	CHECK_EQ(p2p(0, 1, 2, true, IOVA), 0);
	CHECK_EQ(p2p(0, 2, 2, true, IOVA + 0x1000), -EINVAL);
	/* The page-table budget. */
	tables_full = true;
	CHECK_EQ(p2p(0, 2, 2, true, IOVA + 0x100000), -ENOSPC);
	tables_full = false;
	/* A target held by another host, or by nobody. */
	devs[2].borrower = OTHER;
	dl_lent_holder_publish(&devs[2]);
	CHECK_EQ(p2p(0, 2, 2, true, IOVA + 0x100000), -EINVAL);
	devs[2].borrower = HOLDER;
	devs[2].borrower_inc = 8;	/* the holder as it was before */
	dl_lent_holder_publish(&devs[2]);
	CHECK_EQ(p2p(0, 2, 2, true, IOVA + 0x100000), -EINVAL);
	CHECK_EQ(doms[0].n, 2);		/* the one map of device 1 */
	CHECK_EQ(devs[2].ref.refcount, 1);
	teardown();
}

/* At most DL_P2P_MAX BARs of others, then ENOSPC. */
static void test_at_most(void)
{
	unsigned int i;

	setup();
	for (i = 0; i < NDEVS; i++) {
		devs[i].bars[3].size = 0x1000;
		devs[i].bars[3].map = (void __iomem *)1;
		devs[i].bars[5].size = 0x1000;
		devs[i].bars[5].map = (void __iomem *)1;
		pdevs[i].bar_start[3] = 0xe0000000ULL + i * 0x100000;
		pdevs[i].bar_start[5] = 0xe0080000ULL + i * 0x100000;
	}
	/* Devices 1 to 3, BARs 2, 3 and 5: nine, one too many. */
	for (i = 0; i < 9; i++) {
		unsigned int y = 1 + i / 3, bar = (u32[]){ 2, 3, 5 }[i % 3];

		CHECK_EQ(p2p(0, y, bar, true, IOVA + i * 0x100000),
			 i < DL_P2P_MAX ? 0 : -ENOSPC);
	}
	CHECK_EQ(devs[0].np2p, DL_P2P_MAX);
	dl_lent_p2p_unmap_all(&devs[0]);
	CHECK_EQ(devs[0].np2p, 0);
	CHECK_EQ(doms[0].n, 0);
	for (i = 1; i < NDEVS; i++)
		CHECK_EQ(devs[i].ref.refcount, 1);
	teardown();
}

/*
 * The target is taken back: every device that maps its BARs loses them
 * before its reset, counted on the target; a map after that finds it
 * held by nobody. Other mappings stay.
 */
static void test_revoke(void)
{
	setup();
	CHECK_EQ(p2p(0, 1, 2, true, IOVA), 0);
	CHECK_EQ(p2p(2, 1, 2, true, IOVA), 0);
	CHECK_EQ(p2p(2, 3, 2, true, IOVA + 0x100000), 0);
	CHECK_EQ(devs[1].ref.refcount, 3);
	dl_lent_p2p_revoke_target(&devs[1]);
	CHECK_EQ(devs[0].np2p, 0);
	CHECK_EQ(doms[0].n, 0);
	CHECK_EQ(devs[2].np2p, 1);
	CHECK_EQ(mapped_at(2, IOVA), 0);
	CHECK_EQ(mapped_at(2, IOVA + 0x100000), 0xf0300000ULL);
	CHECK_EQ(devs[1].ref.refcount, 1);
	CHECK_EQ(atomic64_read(&devs[1].cnt[DL_LCNT_P2P_REVOKES]), 2);
	CHECK_EQ(p2p(0, 1, 2, true, IOVA), -EINVAL);
	/* Lent again to the same holder: it may be mapped again. */
	dl_lent_holder_publish(&devs[1]);
	CHECK_EQ(p2p(0, 1, 2, true, IOVA), 0);
	dl_lent_p2p_unmap_all(&devs[0]);
	dl_lent_p2p_unmap_all(&devs[2]);
	CHECK_EQ(devs[1].ref.refcount, 1);
	CHECK_EQ(devs[3].ref.refcount, 1);
	teardown();
}

/* The holder asks device @x's lender to map (or unmap) device 55 of L2. */
static int remote(unsigned int x, bool map, u64 iova, u32 target_host)
{
	struct dl_p2p_dma d = {
		.dev_id = cpu_to_le32(10 + x),
		.target_id = cpu_to_le32(55),
		.bar = 2,
		.flags = map ? DL_P2P_DMA_F_MAP : 0,
		.target_host = cpu_to_le32(target_host),
		.iova = cpu_to_le64(iova),
	};
	struct dl_fabric_msg msg = { .peer = HOLDER, .req_id = 1 };
	int ret;

	ret = dl_lent_p2p_dma_remote(&devs[x], fab, &msg, &d);
	if (ret != 1)
		return ret;
	CHECK(devs[x].p2p_busy);
	/* One at a time: the holder waits for each answer. */
	CHECK_EQ(dl_lent_p2p_dma_remote(&devs[x], fab, &msg, &d), -EBUSY);
	fk.responded = 0;
	dl_lent_p2p_work(&devs[x].p2p_work);
	CHECK(!devs[x].p2p_busy);
	CHECK_EQ(fk.responded, 1);
	CHECK_EQ(devs[x].ref.refcount, 1);
	return fk.resp;
}

static void revoke_meanwhile(void)
{
	atomic_inc(&dl_p2p_revoke_gen);
}

static void revoke_once_meanwhile(void)
{
	atomic_inc(&dl_p2p_revoke_gen);
	fk.meanwhile = NULL;
}

static void holder_restarts_meanwhile(void)
{
	devs[0].borrower_inc = 8;
}

/*
 * Case 3, this lender's side: the other lender is asked where its BAR is
 * shown here, for this holder, and the device's domain maps the window
 * there, as MMIO; a replay asks again and changes nothing; its refusal,
 * a revocation or a new holder incarnation meanwhile, or a bad answer,
 * leaves nothing mapped.
 */
static void test_remote_map(void)
{
	setup();
	CHECK_EQ(remote(0, true, IOVA, L2), 0);
	CHECK_EQ(fk.to, L2);
	CHECK_EQ(le32_to_cpu(fk.q.dev_id), 55);
	CHECK_EQ(fk.q.bar, 2);
	CHECK_EQ(le32_to_cpu(fk.q.holder), HOLDER);
	CHECK_EQ(le64_to_cpu(fk.q.holder_inc), 7);
	CHECK_EQ(mapped_at(0, IOVA), WINDOW_PHYS);
	CHECK_EQ(mapped_at(0, IOVA + 0x7fff), WINDOW_PHYS + 0x7fff);
	CHECK(doms[0].m[0].prot & IOMMU_MMIO);
	CHECK_EQ(devs[0].p2p[0].rinc, L2_INC);
	CHECK_EQ(remote(0, true, IOVA, L2), 0);
	CHECK_EQ(fk.asked, 2);
	CHECK_EQ(doms[0].n, 1);
	CHECK_EQ(atomic64_read(&devs[0].cnt[DL_LCNT_P2P_MAPS]), 1);
	/* Moved. */
	CHECK_EQ(remote(0, true, IOVA + 0x100000, L2), 0);
	CHECK_EQ(mapped_at(0, IOVA), 0);
	CHECK_EQ(mapped_at(0, IOVA + 0x100000), WINDOW_PHYS);
	/* The other lender says no: what was mapped goes. */
	fk.status = -ENOENT;
	CHECK_EQ(remote(0, true, IOVA, L2), -ENOENT);
	CHECK_EQ(doms[0].n, 0);
	fk.status = 0;
	/* A revocation crossed the question: asked again, once. */
	fk.meanwhile = revoke_once_meanwhile;
	fk.asked = 0;
	CHECK_EQ(remote(0, true, IOVA, L2), 0);
	CHECK_EQ(fk.asked, 2);
	CHECK_EQ(mapped_at(0, IOVA), WINDOW_PHYS);
	CHECK_EQ(remote(0, false, 0, L2), 0);
	fk.meanwhile = revoke_meanwhile;
	CHECK_EQ(remote(0, true, IOVA, L2), -EAGAIN);
	CHECK_EQ(fk.asked, 4);
	CHECK_EQ(doms[0].n, 0);
	/* The holder came back as a new incarnation meanwhile. */
	fk.meanwhile = holder_restarts_meanwhile;
	CHECK_EQ(remote(0, true, IOVA, L2), -EBUSY);
	CHECK_EQ(doms[0].n, 0);
	devs[0].borrower_inc = 7;
	fk.meanwhile = NULL;
	/* Answers that cannot be. */
	fk.w_len = 8;
	CHECK_EQ(remote(0, true, IOVA, L2), -EPROTO);
	fk.w_len = sizeof(fk.w);
	fk.w.len = cpu_to_le64(0x8001);
	CHECK_EQ(remote(0, true, IOVA, L2), -EPROTO);
	fk.w.len = cpu_to_le64(0x8000);
	fk.w.token = cpu_to_le64(0x78);	/* no such window here */
	CHECK_EQ(remote(0, true, IOVA, L2), -ENOENT);
	fk.w.token = cpu_to_le64(0x77);
	CHECK_EQ(doms[0].n, 0);
	/* An IOVA the holder may not use: the same rules as on one lender. */
	CHECK_EQ(remote(0, true, IOVA + 8, L2), -EINVAL);
	ram_busy = true;
	CHECK_EQ(remote(0, true, IOVA, L2), -EINVAL);
	ram_busy = false;
	/* Hosts that cannot be the target's lender: asked nothing. */
	fk.asked = 0;
	CHECK_EQ(remote(0, true, IOVA, HOLDER), -EINVAL);
	CHECK_EQ(remote(0, true, IOVA, NHOSTS + 1), -EINVAL);
	CHECK_EQ(fk.asked, 0);
	/* A lender that is down is not asked. */
	down_host = L2;
	CHECK_EQ(remote(0, true, IOVA, L2), -ENOTCONN);
	CHECK_EQ(fk.asked, 0);
	down_host = U32_MAX;
	/* Unmapped, without a question. */
	CHECK_EQ(remote(0, true, IOVA, L2), 0);
	CHECK_EQ(remote(0, false, 0, L2), 0);
	CHECK_EQ(doms[0].n, 0);
	CHECK_EQ(fk.asked, 1);
	/* It goes with the device's other mappings. */
	CHECK_EQ(remote(0, true, IOVA, L2), 0);
	dl_lent_p2p_unmap_all(&devs[0]);
	CHECK_EQ(doms[0].n, 0);
	teardown();
}

/*
 * The other lender takes its device back and says so: every mapping onto
 * that device goes, others stay; the same from another host, or naming
 * another device, drops nothing of it. A lender that went down loses
 * what was mapped onto its BARs.
 */
static void test_remote_revoke(void)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(55) };
	struct dl_fabric_msg msg = {
		.peer = L2, .req_id = 2, .data = &ref, .len = sizeof(ref),
	};

	setup();
	CHECK_EQ(remote(0, true, IOVA, L2), 0);
	CHECK_EQ(remote(2, true, IOVA, L2), 0);
	/* Device 2 also reaches a BAR of device 1 here. */
	CHECK_EQ(p2p(2, 1, 2, true, IOVA + 0x100000), 0);
	msg.peer = 4;
	dl_lender_on_p2p_revoke(fab, &msg, NULL);
	CHECK_EQ(fk.resp, 0);
	CHECK_EQ(devs[0].np2p, 1);
	msg.peer = L2;
	ref.flags = cpu_to_le32(1);
	dl_lender_on_p2p_revoke(fab, &msg, NULL);
	CHECK_EQ(fk.resp, -EINVAL);
	CHECK_EQ(devs[0].np2p, 1);
	ref.flags = 0;
	/* The tests' fault: unanswered, nothing dropped. */
	dl_fault_p2p_revoke_ignore = true;
	fk.responded = 0;
	dl_lender_on_p2p_revoke(fab, &msg, NULL);
	dl_fault_p2p_revoke_ignore = false;
	CHECK_EQ(fk.responded, 0);
	CHECK_EQ(devs[0].np2p, 1);
	dl_lender_on_p2p_revoke(fab, &msg, NULL);
	CHECK_EQ(fk.resp, 0);
	CHECK_EQ(devs[0].np2p, 0);
	CHECK_EQ(doms[0].n, 0);
	CHECK_EQ(devs[2].np2p, 1);
	CHECK_EQ(mapped_at(2, IOVA + 0x100000), 0xf0100000ULL);
	CHECK_EQ(atomic64_read(&devs[2].cnt[DL_LCNT_P2P_REMOTE_DROPS]), 1);

	CHECK_EQ(remote(0, true, IOVA, L2), 0);
	dl_lender_p2p_gone_work(NULL);	/* nobody went: nothing goes */
	CHECK_EQ(devs[0].np2p, 1);
	down_host = L2;
	dl_lender_p2p_peer_down();
	dl_lender_p2p_gone_work(NULL);
	CHECK_EQ(devs[0].np2p, 0);
	CHECK_EQ(devs[2].np2p, 1);
	dl_lent_p2p_unmap_all(&devs[2]);
	teardown();
}

/*
 * Case 3, the target's lender: the holder shows its device's BAR to
 * another lender, which is told where only for that holder; the take-back
 * tells each such lender once and closes every window.
 */
static void test_export(void)
{
	struct dl_p2p_lookup q = {
		.dev_id = cpu_to_le32(11), .bar = 2,
		.holder = cpu_to_le32(HOLDER), .holder_inc = cpu_to_le64(7),
	};
	struct dl_p2p_window w;

	setup();
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, L2), 0);
	CHECK_EQ(fk.exposed, 1);
	CHECK_EQ(fk.expose_to, L2);
	CHECK_EQ(fk.expose_nskip, 1);	/* its MSI-X table kept out */
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, L2), 0);
	CHECK_EQ(fk.exposed, 1);
	/* Refused: the holder itself, this host, no host, no BAR, I/O. */
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, HOLDER), -EINVAL);
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, SELF), -EINVAL);
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, 99), -EINVAL);
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 1, L2), -EINVAL);
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 4, L2), -EOPNOTSUPP);
	fk.expose_status = -EOPNOTSUPP;
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 0, L2), -EOPNOTSUPP);
	fk.expose_status = 0;
	CHECK_EQ(devs[1].nexports, 1);

	CHECK_EQ(dl_lent_p2p_lookup(&devs[1], fab, L2, &q, &w), 0);
	CHECK_EQ(le64_to_cpu(w.token), 0x91);
	CHECK_EQ(le64_to_cpu(w.len), 0x4000);
	CHECK_EQ(dl_lent_p2p_lookup(&devs[1], fab, 4, &q, &w), -ENOENT);
	q.holder_inc = cpu_to_le64(8);
	CHECK_EQ(dl_lent_p2p_lookup(&devs[1], fab, L2, &q, &w), -ENOENT);
	q.holder_inc = cpu_to_le64(7);
	q.holder = cpu_to_le32(OTHER);
	CHECK_EQ(dl_lent_p2p_lookup(&devs[1], fab, L2, &q, &w), -ENOENT);
	q.holder = cpu_to_le32(HOLDER);
	q.bar = 0;
	CHECK_EQ(dl_lent_p2p_lookup(&devs[1], fab, L2, &q, &w), -ENOENT);
	q.bar = 2;

	/* Up to DL_P2P_EXPORTS_MAX. */
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 0, L2), 0);
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, 4), 0);
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, 5), 0);
	CHECK_EQ(dl_lent_p2p_export(&devs[1], fab, HOLDER, 2, 6), -ENOSPC);

	/* Take-back: L2 told once for its two, 4 and 5 once each. */
	fk.revoke_status = -ETIMEDOUT;
	down_host = 5;
	dl_lent_p2p_exports_revoke(&devs[1]);
	CHECK_EQ(fk.revokes, 3);
	CHECK_EQ(fk.revoke_dev, 11);
	CHECK_EQ(fk.closed, 4);
	CHECK_EQ(devs[1].nexports, 0);
	CHECK_EQ(atomic64_read(&devs[1].cnt[DL_LCNT_P2P_EXPORT_REVOKES]), 4);
	/* L2 and 4 are up and did not answer; 5 is down. */
	CHECK_EQ(atomic64_read(&devs[1].cnt[DL_LCNT_P2P_REVOKES_UNANSWERED]), 2);
	CHECK_EQ(dl_lent_p2p_lookup(&devs[1], fab, L2, &q, &w), -ENOENT);

	/*
	 * Those two fence it: nobody may take it, and they are asked again
	 * off the caller's path; L2 answers, 4 restarts, then it is free.
	 */
	CHECK_EQ(devs[1].p2p_fenced, BIT(L2) | BIT(4));
	CHECK_EQ(dl_lent_p2p_fence_check(&devs[1]), -EBUSY);
	CHECK_EQ(atomic64_read(&devs[1].cnt[DL_LCNT_P2P_FENCE_REFUSALS]), 1);
	CHECK_EQ(devs[1].p2p_fence_work.queued, 1);
	CHECK_EQ(devs[1].ref.refcount, 2);
	fk.revokes = 0;
	fk.revoke_status = 0;
	fence_answers_from = L2;
	dl_lent_p2p_fence_work(&devs[1].p2p_fence_work);
	CHECK_EQ(fk.revokes, 2);
	CHECK_EQ(devs[1].ref.refcount, 1);
	CHECK_EQ(devs[1].p2p_fenced, BIT(4));
	CHECK_EQ(dl_lent_p2p_fence_check(&devs[1]), -EBUSY);
	devs[1].p2p_fence_inc[4] = 41;	/* 4 came back as another */
	CHECK_EQ(dl_lent_p2p_fence_check(&devs[1]), 0);
	CHECK_EQ(devs[1].p2p_fenced, 0);
	/* One that went down owes nothing either; nor one of a fabric gone. */
	devs[1].p2p_fenced = BIT(L2);
	devs[1].p2p_fence_inc[L2] = L2_INC;
	down_host = L2;
	CHECK_EQ(dl_lent_p2p_fence_check(&devs[1]), 0);
	down_host = U32_MAX;
	devs[1].p2p_fenced = BIT(L2);
	dl_lent_p2p_fence_forget(&devs[1], fab);
	CHECK_EQ(dl_lent_p2p_fence_check(&devs[1]), 0);
	teardown();
}

static const struct unit_test tests[] = {
	{ "a BAR of another device of the holder: mapped but its MSI-X page, moved, unmapped",
	  test_map_unmap },
	{ "refused: itself, none, I/O or small BAR, bad IOVA, overlaps, budget, another holder",
	  test_refused },
	{ "at most DL_P2P_MAX BARs of others; all go with the device's other mappings",
	  test_at_most },
	{ "the target's take-back revokes every mapping onto it first",
	  test_revoke },
	{ "another lender's BAR: asked where, mapped onto the window; refusals and races",
	  test_remote_map },
	{ "another lender's REVOKE or loss drops the mappings onto its device",
	  test_remote_revoke },
	{ "a BAR shown to another lender for one holder; take-back tells it once; unanswered, it fences",
	  test_export },
};

const struct unit_suite lender_p2p_suite = {
	.name = "lender/p2p.c, p2p_remote.c: one device's DMA to another's BAR",
	.tests = tests,
	.ntests = ARRAY_SIZE(tests),
};
