// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests of lender/group.c: the functions of one slot lent as one
 * IOMMU group. The table of devices is lent.c's own; the IOMMU's groups,
 * domains and DMA ownership, and the bus reset, are faked here as Linux
 * 6.12 behaves: ownership is claimed with one cookie per group and refused
 * while a function uses the DMA API, a group is attached to one domain at
 * a time, a released group falls back to its blocking domain.
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
#define pci_dev_put(p)		((void)(p))
#define kfree_rcu(p, f)		((void)(p))
#define mutex_destroy(m)	((void)(m))
#define DEFINE_MUTEX(m)		struct mutex m = { 0 }
#define PCI_SLOT(devfn)		(((devfn) >> 3) & 0x1f)
#define PCI_HEADER_TYPE_NORMAL	0
#define pci_domain_nr(b)	((b)->domain_nr)
#define pci_err(p, ...)		((void)(p), kshim_log("err", __VA_ARGS__))
#define pci_warn(p, ...)	((void)(p), kshim_log("warn", __VA_ARGS__))
#define IS_ERR(p)		((unsigned long)(p) >= (unsigned long)-4095)
#define PTR_ERR(p)		((long)(p))
#define ERR_PTR(e)		((void *)(long)(e))
#define INIT_DELAYED_WORK(w, f)	((w)->work.queued = 0, (w)->delay = 0)
#define LIST_HEAD(n)		struct list_head n = LIST_HEAD_INIT(n)
#define dev_name(d)		((d)->name)
#define pci_dev_get(p)		(p)

/* lent.c's names, so that they clash with the other tests' copies. */
#define dl_lender		grpt_lender
#define dl_lent_put		grpt_lent_put
#define dl_lent_get		grpt_lent_get
#define dl_lent_next		grpt_lent_next
#define dl_lent_is_holder	grpt_lent_is_holder
#define dl_fabric_peer_info	grpt_peer_info

/* The IOMMU, as the group code sees it. */
struct iommu_group {
	struct device *devs[12];
	unsigned int n;
	int refs;
	/* Linux's group->owner and owner_cnt; a driver on the DMA API. */
	void *owner;
	int owner_cnt;
	bool driver_dma;
	/* NULL: the default domain; &blocking: the blocking domain. */
	struct iommu_domain *domain;
	unsigned int attaches, detaches;
};

void iommu_set_fault_handler(struct iommu_domain *d, iommu_fault_handler_t fn,
			     void *token);
struct dl_lent_dma;
/* A member's mappings: entries sorted by IOVA, in its tree's root. */
struct fake_maps {
	struct dl_lent_dma *m[4];
	unsigned int n;
};
static struct dl_lent_dma *fake_mt_find(struct maple_tree *mt,
					unsigned long *index,
					unsigned long max);
#define mt_find(mt, idx, max)	fake_mt_find(mt, idx, max)
struct iommu_group *iommu_group_get(struct device *dev);
void iommu_group_put(struct iommu_group *g);
struct iommu_group *iommu_group_ref_get(struct iommu_group *g);
int iommu_group_for_each_dev(struct iommu_group *g, void *data,
			     int (*fn)(struct device *, void *));
int iommu_device_claim_dma_owner(struct device *dev, void *owner);
void iommu_device_release_dma_owner(struct device *dev);
struct iommu_domain *iommu_paging_domain_alloc(struct device *dev);
int iommu_attach_group(struct iommu_domain *d, struct iommu_group *g);
void iommu_detach_group(struct iommu_domain *d, struct iommu_group *g);
int iommu_attach_device(struct iommu_domain *d, struct device *dev);
void iommu_detach_device(struct iommu_domain *d, struct device *dev);
void iommu_domain_free(struct iommu_domain *d);
bool dev_is_pci(struct device *dev);
int dl_lent_reset_bus(struct pci_dev *pdev);
bool cancel_delayed_work_sync(struct delayed_work *w);
#define to_pci_dev(d)		container_of(d, struct pci_dev, dev)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "../../lender/lent.c"
#include "../../lender/group.c"
#pragma GCC diagnostic pop

#include "unit.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

static struct iommu_domain blocking;
static struct iommu_group grp_a, grp_b;
static struct device not_pci = { .name = "not-pci" };
static unsigned int domains_alive, bus_resets;
static int bus_reset_ret;

static struct dl_lent_dma *fake_mt_find(struct maple_tree *mt,
					unsigned long *index,
					unsigned long max)
{
	struct fake_maps *f = mt->root;
	unsigned int i;

	for (i = 0; f && i < f->n; i++) {
		struct dl_lent_dma *m = f->m[i];

		if (m->iova + m->len - 1 >= *index && m->iova <= max) {
			*index = m->iova + m->len;
			return m;
		}
	}
	return NULL;
}

void iommu_set_fault_handler(struct iommu_domain *d, iommu_fault_handler_t fn,
			     void *token)
{
	d->handler = fn;
	d->handler_token = token;
}

/* The group of @dev: grp_a holds the slot's functions, grp_b the rest. */
static struct iommu_group *group_of(struct device *dev)
{
	unsigned int i;

	for (i = 0; i < grp_a.n; i++)
		if (grp_a.devs[i] == dev)
			return &grp_a;
	for (i = 0; i < grp_b.n; i++)
		if (grp_b.devs[i] == dev)
			return &grp_b;
	return NULL;
}

struct iommu_group *iommu_group_get(struct device *dev)
{
	struct iommu_group *g = group_of(dev);

	if (g)
		g->refs++;
	return g;
}

void iommu_group_put(struct iommu_group *g)
{
	g->refs--;
}

struct iommu_group *iommu_group_ref_get(struct iommu_group *g)
{
	g->refs++;
	return g;
}

int iommu_group_for_each_dev(struct iommu_group *g, void *data,
			     int (*fn)(struct device *, void *))
{
	unsigned int i;
	int ret = 0;

	for (i = 0; i < g->n && !ret; i++)
		ret = fn(g->devs[i], data);
	return ret;
}

int iommu_device_claim_dma_owner(struct device *dev, void *owner)
{
	struct iommu_group *g = group_of(dev);

	if (g->driver_dma)
		return -EPERM;
	if (g->owner_cnt) {
		if (g->owner != owner)
			return -EPERM;
		g->owner_cnt++;
		return 0;
	}
	g->owner = owner;
	g->owner_cnt = 1;
	g->domain = &blocking;
	return 0;
}

void iommu_device_release_dma_owner(struct device *dev)
{
	struct iommu_group *g = group_of(dev);

	CHECK(g->owner_cnt > 0);
	if (--g->owner_cnt)
		return;
	g->owner = NULL;
	CHECK(g->domain == &blocking);
	g->domain = NULL;
}

struct iommu_domain *iommu_paging_domain_alloc(struct device *dev)
{
	domains_alive++;
	return calloc(1, sizeof(struct iommu_domain));
}

int iommu_attach_group(struct iommu_domain *d, struct iommu_group *g)
{
	if (g->domain != &blocking)
		return -EBUSY;
	g->domain = d;
	g->attaches++;
	return 0;
}

void iommu_detach_group(struct iommu_domain *d, struct iommu_group *g)
{
	CHECK(g->domain == d);
	g->domain = &blocking;
	g->detaches++;
}

/* Linux refuses a group of more than one device here. */
int iommu_attach_device(struct iommu_domain *d, struct device *dev)
{
	struct iommu_group *g = group_of(dev);

	if (g->n != 1)
		return -EINVAL;
	return iommu_attach_group(d, g);
}

void iommu_detach_device(struct iommu_domain *d, struct device *dev)
{
	iommu_detach_group(d, group_of(dev));
}

void iommu_domain_free(struct iommu_domain *d)
{
	domains_alive--;
	free(d);
}

/* lent.c's holder check asks the fabric; nothing here does. */
int grpt_peer_info(struct dl_fabric *f, u32 peer,
		   struct dl_fabric_peer_info *info)
{
	return -EINVAL;
}

bool dev_is_pci(struct device *dev)
{
	return dev != &not_pci;
}

int dl_lent_reset_bus(struct pci_dev *pdev)
{
	bus_resets++;
	return bus_reset_ret;
}

bool cancel_delayed_work_sync(struct delayed_work *w)
{
	w->work.queued = 0;
	return false;
}

/* Bus 1 of domain 0: functions 0 to 2 of slot 0 (grp_a); function 0 of
 * slot 1 (grp_b, alone).
 */
#define NDEVS	3
static struct pci_bus bus1 = { .number = 1 };
static struct pci_dev pdevs[NDEVS + 1];
static struct dl_lent lents[NDEVS + 1];
#define ALONE	NDEVS

static void setup(unsigned int nfuncs)
{
	unsigned int i;

	xa_destroy(&dl_lender.devs);
	/* What a failed check left behind: forgotten, not freed. */
	INIT_LIST_HEAD(&dl_grps);
	memset(&grp_a, 0, sizeof(grp_a));
	memset(&grp_b, 0, sizeof(grp_b));
	memset(pdevs, 0, sizeof(pdevs));
	memset(lents, 0, sizeof(lents));
	domains_alive = 0;
	bus_resets = 0;
	bus_reset_ret = 0;
	for (i = 0; i <= NDEVS; i++) {
		struct dl_lent *l = &lents[i];

		pdevs[i].dev.name = "fn";
		pdevs[i].bus = &bus1;
		pdevs[i].devfn = i == ALONE ? 1 << 3 : i;
		kref_init(&l->ref);
		l->pdev = &pdevs[i];
		l->dev_id = 20 + i;
		l->state = DL_LENT_AVAILABLE;
		l->borrower = DL_NO_HOST;
	}
	for (i = 0; i < nfuncs; i++)
		grp_a.devs[grp_a.n++] = &pdevs[i].dev;
	grp_b.devs[grp_b.n++] = &pdevs[ALONE].dev;
}

/* Probe @i as driver.c does: join its group, then enter the table. */
static int probe(unsigned int i)
{
	int ret = dl_lent_group_join(&lents[i], group_of(&pdevs[i].dev),
				     iommu_paging_domain_alloc(NULL));

	if (!ret)
		xa_store(&dl_lender.devs, lents[i].dev_id, &lents[i],
			 GFP_KERNEL);
	return ret;
}

/* Remove @i as driver.c does: out of the table, then out of its group. */
static void remove_dev(unsigned int i)
{
	xa_erase(&dl_lender.devs, lents[i].dev_id);
	dl_lent_group_leave(&lents[i]);
}

static char fab_storage[2];
static struct dl_fabric *const fab = (struct dl_fabric *)&fab_storage[0];
static struct dl_fabric *const other_fab = (struct dl_fabric *)&fab_storage[1];

static void publish(unsigned int i, u32 host, u64 inc)
{
	lents[i].fab = fab;
	lents[i].borrower = host;
	lents[i].borrower_inc = inc;
	lents[i].pub_fab = fab;
	lents[i].pub_peer = host;
	lents[i].pub_inc = inc;
}

static void unpublish(unsigned int i)
{
	lents[i].pub_fab = NULL;
}

/*
 * Which groups are lent: alone; the functions of one slot; not with a
 * device of another slot, a device that is not PCI, a bridge, or more
 * functions than a slot has.
 */
static void test_scan(void)
{
	unsigned int n;

	setup(2);
	CHECK_EQ(dl_lent_group_scan(&pdevs[ALONE], &n), 0);
	CHECK_EQ(n, 1);
	CHECK_EQ(dl_lent_group_scan(&pdevs[1], &n), 0);
	CHECK_EQ(n, 2);
	CHECK_EQ(grp_a.refs, 0);
	grp_a.devs[grp_a.n++] = &pdevs[ALONE].dev;	/* another slot */
	CHECK_EQ(dl_lent_group_scan(&pdevs[0], &n), -EINVAL);
	grp_a.devs[grp_a.n - 1] = &not_pci;
	CHECK_EQ(dl_lent_group_scan(&pdevs[0], &n), -EINVAL);
	grp_a.n--;
	pdevs[1].hdr_type = 1;				/* a bridge */
	CHECK_EQ(dl_lent_group_scan(&pdevs[0], &n), -EINVAL);
	pdevs[1].hdr_type = 0;
	while (grp_a.n <= DL_GRP_MAX_MEMBERS)
		grp_a.devs[grp_a.n++] = &pdevs[2].dev;
	CHECK_EQ(dl_lent_group_scan(&pdevs[0], &n), -EINVAL);
	CHECK_EQ(grp_a.refs, 0);
	/* No IOMMU group at all. */
	pdevs[0].dev.name = "x";
	CHECK_EQ(dl_lent_group_scan(&(struct pci_dev){ .bus = &bus1 }, &n),
		 -EINVAL);
}

/*
 * The first member probed owns the group's one domain, attached to the
 * whole group; the next claims ownership with the same cookie and has no
 * domain; a function on the DMA API keeps the group from being lent.
 */
static void test_join(void)
{
	struct pci_dev *m[DL_GRP_MAX_MEMBERS];
	unsigned int n, i;

	setup(3);
	CHECK_EQ(probe(1), 0);
	CHECK(lents[1].grp != NULL);
	CHECK(lents[1].domain != NULL);
	CHECK(grp_a.domain == lents[1].domain);
	CHECK_EQ(grp_a.attaches, 1);
	CHECK(grp_a.owner == lents[1].grp);	/* the ownership cookie */
	CHECK_EQ(probe(0), 0);
	CHECK(lents[0].grp == lents[1].grp);
	CHECK(lents[0].domain == lents[1].domain);	/* the group's one */
	CHECK_EQ(grp_a.owner_cnt, 2);
	CHECK_EQ(domains_alive, 1);	/* the second member's was freed */
	CHECK_EQ(grp_a.attaches, 1);
	CHECK_EQ(lents[1].grp->members, 2);
	/* What peers are told: the slot, the same for both. */
	CHECK_EQ(dl_lent_group_id(&lents[0]), 0x00000101);
	CHECK_EQ(dl_lent_group_id(&lents[1]), 0x00000101);
	/* Lend and unlend take them all. */
	CHECK_EQ(dl_lent_group_pdevs(&pdevs[2], m, &n), 0);
	CHECK_EQ(n, 3);
	for (i = 0; i < n; i++)
		CHECK(m[i] == &pdevs[i]);
	remove_dev(0);
	remove_dev(1);
	CHECK(list_empty(&dl_grps));

	/* Another group, whose other function is on a DMA API driver. */
	setup(2);
	grp_a.driver_dma = true;
	CHECK_EQ(probe(0), -EPERM);
	CHECK(lents[0].grp == NULL);
	CHECK_EQ(domains_alive, 0);
	CHECK_EQ(grp_a.refs, 0);		/* the group object is gone */
	CHECK(list_empty(&dl_grps));
	/* A device alone keeps the device's own attach. */
	CHECK_EQ(dl_lent_group_id(&lents[ALONE]), 0);
	CHECK_EQ(dl_lent_group_pdevs(&pdevs[ALONE], m, &n), 0);
	CHECK_EQ(n, 1);
}

/*
 * One holder: a member may be taken by the holder of the others (host and
 * incarnation), by nobody else; once they are back, by anyone.
 */
static void test_one_holder(void)
{
	setup(2);
	CHECK_EQ(probe(0), 0);
	CHECK_EQ(probe(1), 0);
	CHECK_EQ(probe(ALONE), 0);	/* not a member: never refused here */
	publish(0, 1, 10);
	CHECK_EQ(dl_lent_group_lock(&lents[1], fab, 1, 10), 0);
	dl_lent_group_unlock(&lents[1]);
	CHECK_EQ(dl_lent_group_lock(&lents[1], fab, 2, 10), -EBUSY);
	CHECK_EQ(dl_lent_group_lock(&lents[1], fab, 1, 11), -EBUSY);
	CHECK_EQ(dl_lent_group_lock(&lents[1], other_fab, 1, 10), -EBUSY);
	CHECK_EQ(dl_lent_group_lock(&lents[ALONE], fab, 2, 10), 0);
	unpublish(0);
	CHECK_EQ(dl_lent_group_lock(&lents[1], fab, 2, 10), 0);
	dl_lent_group_unlock(&lents[1]);
	remove_dev(0);
	remove_dev(1);
	remove_dev(ALONE);
	CHECK(list_empty(&dl_grps));
}

/*
 * A member without a reset of its own: its take-back leaves the reset to
 * the bus, done once no member is held, and no member is lent until it
 * is; a reset that finds a device lock taken is tried again; one that
 * fails keeps the group from everyone; a member with FLR resets itself.
 */
static void test_bus_reset(void)
{
	struct dl_lent_grp *grp;

	setup(2);
	CHECK_EQ(probe(0), 0);
	CHECK_EQ(probe(1), 0);
	grp = lents[0].grp;
	lents[0].resets_alone = true;	/* FLR */
	CHECK(!dl_lent_group_defer_reset(&lents[0]));
	CHECK(!grp->reset_due);

	publish(0, 1, 10);
	publish(1, 1, 10);
	CHECK(dl_lent_group_defer_reset(&lents[1]));
	CHECK(grp->reset_due);
	unpublish(1);
	dl_lent_group_reset_queue(&lents[1]);
	CHECK_EQ(grp->reset_work.work.queued, 1);
	/* Not while function 0 is held, not for anyone meanwhile. */
	CHECK_EQ(dl_lent_group_lock(&lents[1], fab, 1, 10), -EBUSY);
	dl_lent_group_reset_work(&grp->reset_work.work);
	CHECK_EQ(bus_resets, 0);
	CHECK(grp->reset_due);
	unpublish(0);
	/* A device lock taken: later. */
	bus_reset_ret = -EAGAIN;
	dl_lent_group_reset_work(&grp->reset_work.work);
	CHECK_EQ(bus_resets, 1);
	CHECK_EQ(grp->reset_work.work.queued, 2);
	CHECK(grp->reset_due);
	bus_reset_ret = 0;
	dl_lent_group_reset_work(&grp->reset_work.work);
	CHECK_EQ(bus_resets, 2);
	CHECK(!grp->reset_due);
	CHECK_EQ(atomic64_read(&lents[0].cnt[DL_LCNT_GROUP_RESETS]) +
		 atomic64_read(&lents[1].cnt[DL_LCNT_GROUP_RESETS]), 1);
	CHECK_EQ(dl_lent_group_lock(&lents[1], fab, 2, 3), 0);
	dl_lent_group_unlock(&lents[1]);

	/* A failed reset: nobody, until the group is lent again. */
	CHECK(dl_lent_group_defer_reset(&lents[1]));
	bus_reset_ret = -EIO;
	dl_lent_group_reset_work(&grp->reset_work.work);
	CHECK(grp->reset_failed);
	CHECK_EQ(dl_lent_group_lock(&lents[0], fab, 2, 3), -EBUSY);
	remove_dev(0);
	remove_dev(1);

	/* Not every function ours: no bus reset at all. */
	setup(3);
	CHECK_EQ(probe(0), 0);
	CHECK_EQ(probe(1), 0);
	grp = lents[0].grp;
	CHECK(dl_lent_group_defer_reset(&lents[1]));
	dl_lent_group_reset_work(&grp->reset_work.work);
	CHECK_EQ(bus_resets, 0);
	CHECK(grp->reset_due);
	remove_dev(0);
	remove_dev(1);
}

/*
 * Members leave in any order: the group keeps its domain until the last
 * one goes, then falls back to its default domain with its ownership
 * released and the domain freed.
 */
static void test_leave(void)
{
	setup(2);
	CHECK_EQ(probe(0), 0);
	CHECK_EQ(probe(1), 0);
	remove_dev(0);
	CHECK(grp_a.domain == lents[1].domain);
	CHECK_EQ(grp_a.detaches, 0);
	CHECK_EQ(domains_alive, 1);
	CHECK_EQ(dl_lent_group_lock(&lents[1], fab, 1, 10), 0);
	dl_lent_group_unlock(&lents[1]);
	CHECK_EQ(probe(0), 0);
	CHECK(lents[0].domain == lents[1].domain);
	CHECK_EQ(domains_alive, 1);
	remove_dev(1);
	remove_dev(0);
	CHECK(grp_a.domain == NULL);	/* back to its default domain */
	CHECK_EQ(grp_a.detaches, 1);
	CHECK_EQ(grp_a.owner_cnt, 0);
	CHECK_EQ(domains_alive, 0);
	CHECK_EQ(grp_a.refs, 0);
	CHECK(list_empty(&dl_grps));
}

/*
 * What another member maps is found, clipped to the range asked, with
 * what it reaches there; a member's own mappings are not "another's".
 */
static void test_shared(void)
{
	struct dl_lent_dma m0 = { .iova = 0x1000, .len = 0x4000,
				  .phys = 0x100000 };
	struct fake_maps f0 = { .m = { &m0 }, .n = 1 };
	phys_addr_t sp;
	u64 sf, sl;

	setup(2);
	CHECK_EQ(probe(0), 0);
	CHECK_EQ(probe(1), 0);
	lents[0].dma.root = &f0;
	CHECK(dl_lent_group_next_shared(&lents[1], 0, 0x8fff, &sf, &sl, &sp));
	CHECK_EQ(sf, 0x1000);
	CHECK_EQ(sl, 0x4fff);
	CHECK_EQ(sp, 0x100000);
	CHECK(dl_lent_group_next_shared(&lents[1], 0x3000, 0x3fff, &sf, &sl,
					&sp));
	CHECK_EQ(sf, 0x3000);
	CHECK_EQ(sl, 0x3fff);
	CHECK_EQ(sp, 0x102000);
	CHECK(!dl_lent_group_next_shared(&lents[1], 0x5000, 0x8fff, &sf, &sl,
					 &sp));
	CHECK(!dl_lent_group_next_shared(&lents[0], 0, 0x8fff, &sf, &sl, &sp));
	lents[0].dma.root = NULL;
	remove_dev(0);
	remove_dev(1);
}

/*
 * Once no member is held and none maps anything, the page tables they
 * left go with a fresh domain for the whole group (the same fault
 * handler, every member's pointer moved, their tables forgotten); not
 * while a member still maps something.
 */
static void test_fresh_domain(void)
{
	struct iommu_domain *old;
	struct dl_lent_grp *grp;

	setup(2);
	CHECK_EQ(probe(0), 0);
	CHECK_EQ(probe(1), 0);
	grp = lents[0].grp;
	old = grp_a.domain;
	old->handler_token = &grp_a;
	lents[0].dma_nleaves = 3;
	lents[1].dma_count = 1;
	dl_lent_group_reset_work(&grp->reset_work.work);
	CHECK(grp_a.domain == old);
	lents[1].dma_count = 0;
	dl_lent_group_reset_work(&grp->reset_work.work);
	CHECK(grp_a.domain != old);
	CHECK(lents[0].domain == grp_a.domain);
	CHECK(lents[1].domain == grp_a.domain);
	CHECK(grp_a.domain->handler_token == &grp_a);
	CHECK_EQ(lents[0].dma_nleaves, 0);
	CHECK_EQ(domains_alive, 1);
	CHECK_EQ(atomic64_read(&lents[0].cnt[DL_LCNT_DMA_TABLE_FREES]) +
		 atomic64_read(&lents[1].cnt[DL_LCNT_DMA_TABLE_FREES]), 1);
	CHECK_EQ(bus_resets, 0);	/* none was due */
	remove_dev(0);
	remove_dev(1);
	CHECK_EQ(domains_alive, 0);
}

static const struct unit_test tests[] = {
	{ "groups lent: alone, or the functions of one slot", test_scan },
	{ "one domain per group, owned by its first member", test_join },
	{ "a group has one holder at a time", test_one_holder },
	{ "no own reset: the bus is reset once all are back", test_bus_reset },
	{ "members leave in any order; the domain goes with the last",
	  test_leave },
	{ "another member's mappings are found, clipped", test_shared },
	{ "a fresh domain once nothing is held or mapped", test_fresh_domain },
};

UNIT_SUITE(lender_group_suite, "lender/group.c", tests);
