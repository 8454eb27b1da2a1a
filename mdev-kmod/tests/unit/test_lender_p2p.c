// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests of lender/p2p.c: one device's DMA to a BAR of another device
 * of the same holder (%DL_MSG_P2P_DMA). The table of devices is lent.c's
 * own; what lies below (dma.c, the IOMMU, the fabric) is faked here: each
 * device's domain records what is mapped in it.
 */
#include <limits.h>
#include <stdio.h>

#include "kshim.h"

#define __MUTEX_INITIALIZER(m)	{ 0 }
#define LIST_HEAD_INIT(n)	{ &(n), &(n) }
#define XARRAY_INIT(n, f)	{ 0 }
#define xa_lock(xa)		((void)(xa))
#define xa_unlock(xa)		((void)(xa))
#define pci_info_ratelimited(p, ...)	((void)(p), kshim_log("info", __VA_ARGS__))
#define pci_dev_put(p)		((void)(p))
#define kfree_rcu(p, f)		((void)(p))

static inline void kref_init(struct kref *k)
{
	k->refcount = 1;
}

static inline void kref_get(struct kref *k)
{
	k->refcount++;
}

static inline bool kref_get_unless_zero(struct kref *k)
{
	if (!k->refcount)
		return false;
	k->refcount++;
	return true;
}

static inline int kref_put(struct kref *k, void (*release)(struct kref *))
{
	if (--k->refcount)
		return 0;
	release(k);
	return 1;
}

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

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "../../lender/lent.c"
#include "../../lender/p2p.c"
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

int dl_fabric_peer_info(struct dl_fabric *f, u32 peer,
			struct dl_fabric_peer_info *info)
{
	memset(info, 0, sizeof(*info));
	info->up = true;
	info->ram_size = 1ULL << 30;
	return 0;
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

static const struct unit_test tests[] = {
	{ "a BAR of another device of the holder: mapped but its MSI-X page, moved, unmapped",
	  test_map_unmap },
	{ "refused: itself, none, I/O or small BAR, bad IOVA, overlaps, budget, another holder",
	  test_refused },
	{ "at most DL_P2P_MAX BARs of others; all go with the device's other mappings",
	  test_at_most },
	{ "the target's take-back revokes every mapping onto it first",
	  test_revoke },
};

const struct unit_suite lender_p2p_suite = {
	.name = "lender/p2p.c: one device's DMA to another's BAR",
	.tests = tests,
	.ntests = ARRAY_SIZE(tests),
};
