// SPDX-License-Identifier: GPL-2.0
/*
 * The emulated fabric backend: QEMU ivshmem devices (1af4:1110).
 *
 * Two kinds of ivshmem device make up the emulated NTB adapter:
 *  - one ivshmem-doorbell, the adapter: BAR0 holds the registers, BAR1 the
 *    MSI-X table, BAR2 the control area shared by all hosts (formatted by
 *    devlend's ivshmem server). IVPosition is this host's id; writing
 *    (peer << 16) | vector to Doorbell interrupts that peer's vector.
 *  - one ivshmem-plain per peer, without MSI-X: BAR2 is a window onto the
 *    whole RAM of some peer. Which peer is not known from the device; the
 *    core finds out by looking for the peer's ident token through it.
 *
 * The devices may probe in any order: windows wait in a list until the
 * core claims them. Only one adapter is supported.
 *
 * BAR windows (docs/lending.md, "BARs straight through a window"): the
 * emulated fabric's windows reach files only, so a device BAR can be shown
 * to peers only where the BAR itself is such a file: QEMU's NVMe
 * persistent memory region from a memory-backend-file, which the cluster
 * also gives each other host as one more ivshmem-plain. ivshmem-plain
 * carries no identity, so the parameter bar_windows says which is which,
 * on both sides, by a tag the topology chose (a comma-separated list):
 *   lend:<domain:bus:dev.fn>/<bar>=<tag>   this host's device BAR is
 *                                          RAM-backed, shown as <tag>
 *   show:<domain:bus:dev.fn>=<host>/<tag>  this ivshmem-plain shows
 *                                          host <host>'s <tag>
 * The lender answers a BAR window request with the tag as its token; the
 * borrower finds the ivshmem-plain that shows that host's tag. Nothing
 * can be revoked: the file stays shared, so the borrower's mappings are
 * all that keeps a guest from it (its zaps), as docs/lending.md says.
 *
 * This is devlend_ivshmem.ko. Its PCI driver is called "devlend": the
 * borrower's mdev types on the adapter are named after it
 * ("devlend-<type>"), and tools find the adapter by it.
 *
 * Lock order: dl_ivs_adapter_lock, then the fabric's locks (its clients'
 * and its liveness lock), then dl_ivs_windows_lock.
 */
#include <linux/device.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "devlend_wire.h"
#include "../fabric/backend.h"

/* See above: tools and mdev type names depend on it. */
#define DL_IVS_DRIVER		"devlend"

#define DL_IVS_VENDOR		0x1af4
#define DL_IVS_DEVICE		0x1110

/* BAR0 registers (QEMU docs/specs/ivshmem-spec.rst). */
#define DL_IVS_INTR_MASK	0x00
#define DL_IVS_INTR_STATUS	0x04
#define DL_IVS_IV_POSITION	0x08
#define DL_IVS_DOORBELL		0x0c

#define DL_IVS_BAR_REGS		0
#define DL_IVS_BAR_SHMEM	2

enum dl_ivs_role {
	DL_IVS_ADAPTER,
	DL_IVS_WINDOW,
};

struct dl_ivs_adapter;

struct dl_ivs_vector {
	struct dl_ivs_adapter *adapter;
	unsigned int vector;
};

struct dl_ivs_adapter {
	enum dl_ivs_role role;	/* first: pci drvdata of both kinds */
	struct pci_dev *pdev;
	void __iomem *regs;
	struct dl_fabric *fab;
	unsigned int nvec;
	struct dl_ivs_vector vecs[DL_DB_VECTORS_MAX];
	phys_addr_t db_phys;
	bool db_page_alone;
};

struct dl_ivs_window {
	enum dl_ivs_role role;	/* first: pci drvdata of both kinds */
	struct dl_fabric_window fw;
	struct pci_dev *pdev;
	struct list_head node;
	bool claimed;
};

/* See above: which BARs are files shown to peers, and which window shows one. */
#define DL_IVS_BAR_WINDOWS_LEN	256
static char dl_ivs_bar_windows[DL_IVS_BAR_WINDOWS_LEN];
module_param_string(bar_windows, dl_ivs_bar_windows, DL_IVS_BAR_WINDOWS_LEN,
		    0644);
MODULE_PARM_DESC(bar_windows,
		 "RAM-backed BARs shown to peers and the windows onto them: lend:<pci>/<bar>=<tag>,show:<pci>=<host>/<tag>");

/* One entry of bar_windows. */
struct dl_ivs_barwin {
	bool lend;
	unsigned int domain, bus, dev, fn;
	unsigned int bar_or_host;
	u64 tag;
};

/*
 * Find the first entry of bar_windows for which @match returns true.
 * The parameter may be rewritten at any time: it is copied under the
 * parameter lock and parsed from the copy; malformed entries are skipped.
 */
static bool dl_ivs_barwin_find(bool (*match)(const struct dl_ivs_barwin *e,
					     const void *arg),
			       const void *arg, struct dl_ivs_barwin *found)
{
	char *buf, *cur, *tok;
	struct dl_ivs_barwin e;
	bool ret = false;

	kernel_param_lock(THIS_MODULE);
	buf = kstrdup(dl_ivs_bar_windows, GFP_KERNEL);
	kernel_param_unlock(THIS_MODULE);
	if (!buf)
		return false;
	cur = strim(buf);
	while ((tok = strsep(&cur, ",")) != NULL) {
		memset(&e, 0, sizeof(e));
		if (sscanf(tok, "lend:%x:%x:%x.%x/%u=%llu", &e.domain, &e.bus,
			   &e.dev, &e.fn, &e.bar_or_host, &e.tag) == 6)
			e.lend = true;
		else if (sscanf(tok, "show:%x:%x:%x.%x=%u/%llu", &e.domain,
				&e.bus, &e.dev, &e.fn, &e.bar_or_host,
				&e.tag) != 6)
			continue;
		if (match(&e, arg)) {
			*found = e;
			ret = true;
			break;
		}
	}
	kfree(buf);
	return ret;
}

static bool dl_ivs_barwin_is_dev(const struct dl_ivs_barwin *e,
				 struct pci_dev *pdev)
{
	return e->domain == pci_domain_nr(pdev->bus) &&
	       e->bus == pdev->bus->number && e->dev == PCI_SLOT(pdev->devfn) &&
	       e->fn == PCI_FUNC(pdev->devfn);
}

struct dl_ivs_lend_key {
	struct pci_dev *pdev;
	int bar;
};

static bool dl_ivs_match_lend(const struct dl_ivs_barwin *e, const void *arg)
{
	const struct dl_ivs_lend_key *k = arg;

	return e->lend && e->bar_or_host == k->bar &&
	       dl_ivs_barwin_is_dev(e, k->pdev);
}

struct dl_ivs_show_key {
	u32 host;
	u64 tag;	/* with @any_tag false */
	bool any_tag;
};

static bool dl_ivs_match_show(const struct dl_ivs_barwin *e, const void *arg)
{
	const struct dl_ivs_show_key *k = arg;

	return !e->lend && e->bar_or_host == k->host &&
	       (k->any_tag || e->tag == k->tag);
}

static bool dl_ivs_match_show_dev(const struct dl_ivs_barwin *e,
				  const void *arg)
{
	return !e->lend && dl_ivs_barwin_is_dev(e, (struct pci_dev *)arg);
}

/*
 * The lender's side: a BAR named by a lend: entry is a file the peers
 * have a window onto, all of it. The file cannot hide pages, so a BAR
 * with pages to skip (an MSI-X table) is refused.
 */
static int dl_ivs_bar_expose(struct dl_fabric *fab, u32 peer,
			     struct pci_dev *pdev, int bar,
			     const struct dl_fabric_span *skip,
			     unsigned int nskip, u64 *token, u64 *len)
{
	struct dl_ivs_lend_key k = { .pdev = pdev, .bar = bar };
	struct dl_ivs_barwin e;

	if (nskip || !dl_ivs_barwin_find(dl_ivs_match_lend, &k, &e))
		return -EOPNOTSUPP;
	*len = pci_resource_len(pdev, bar);
	if (!*len || !PAGE_ALIGNED(*len))
		return -EOPNOTSUPP;
	*token = e.tag;
	return 0;
}

/* The borrower's side: the ivshmem-plain a show: entry names. */
static int dl_ivs_peer_bar(struct dl_fabric *fab, u32 peer, u64 token,
			   u64 len, phys_addr_t *phys)
{
	struct dl_ivs_show_key k = { .host = peer, .tag = token };
	struct dl_ivs_barwin e;
	struct pci_dev *pdev;
	int ret = -ENOENT;

	if (!dl_ivs_barwin_find(dl_ivs_match_show, &k, &e))
		return -ENOENT;
	pdev = pci_get_domain_bus_and_slot(e.domain, e.bus,
					   PCI_DEVFN(e.dev, e.fn));
	if (!pdev)
		return -ENOENT;
	/* Only an ivshmem-plain of ours: its BAR2 is claimed and decodes. */
	if (pdev->vendor == DL_IVS_VENDOR && pdev->device == DL_IVS_DEVICE &&
	    pdev->dev.driver && !strcmp(pdev->dev.driver->name, DL_IVS_DRIVER) &&
	    !pci_find_capability(pdev, PCI_CAP_ID_MSIX) &&
	    pci_resource_len(pdev, DL_IVS_BAR_SHMEM) >= len) {
		*phys = pci_resource_start(pdev, DL_IVS_BAR_SHMEM);
		ret = 0;
	}
	pci_dev_put(pdev);
	return ret;
}

static bool dl_ivs_peer_bar_capable(struct dl_fabric *fab, u32 peer)
{
	struct dl_ivs_show_key k = { .host = peer, .any_tag = true };
	struct dl_ivs_barwin e;

	return dl_ivs_barwin_find(dl_ivs_match_show, &k, &e);
}

static DEFINE_MUTEX(dl_ivs_adapter_lock);	/* the adapter; window removal */
static struct dl_ivs_adapter *dl_ivs_adapter;
static DEFINE_MUTEX(dl_ivs_windows_lock);	/* the list and claims */
static LIST_HEAD(dl_ivs_windows);

static void dl_ivs_peer_db_set(struct dl_fabric *fab, u32 peer,
			       unsigned int vector)
{
	struct dl_ivs_adapter *a = dl_fabric_backend_priv(fab);

	/* writel orders this after the ring writes that precede it. */
	writel(peer << 16 | vector, a->regs + DL_IVS_DOORBELL);
}

/*
 * A device's MSI-X write of (peer << 16) | vector to the Doorbell register
 * rings that peer's vector as the CPU's write does. Only when no other
 * device's registers share the register's page: the page is what an IOMMU
 * maps for the device, and whatever the device's holder makes it write
 * lands anywhere in it.
 */
static int dl_ivs_peer_db_msg(struct dl_fabric *fab, u32 peer,
			      unsigned int vector, phys_addr_t *addr, u32 *data)
{
	struct dl_ivs_adapter *a = dl_fabric_backend_priv(fab);

	if (!a->db_page_alone || peer > U16_MAX || vector > 0xff)
		return -EOPNOTSUPP;
	*addr = a->db_phys;
	*data = peer << 16 | vector;
	return 0;
}

/*
 * Whether the page of @phys holds no memory BAR of another device (this
 * adapter's own are its registers: IntrMask and IntrStatus only touch
 * INTx, which the adapter does not use). The other BARs of ivshmem
 * devices are their registers too, which do nothing without a doorbell
 * chardev, but they could be another driver's: refused as well.
 */
static bool dl_ivs_page_alone(struct pci_dev *self, phys_addr_t phys)
{
	resource_size_t start = round_down(phys, PAGE_SIZE);
	resource_size_t end = start + PAGE_SIZE - 1;
	struct pci_dev *pdev = NULL;
	int bar;

	for_each_pci_dev(pdev) {
		/* BARs, ROM and VF BARs; not a bridge's windows. */
		for (bar = 0; bar < PCI_BRIDGE_RESOURCES; bar++) {
			struct resource *r = &pdev->resource[bar];

			if (!(resource_type(r) & IORESOURCE_MEM) ||
			    r->flags & (IORESOURCE_UNSET | IORESOURCE_DISABLED) ||
			    !resource_size(r) || r->end < start ||
			    r->start > end)
				continue;
			if (pdev == self && bar == DL_IVS_BAR_REGS)
				continue;
			pci_info(self, "doorbell page shared with %s BAR %d: interrupts are relayed\n",
				 pci_name(pdev), bar);
			pci_dev_put(pdev);
			return false;
		}
	}
	return true;
}

/* Whether the window shows @id: the token at its offset. */
static bool dl_ivs_window_shows(struct dl_ivs_window *w,
				const struct dl_fabric_ident *id)
{
	u64 page = round_down(id->offset, PAGE_SIZE);
	void *map;
	u64 token;

	/* Only one page is mapped: the token must lie wholly inside it. */
	if (w->fw.size < id->min_size || w->fw.size < 8 ||
	    id->offset > w->fw.size - 8 ||
	    offset_in_page(id->offset) > PAGE_SIZE - sizeof(token))
		return false;

	map = memremap(w->fw.phys_addr + page, PAGE_SIZE, MEMREMAP_WB);
	if (!map)
		return false;
	token = le64_to_cpu(READ_ONCE(*(__le64 *)(map + id->offset - page)));
	memunmap(map);
	return token == id->token;
}

static struct dl_fabric_window *
dl_ivs_window_find(struct dl_fabric *fab, const struct dl_fabric_ident *id)
{
	struct dl_fabric_window *found = NULL;
	struct dl_ivs_barwin e;
	struct dl_ivs_window *w;

	mutex_lock(&dl_ivs_windows_lock);
	list_for_each_entry(w, &dl_ivs_windows, node) {
		/* A window onto a peer's BAR shows no peer's RAM. */
		if (w->claimed || !dl_ivs_window_shows(w, id) ||
		    dl_ivs_barwin_find(dl_ivs_match_show_dev, w->pdev, &e))
			continue;
		w->claimed = true;
		found = &w->fw;
		break;
	}
	mutex_unlock(&dl_ivs_windows_lock);
	return found;
}

static void dl_ivs_window_put(struct dl_fabric *fab,
			      struct dl_fabric_window *win)
{
	struct dl_ivs_window *w = container_of(win, struct dl_ivs_window, fw);

	mutex_lock(&dl_ivs_windows_lock);
	w->claimed = false;
	mutex_unlock(&dl_ivs_windows_lock);
}

static const struct dl_fabric_backend_ops dl_ivs_ops = {
	.name = "ivshmem",
	.peer_db_set = dl_ivs_peer_db_set,
	.window_find = dl_ivs_window_find,
	.window_put = dl_ivs_window_put,
	.peer_db_msg = dl_ivs_peer_db_msg,
	.bar_expose = dl_ivs_bar_expose,
	.peer_bar = dl_ivs_peer_bar,
	.peer_bar_capable = dl_ivs_peer_bar_capable,
};

static irqreturn_t dl_ivs_irq(int irq, void *data)
{
	struct dl_ivs_vector *v = data;

	dl_fabric_db_event(v->adapter->fab, v->vector);
	return IRQ_HANDLED;
}

/* Free the first @n handlers; the vectors stay (pci_free_irq_vectors()). */
static void dl_ivs_free_irqs(struct dl_ivs_adapter *a, unsigned int n)
{
	while (n--)
		free_irq(pci_irq_vector(a->pdev, n), &a->vecs[n]);
}

/* The MSI-X vectors; before the fabric exists, which needs their number. */
static int dl_ivs_alloc_vectors(struct dl_ivs_adapter *a)
{
	int ret;

	ret = pci_alloc_irq_vectors(a->pdev, 1, DL_DB_VECTORS_MAX,
				    PCI_IRQ_MSIX);
	if (ret < 0) {
		dev_err(&a->pdev->dev, "cannot enable MSI-X for doorbells: %d\n",
			ret);
		return ret;
	}
	a->nvec = ret;
	return 0;
}

/* Their handlers; after the fabric exists, which they call. */
static int dl_ivs_request_irqs(struct dl_ivs_adapter *a)
{
	struct pci_dev *pdev = a->pdev;
	unsigned int i;
	int ret;

	for (i = 0; i < a->nvec; i++) {
		a->vecs[i].adapter = a;
		a->vecs[i].vector = i;
		ret = request_irq(pci_irq_vector(pdev, i), dl_ivs_irq, 0,
				  DL_IVS_DRIVER, &a->vecs[i]);
		if (ret) {
			dev_err(&pdev->dev, "cannot request doorbell vector %u: %d\n",
				i, ret);
			dl_ivs_free_irqs(a, i);
			return ret;
		}
	}
	return 0;
}

/* Enable the device and map its registers and the control area. */
static int dl_ivs_adapter_map(struct dl_ivs_adapter *a,
			      struct dl_fabric_config *cfg)
{
	struct pci_dev *pdev = a->pdev;
	resource_size_t len;
	int ret;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	a->regs = pcim_iomap_region(pdev, DL_IVS_BAR_REGS, DL_IVS_DRIVER);
	if (IS_ERR(a->regs))
		return PTR_ERR(a->regs);
	ret = pcim_request_region(pdev, DL_IVS_BAR_SHMEM, DL_IVS_DRIVER);
	if (ret)
		return ret;

	len = pci_resource_len(pdev, DL_IVS_BAR_SHMEM);
	if (!len) {
		dev_err(&pdev->dev, "no shared memory in BAR2\n");
		return -ENODEV;
	}
	/* Ordinary shared RAM on the host side: map it cached. */
	cfg->ctl = devm_memremap(&pdev->dev,
				 pci_resource_start(pdev, DL_IVS_BAR_SHMEM),
				 len, MEMREMAP_WB);
	if (IS_ERR(cfg->ctl))
		return PTR_ERR(cfg->ctl);
	cfg->ctl_size = len;
	cfg->host_id = readl(a->regs + DL_IVS_IV_POSITION);
	a->db_phys = pci_resource_start(pdev, DL_IVS_BAR_REGS) + DL_IVS_DOORBELL;
	a->db_page_alone = dl_ivs_page_alone(pdev, a->db_phys);

	/* MSI-X messages are memory writes by the device. */
	pci_set_master(pdev);
	return 0;
}

static int dl_ivs_adapter_probe(struct pci_dev *pdev)
{
	struct dl_fabric_config cfg = {
		.dev = &pdev->dev,
		.ops = &dl_ivs_ops,
	};
	struct dl_ivs_adapter *a;
	int ret;

	a = devm_kzalloc(&pdev->dev, sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	a->role = DL_IVS_ADAPTER;
	a->pdev = pdev;

	mutex_lock(&dl_ivs_adapter_lock);
	if (dl_ivs_adapter) {
		dev_err(&pdev->dev, "fabric adapter %s is already bound; only one is supported\n",
			pci_name(dl_ivs_adapter->pdev));
		ret = -EBUSY;
		goto out_unlock;
	}
	ret = dl_ivs_adapter_map(a, &cfg);
	if (ret)
		goto out_unlock;

	ret = dl_ivs_alloc_vectors(a);
	if (ret)
		goto out_unlock;

	cfg.priv = a;
	cfg.db_vectors = a->nvec;
	a->fab = dl_fabric_create(&cfg);
	if (IS_ERR(a->fab)) {
		ret = PTR_ERR(a->fab);
		goto err_free_vectors;
	}
	ret = dl_ivs_request_irqs(a);
	if (ret)
		goto err_destroy_fabric;

	ret = dl_fabric_start(a->fab);
	if (ret)
		goto err_free_irqs;

	pci_set_drvdata(pdev, a);
	dl_ivs_adapter = a;
	mutex_unlock(&dl_ivs_adapter_lock);
	return 0;

err_free_irqs:
	dl_ivs_free_irqs(a, a->nvec);
err_destroy_fabric:
	dl_fabric_destroy(a->fab);
err_free_vectors:
	pci_free_irq_vectors(pdev);
out_unlock:
	mutex_unlock(&dl_ivs_adapter_lock);
	return ret;
}

static void dl_ivs_adapter_remove(struct dl_ivs_adapter *a)
{
	mutex_lock(&dl_ivs_adapter_lock);
	dl_fabric_stop(a->fab);
	dl_ivs_adapter = NULL;
	mutex_unlock(&dl_ivs_adapter_lock);

	dl_ivs_free_irqs(a, a->nvec);
	dl_fabric_destroy(a->fab);
	pci_free_irq_vectors(a->pdev);
}

static int dl_ivs_window_probe(struct pci_dev *pdev)
{
	struct dl_ivs_window *w;
	int ret;

	w = devm_kzalloc(&pdev->dev, sizeof(*w), GFP_KERNEL);
	if (!w)
		return -ENOMEM;
	w->role = DL_IVS_WINDOW;
	w->pdev = pdev;

	/* Enabled so that the BAR decodes, for the CPU and for peer DMA. */
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = pcim_request_region(pdev, DL_IVS_BAR_SHMEM, DL_IVS_DRIVER);
	if (ret)
		return ret;
	w->fw.dev = &pdev->dev;
	w->fw.phys_addr = pci_resource_start(pdev, DL_IVS_BAR_SHMEM);
	w->fw.size = pci_resource_len(pdev, DL_IVS_BAR_SHMEM);
	if (!w->fw.size) {
		dev_err(&pdev->dev, "no memory in BAR2\n");
		return -ENODEV;
	}
	pci_set_drvdata(pdev, w);

	mutex_lock(&dl_ivs_windows_lock);
	list_add_tail(&w->node, &dl_ivs_windows);
	mutex_unlock(&dl_ivs_windows_lock);

	dev_info(&pdev->dev, "memory window of %llu MiB at %pa\n",
		 (u64)w->fw.size >> 20, &w->fw.phys_addr);
	return 0;
}

static void dl_ivs_window_remove(struct dl_ivs_window *w)
{
	bool claimed;

	mutex_lock(&dl_ivs_adapter_lock);

	mutex_lock(&dl_ivs_windows_lock);
	list_del(&w->node);
	claimed = w->claimed;
	mutex_unlock(&dl_ivs_windows_lock);

	/* Off the list nobody can claim it; take it from who has it. */
	if (claimed && dl_ivs_adapter)
		dl_fabric_window_lost(dl_ivs_adapter->fab, &w->fw);
	/*
	 * Any window may have been a BAR's (bar_windows can change at any
	 * time): no mapping may reach its addresses once it is gone.
	 */
	if (dl_ivs_adapter)
		dl_fabric_peer_bar_lost(dl_ivs_adapter->fab, w->fw.phys_addr,
					w->fw.size);

	mutex_unlock(&dl_ivs_adapter_lock);
}

static int dl_ivs_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	/* Only ivshmem-doorbell has MSI-X; ivshmem-plain is a window. */
	if (pci_find_capability(pdev, PCI_CAP_ID_MSIX))
		return dl_ivs_adapter_probe(pdev);
	return dl_ivs_window_probe(pdev);
}

static void dl_ivs_remove(struct pci_dev *pdev)
{
	enum dl_ivs_role *role = pci_get_drvdata(pdev);

	if (*role == DL_IVS_ADAPTER)
		dl_ivs_adapter_remove(container_of(role, struct dl_ivs_adapter,
						   role));
	else
		dl_ivs_window_remove(container_of(role, struct dl_ivs_window,
						  role));
}

static const struct pci_device_id dl_ivs_ids[] = {
	{ PCI_DEVICE(DL_IVS_VENDOR, DL_IVS_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, dl_ivs_ids);

static struct pci_driver dl_ivs_driver = {
	.name = DL_IVS_DRIVER,
	.id_table = dl_ivs_ids,
	.probe = dl_ivs_probe,
	.remove = dl_ivs_remove,
};

module_pci_driver(dl_ivs_driver);

MODULE_DESCRIPTION("devlend fabric backend: the emulated fabric of QEMU ivshmem devices");
MODULE_LICENSE("GPL");
