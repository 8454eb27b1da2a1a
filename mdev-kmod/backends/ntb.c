// SPDX-License-Identifier: GPL-2.0
/*
 * devlend_ntb.ko: a fabric backend over Linux's NTB API, for any ntb_dev
 * (a real adapter's hardware driver, or devlend's emulated port).
 *
 * With one peer (a two-port adapter; switches with more ports are not
 * supported yet):
 *  - host ids are the NTB port numbers;
 *  - the control area (the header and host info slots, the same layout
 *    the ivshmem server formats) lives in the RAM of the lower port, the
 *    "owner", which formats it and, once the link is up, shows it to the
 *    peer through inbound memory window 0; the peer maps it through its
 *    outbound window;
 *  - the message rings are in each receiver's inbox, in its RAM, which
 *    the sender reaches through window 1;
 *  - inbound memory window 1 shows each host's RAM from bus address 0, so
 *    a peer's window offset is a physical address (the layout the core
 *    publishes); the adapter's IOMMU domain must then be identity;
 *  - fabric doorbell vector v is NTB doorbell bit v.
 *
 * What a peer was shown cannot be taken back on every adapter (the
 * emulated one cannot stop a peer's writes): an area a peer may have
 * mapped is never given back to the allocator, only leaked, and said so.
 * docs/ntb.md has the rest.
 */
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/ntb.h>
#include <linux/random.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "devlend_wire.h"
#include "../fabric/backend.h"
#include "../fabric/fabric.h"

/* Inbound windows: the control area, and this host's RAM. */
#define DL_NTBB_MW_CTL		0
#define DL_NTBB_MW_RAM		1
/* How often a peer's control area is looked for while the link is up. */
#define DL_NTBB_RETRY_MS	200

/**
 * struct dl_ntbb - the backend on one NTB device.
 * @ntb: the NTB device.
 * @fdev: the fabric's device, /sys/class/devlend/ntb-<NTB device>: the
 *	NTB device has its PCI function's name, which a fabric over that
 *	function (the emulated port's) already gave the mdev bus.
 * @owner: this port formats and holds the control area.
 * @lock: the fabric's life cycle: @fab, @remote, the windows' translation.
 * @fab_lock: @fab for the doorbell event (any context).
 * @fab: the fabric, while there is one.
 * @area: the control area, when @owner.
 * @area_size: its bytes.
 * @area_dma: its bus address for the adapter.
 * @area_shown: a peer was given @area's window: never free it.
 * @remote: the owner's control area, mapped, when not @owner.
 * @ram_shown: window 1 translates to this host's RAM.
 * @win: the window onto the peer's RAM, given to the core.
 * @win_claimed: the core holds @win.
 * @setup: brings the fabric up or down as the link goes.
 * @dying: the device is being removed.
 */
struct dl_ntbb {
	struct ntb_dev *ntb;
	struct device *fdev;
	bool owner;
	struct mutex lock;	/* see above */
	spinlock_t fab_lock;	/* see above */
	struct dl_fabric *fab;
	void *area;
	size_t area_size;
	dma_addr_t area_dma;
	bool area_shown;
	void *remote;
	bool ram_shown;
	struct dl_fabric_window win;
	bool win_claimed;
	struct delayed_work setup;
	bool dying;
};

static void dl_ntbb_peer_db_set(struct dl_fabric *fab, u32 peer,
				unsigned int vector)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);

	/* The ring writes before it must be seen before the doorbell. */
	wmb();
	ntb_peer_db_set(nb->ntb, BIT_ULL(vector));
}

static struct dl_fabric_window *
dl_ntbb_window_find(struct dl_fabric *fab, const struct dl_fabric_ident *id)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);
	resource_size_t size;
	phys_addr_t base;
	u64 page, token;
	void *map;

	if (nb->win_claimed ||
	    ntb_peer_mw_get_addr(nb->ntb, DL_NTBB_MW_RAM, &base, &size))
		return NULL;
	page = round_down(id->offset, PAGE_SIZE);
	if (size < id->min_size || size < 8 || id->offset > size - 8 ||
	    offset_in_page(id->offset) > PAGE_SIZE - sizeof(token))
		return NULL;
	map = memremap(base + page, PAGE_SIZE, MEMREMAP_WB);
	if (!map)
		return NULL;
	token = le64_to_cpu(READ_ONCE(*(__le64 *)(map + id->offset - page)));
	memunmap(map);
	if (token != id->token)
		return NULL;
	nb->win.dev = &nb->ntb->dev;
	nb->win.phys_addr = base;
	nb->win.size = size;
	nb->win_claimed = true;
	return &nb->win;
}

static void dl_ntbb_window_put(struct dl_fabric *fab,
			       struct dl_fabric_window *win)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);

	nb->win_claimed = false;
}

static const struct dl_fabric_backend_ops dl_ntbb_ops = {
	.name = "ntb",
	.peer_db_set = dl_ntbb_peer_db_set,
	.window_find = dl_ntbb_window_find,
	.window_put = dl_ntbb_window_put,
};

/* The owner's control area, formatted as the ivshmem server does. */
static int dl_ntbb_area_alloc(struct dl_ntbb *nb, u32 hosts)
{
	struct dl_ctl_header *h;
	u32 hosts_off = PAGE_SIZE, ring_stride;
	u64 total;

	/* The rings are in each receiver's inbox: the area has the slots. */
	ring_stride = ALIGN(DL_RING_CTRL_SIZE +
			    DL_DEFAULT_RING_SLOTS * DL_DEFAULT_SLOT_SIZE, 64);
	total = hosts_off + (u64)hosts * DL_HOST_INFO_SIZE;
	nb->area_size = PAGE_ALIGN(total);
	/* Physically contiguous: one window translation shows it all. */
	nb->area = alloc_pages_exact(nb->area_size, GFP_KERNEL | __GFP_ZERO);
	if (!nb->area)
		return -ENOMEM;
	nb->area_dma = dma_map_single(ntb_get_dma_dev(nb->ntb), nb->area,
				      nb->area_size, DMA_BIDIRECTIONAL);
	if (dma_mapping_error(ntb_get_dma_dev(nb->ntb), nb->area_dma)) {
		free_pages_exact(nb->area, nb->area_size);
		nb->area = NULL;
		return -ENOMEM;
	}
	h = nb->area;
	h->layout_version = cpu_to_le32(DL_CTL_LAYOUT_VERSION);
	h->max_hosts = cpu_to_le32(hosts);
	h->ring_slots = cpu_to_le32(DL_DEFAULT_RING_SLOTS);
	h->slot_size = cpu_to_le32(DL_DEFAULT_SLOT_SIZE);
	h->hosts_off = cpu_to_le32(hosts_off);
	h->host_stride = cpu_to_le32(DL_HOST_INFO_SIZE);
	h->inbox_size = cpu_to_le32(hosts * ring_stride);
	h->ring_stride = cpu_to_le32(ring_stride);
	h->total_size = cpu_to_le64(total);
	h->fabric_id = cpu_to_le64(get_random_u64());
	/* The magic last: a peer reading early sees no area yet. */
	smp_wmb();
	h->magic = cpu_to_le64(DL_CTL_MAGIC);
	return 0;
}

static void dl_ntbb_area_free(struct dl_ntbb *nb)
{
	if (!nb->area)
		return;
	dma_unmap_single(ntb_get_dma_dev(nb->ntb), nb->area_dma, nb->area_size,
			 DMA_BIDIRECTIONAL);
	if (nb->area_shown) {
		dev_warn(&nb->ntb->dev,
			 "control area of %zu bytes kept: a peer may still write it\n",
			 nb->area_size);
		return;
	}
	free_pages_exact(nb->area, nb->area_size);
}

/* Whether inbound window @widx takes a translation of @size bytes. */
static int dl_ntbb_window_fits(struct dl_ntbb *nb, int widx, u64 size,
			       const char *what)
{
	resource_size_t size_max;
	int ret;

	ret = ntb_mw_get_align(nb->ntb, 0, widx, NULL, NULL, &size_max);
	if (ret)
		return ret;
	if (size <= size_max)
		return 0;
	dev_err(&nb->ntb->dev,
		"devlend: window %d translates at most %llu bytes; %s needs %llu\n",
		widx, (u64)size_max, what, size);
	return -ENOSPC;
}

static int dl_ntbb_fabric_up(struct dl_ntbb *nb, void *ctl, size_t ctl_size)
{
	struct dl_fabric_config cfg = {
		.dev = nb->fdev,
		.ops = &dl_ntbb_ops,
		.priv = nb,
		.ctl = ctl,
		.ctl_size = ctl_size,
		.host_id = ntb_port_number(nb->ntb),
		.db_vectors = DL_DB_VECTORS,
	};
	struct dl_fabric *fab;
	unsigned long flags;
	int ret;

	lockdep_assert_held(&nb->lock);

	fab = dl_fabric_create(&cfg);
	if (IS_ERR(fab))
		return PTR_ERR(fab);
	/* Both windows checked before either is shown. */
	ret = dl_ntbb_window_fits(nb, DL_NTBB_MW_RAM, dl_fabric_ram_size(fab),
				  "this host's RAM");
	if (!ret && nb->owner)
		ret = dl_ntbb_window_fits(nb, DL_NTBB_MW_CTL, nb->area_size,
					  "the control area");
	if (ret)
		goto err_destroy;
	if (nb->owner) {
		ret = ntb_mw_set_trans(nb->ntb, 0, DL_NTBB_MW_CTL, nb->area_dma,
				       nb->area_size);
		if (ret) {
			dev_err(&nb->ntb->dev, "cannot show the control area in window %d: %d\n",
				DL_NTBB_MW_CTL, ret);
			goto err_destroy;
		}
		nb->area_shown = true;
	}
	/* This host's RAM, for the peer's DMA, from bus address 0. */
	ret = ntb_mw_set_trans(nb->ntb, 0, DL_NTBB_MW_RAM, 0,
			       dl_fabric_ram_size(fab));
	if (ret) {
		dev_err(&nb->ntb->dev, "cannot show this host's RAM in window %d: %d\n",
			DL_NTBB_MW_RAM, ret);
		goto err_destroy;
	}
	nb->ram_shown = true;
	spin_lock_irqsave(&nb->fab_lock, flags);
	nb->fab = fab;
	spin_unlock_irqrestore(&nb->fab_lock, flags);
	ret = dl_fabric_start(fab);
	if (ret)
		goto err_unpublish;
	return 0;

err_unpublish:
	spin_lock_irqsave(&nb->fab_lock, flags);
	nb->fab = NULL;
	spin_unlock_irqrestore(&nb->fab_lock, flags);
err_destroy:
	dl_fabric_destroy(fab);
	return ret;
}

static void dl_ntbb_fabric_down(struct dl_ntbb *nb)
{
	struct dl_fabric *fab = nb->fab;
	unsigned long flags;

	lockdep_assert_held(&nb->lock);

	if (!fab)
		return;
	dl_fabric_stop(fab);
	spin_lock_irqsave(&nb->fab_lock, flags);
	nb->fab = NULL;
	spin_unlock_irqrestore(&nb->fab_lock, flags);
	dl_fabric_destroy(fab);
	if (nb->remote) {
		memunmap(nb->remote);
		nb->remote = NULL;
	}
}

/* Not the owner: map the owner's control area once it shows it. */
static int dl_ntbb_join(struct dl_ntbb *nb)
{
	resource_size_t size;
	phys_addr_t base;
	int ret;

	ret = ntb_peer_mw_get_addr(nb->ntb, DL_NTBB_MW_CTL, &base, &size);
	if (ret)
		return ret;
	nb->remote = memremap(base, size, MEMREMAP_WB);
	if (!nb->remote)
		return -ENOMEM;
	if (le64_to_cpu(READ_ONCE(*(__le64 *)nb->remote)) != DL_CTL_MAGIC) {
		ret = -EAGAIN;
		goto err_unmap;
	}
	ret = dl_ntbb_fabric_up(nb, nb->remote, size);
	if (ret)
		goto err_unmap;
	return 0;

err_unmap:
	memunmap(nb->remote);
	nb->remote = NULL;
	return ret;
}

/*
 * The fabric comes up once the link is: the windows' limits are known only
 * then (ntb_mw_get_align() needs the link). The owner keeps its fabric
 * when the link goes down (its area is its own RAM; liveness tells the
 * peer gone); the other port leaves, since the owner's area may go.
 */
static void dl_ntbb_setup_work(struct work_struct *work)
{
	struct dl_ntbb *nb = container_of(to_delayed_work(work),
					  struct dl_ntbb, setup);
	bool up;
	int ret;

	mutex_lock(&nb->lock);
	if (nb->dying)
		goto out_unlock;
	up = ntb_link_is_up(nb->ntb, NULL, NULL) & BIT_ULL(0);
	if (!up) {
		if (!nb->owner)
			dl_ntbb_fabric_down(nb);
		goto out_unlock;
	}
	if (nb->fab)
		goto out_unlock;
	if (nb->owner)
		ret = dl_ntbb_fabric_up(nb, nb->area, nb->area_size);
	else
		ret = dl_ntbb_join(nb);
	/* Windows too small stay so: wait for the next link event. */
	if (ret && ret != -ENOSPC)
		queue_delayed_work(system_wq, &nb->setup,
				   msecs_to_jiffies(DL_NTBB_RETRY_MS));
out_unlock:
	mutex_unlock(&nb->lock);
}

static void dl_ntbb_link_event(void *ctx)
{
	struct dl_ntbb *nb = ctx;

	mod_delayed_work(system_wq, &nb->setup, 0);
}

/* Doorbell bit v is fabric vector v. Any context. */
static void dl_ntbb_db_event(void *ctx, int db_vector)
{
	struct dl_ntbb *nb = ctx;
	unsigned long flags;
	unsigned long bits;
	unsigned int v;

	bits = ntb_db_read(nb->ntb) & GENMASK_ULL(DL_DB_VECTORS - 1, 0);
	if (!bits)
		return;
	ntb_db_clear(nb->ntb, bits);
	spin_lock_irqsave(&nb->fab_lock, flags);
	if (nb->fab)
		for_each_set_bit(v, &bits, DL_DB_VECTORS)
			dl_fabric_db_event(nb->fab, v);
	spin_unlock_irqrestore(&nb->fab_lock, flags);
}

static const struct ntb_ctx_ops dl_ntbb_ctx_ops = {
	.link_event = dl_ntbb_link_event,
	.db_event = dl_ntbb_db_event,
};

/* Withdraw the translations shown; the area itself stays if it was. */
static void dl_ntbb_unshow(struct dl_ntbb *nb)
{
	if (nb->ram_shown)
		ntb_mw_clear_trans(nb->ntb, 0, DL_NTBB_MW_RAM);
	if (nb->area_shown)
		ntb_mw_clear_trans(nb->ntb, 0, DL_NTBB_MW_CTL);
	nb->ram_shown = false;
}

static int dl_ntbb_probe(struct ntb_client *client, struct ntb_dev *ntb)
{
	struct dl_ntbb *nb;
	int ret;

	if (ntb_peer_port_count(ntb) != 1) {
		dev_info(&ntb->dev, "devlend: %d peers; only two-port NTB is supported\n",
			 ntb_peer_port_count(ntb));
		return -EOPNOTSUPP;
	}
	if (ntb_mw_count(ntb, 0) < 2 || ntb_peer_mw_count(ntb) < 2 ||
	    (ntb_db_valid_mask(ntb) & GENMASK_ULL(DL_DB_VECTORS - 1, 0)) !=
	    GENMASK_ULL(DL_DB_VECTORS - 1, 0)) {
		dev_info(&ntb->dev, "devlend: needs 2 memory windows and %d doorbell bits\n",
			 DL_DB_VECTORS);
		return -EOPNOTSUPP;
	}
	nb = kzalloc(sizeof(*nb), GFP_KERNEL);
	if (!nb)
		return -ENOMEM;
	nb->ntb = ntb;
	nb->owner = ntb_port_number(ntb) < ntb_peer_port_number(ntb, 0);
	mutex_init(&nb->lock);
	spin_lock_init(&nb->fab_lock);
	INIT_DELAYED_WORK(&nb->setup, dl_ntbb_setup_work);

	nb->fdev = device_create(&dl_fabric_class, &ntb->dev, 0, nb, "ntb-%s",
				 dev_name(&ntb->dev));
	if (IS_ERR(nb->fdev)) {
		ret = PTR_ERR(nb->fdev);
		goto err_free;
	}
	ret = ntb_set_ctx(ntb, nb, &dl_ntbb_ctx_ops);
	if (ret)
		goto err_unregister;
	ntb_db_clear(ntb, GENMASK_ULL(DL_DB_VECTORS - 1, 0));
	ntb_db_clear_mask(ntb, GENMASK_ULL(DL_DB_VECTORS - 1, 0));
	if (nb->owner) {
		ret = dl_ntbb_area_alloc(nb, ntb_peer_port_count(ntb) + 1);
		if (ret)
			goto err_clear_ctx;
	}
	ret = ntb_link_enable(ntb, NTB_SPEED_AUTO, NTB_WIDTH_AUTO);
	if (ret)
		goto err_clear_ctx;
	queue_delayed_work(system_wq, &nb->setup, 0);
	dev_info(&ntb->dev, "devlend: NTB backend on port %d (%s of the control area)\n",
		 ntb_port_number(ntb), nb->owner ? "owner" : "user");
	return 0;

err_clear_ctx:
	ntb_clear_ctx(ntb);
	dl_ntbb_area_free(nb);
err_unregister:
	device_unregister(nb->fdev);
err_free:
	kfree(nb);
	return ret;
}

static void dl_ntbb_remove(struct ntb_client *client, struct ntb_dev *ntb)
{
	struct dl_ntbb *nb = ntb->ctx;

	mutex_lock(&nb->lock);
	nb->dying = true;
	mutex_unlock(&nb->lock);
	cancel_delayed_work_sync(&nb->setup);

	mutex_lock(&nb->lock);
	dl_ntbb_fabric_down(nb);
	mutex_unlock(&nb->lock);
	ntb_link_disable(ntb);
	dl_ntbb_unshow(nb);
	ntb_db_set_mask(ntb, GENMASK_ULL(DL_DB_VECTORS - 1, 0));
	ntb_clear_ctx(ntb);
	dl_ntbb_area_free(nb);
	device_unregister(nb->fdev);
	kfree(nb);
}

static struct ntb_client dl_ntbb_client = {
	.ops = {
		.probe = dl_ntbb_probe,
		.remove = dl_ntbb_remove,
	},
};
module_ntb_client(dl_ntbb_client);

MODULE_DESCRIPTION("devlend fabric backend over Linux's NTB API");
MODULE_LICENSE("GPL");
