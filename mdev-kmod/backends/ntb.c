// SPDX-License-Identifier: GPL-2.0
/*
 * devlend_ntb.ko: a fabric backend over Linux's NTB API, for any ntb_dev
 * (a real adapter's hardware driver, or devlend's emulated port).
 *
 * On a two-port adapter or a port of a switch with up to DL_MAX_HOSTS
 * ports numbered from 0:
 *  - host ids are the NTB port numbers;
 *  - the control area (the header and host info slots, the same layout
 *    the ivshmem server formats) lives in the RAM of the lowest port, the
 *    "owner", which formats it and, once the link to a peer is up, shows
 *    it to that peer through its inbound memory window 0; the others map
 *    it through the outbound window that shows it;
 *  - the message rings are in each receiver's inbox, in its RAM, which
 *    the sender reaches through window 1;
 *  - inbound memory window 1 of each peer is a bounded window (as large
 *    as the adapter offers for it) onto this host: behind a translating
 *    IOMMU, the backend owns a paging domain of the adapter and window 1
 *    of peer pidx translates [0, size) onto IOVAs of its own, where each
 *    run the core hands out (fabric/window.c: the inbox, the ident page,
 *    a borrower's pages) is mapped with iommu_map(); without one (an
 *    identity domain, no IOMMU) it shows bus addresses [0, size) one to
 *    one, so only RAM below the window's size is reachable;
 *  - which outbound window leads to which peer is not defined by the NTB
 *    API for switches: windows are found by what they show (the control
 *    area's magic, a peer's ident token), never by their index;
 *  - with one peer, fabric doorbell vector v is NTB doorbell bit v; with
 *    more, a switch routes bit i to port i (ntb_pingpong's model), so
 *    only the message vector is used: bit <peer's port> rings it.
 *
 * What a peer was shown cannot be taken back on every adapter (the
 * emulated one cannot stop a peer's writes): an area a peer may have
 * mapped is never given back to the allocator, only leaked, and said so.
 * docs/ntb.md has the rest.
 */
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/iommu.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/ntb.h>
#include <linux/random.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "devlend_wire.h"
#include "../fabric/backend.h"
#include "../fabric/fabric.h"
#include "../ntb-emu/hook.h"

/* Inbound windows: the control area, and this host's RAM. */
#define DL_NTBB_MW_CTL		0
#define DL_NTBB_MW_RAM		1
/* How often a peer's control area is looked for while the link is up. */
#define DL_NTBB_RETRY_MS	200
/*
 * Behind a translating IOMMU, the adapter's IOVAs this backend uses: the
 * control area at the base, peer pidx's window 1 at (pidx + 1) strides
 * above it. Above 4 GiB, clear of the x86 MSI range.
 */
#define DL_NTBB_IOVA_BASE	SZ_4G
/* Pieces iommu_map() can only fill with small pages (see lender/dma.c). */
#define DL_NTBB_MAP_PIECE	(SZ_2M - PAGE_SIZE)

/**
 * struct dl_ntbb_win - an outbound memory window, as the core sees it.
 * @fw: what the core is given.
 * @widx: its index.
 * @claimed: the core holds @fw.
 */
struct dl_ntbb_win {
	struct dl_fabric_window fw;
	int widx;
	bool claimed;
};

/**
 * struct dl_ntbb - the backend on one NTB device.
 * @ntb: the NTB device.
 * @fdev: the fabric's device, /sys/class/devlend/ntb-<NTB device>: the
 *	NTB device has its PCI function's name, which a fabric over that
 *	function (the emulated port's) already gave the mdev bus.
 * @npeers: the other ports.
 * @owner: this port formats and holds the control area.
 * @owner_pidx: the owner's peer index, when not @owner.
 * @db_bits: the doorbell bits this port receives on.
 * @lock: the fabric's life cycle: @fab, @remote, the windows' translation.
 * @fab_lock: @fab for the doorbell event (any context).
 * @fab: the fabric, while there is one.
 * @area: the control area, when @owner.
 * @area_size: its bytes.
 * @area_dma: its bus address for the adapter.
 * @area_shown: a peer was given @area's window: never free it.
 * @remote: the owner's control area, mapped, when not @owner.
 * @trans_lock: window 1's translations: @shown's and @revoked's bits
 *	against dl_ntbb_peer_inbound(), which the core calls under its own
 *	lock (taken after @lock, never before).
 * @shown: bit pidx: that peer's inbound windows translate (window 1 to
 *	this host's RAM; window 0 to @area, when @owner).
 * @revoked: bit pidx: window 1 was taken from that peer: an incarnation
 *	of it is over and no new one is bound yet (@trans_lock).
 * @win_size: bytes of each peer's window 1, once a fabric was made.
 * @dom: behind a translating IOMMU, the adapter's paging domain, ours;
 *	NULL: window 1 shows bus addresses one to one.
 * @stride: IOVA space between the windows of two peers in @dom.
 * @nwins: outbound windows.
 * @wins: the outbound windows, by index.
 * @setup: brings the fabric up or down as the link goes.
 * @dying: the device is being removed.
 */
struct dl_ntbb {
	struct ntb_dev *ntb;
	struct device *fdev;
	int npeers;
	bool owner;
	int owner_pidx;
	u64 db_bits;
	struct mutex lock;	/* see above */
	spinlock_t fab_lock;	/* see above */
	struct dl_fabric *fab;
	void *area;
	size_t area_size;
	dma_addr_t area_dma;
	bool area_shown;
	void *remote;
	struct mutex trans_lock;	/* see above */
	u64 shown;
	u64 revoked;
	u64 win_size;
	struct iommu_domain *dom;
	u64 stride;
	int nwins;
	struct dl_ntbb_win *wins;
	struct delayed_work setup;
	bool dying;
};

static void dl_ntbb_peer_db_set(struct dl_fabric *fab, u32 peer,
				unsigned int vector)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);

	/* The ring writes before it must be seen before the doorbell. */
	wmb();
	/* With more ports, bit i rings port i: the message vector only. */
	ntb_peer_db_set(nb->ntb, BIT_ULL(nb->npeers == 1 ? vector : peer));
}

/*
 * Where @len bytes at @off of outbound window @widx are: *@phys, of which
 * *@run bytes are contiguous, in a window of *@size bytes. A real
 * adapter's window is a BAR, linear; the emulated port's, behind a
 * peer's IOMMU, is asked through its hook (ntb-emu/hook.h). @len 0: the
 * size only.
 */
static int dl_ntbb_mw_at(struct dl_ntbb *nb, int widx, u64 off, u64 len,
			 phys_addr_t *phys, u64 *run, resource_size_t *size)
{
	int (*resolve)(struct ntb_dev *ntb, int widx, u64 off, u64 len,
		       phys_addr_t *phys, u64 *run, u64 *size);
	phys_addr_t base;
	u64 sz;
	int ret;

	resolve = symbol_get(dl_ntbe_peer_mw_resolve);
	if (resolve) {
		ret = resolve(nb->ntb, widx, off, len, phys, run, &sz);
		symbol_put(dl_ntbe_peer_mw_resolve);
		if (ret != -ENODEV) {
			*size = sz;
			return ret;
		}
	}
	ret = ntb_peer_mw_get_addr(nb->ntb, widx, &base, size);
	if (ret)
		return ret;
	if (len && (off > *size || len > *size - off))
		return -ERANGE;
	*phys = base + off;
	*run = len;
	return 0;
}

/*
 * The first 8 bytes of outbound window @widx at @offset, or 0 when it
 * does not translate (yet) or is smaller than @min_size.
 */
static u64 dl_ntbb_window_peek(struct dl_ntbb *nb, int widx, u64 offset,
			       u64 min_size, resource_size_t *size)
{
	u64 page = round_down(offset, PAGE_SIZE), run;
	phys_addr_t at;
	__le64 val;
	void *map;

	if (dl_ntbb_mw_at(nb, widx, 0, 0, &at, &run, size))
		return 0;
	if (*size < min_size || *size < 8 || offset > *size - 8 ||
	    offset_in_page(offset) > PAGE_SIZE - sizeof(val) ||
	    page + PAGE_SIZE > *size ||
	    dl_ntbb_mw_at(nb, widx, page, PAGE_SIZE, &at, &run, size))
		return 0;
	map = memremap(at, PAGE_SIZE, MEMREMAP_WB);
	if (!map)
		return 0;
	val = READ_ONCE(*(__le64 *)(map + offset - page));
	memunmap(map);
	return le64_to_cpu(val);
}

static struct dl_fabric_window *
dl_ntbb_window_find(struct dl_fabric *fab, const struct dl_fabric_ident *id)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);
	resource_size_t size;
	phys_addr_t base;
	u64 run;
	int widx;

	/* Whichever window shows the peer's token is the peer's. */
	for (widx = 0; widx < nb->nwins; widx++) {
		struct dl_ntbb_win *w = &nb->wins[widx];

		if (w->claimed ||
		    dl_ntbb_window_peek(nb, widx, id->offset, id->min_size,
					&size) != id->token)
			continue;
		/* Linear windows: their base; the others are asked. */
		if (dl_ntbb_mw_at(nb, widx, 0, PAGE_SIZE, &base, &run, &size))
			continue;
		w->fw.dev = &nb->ntb->dev;
		w->fw.phys_addr = base;
		w->fw.size = size;
		w->widx = widx;
		w->claimed = true;
		return &w->fw;
	}
	return NULL;
}

/* The core's translation of an outbound window: linear, or asked. */
static int dl_ntbb_window_xlate(struct dl_fabric *fab,
				struct dl_fabric_window *win, u64 off, u64 len,
				phys_addr_t *addr, u64 *run)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);
	struct dl_ntbb_win *w = container_of(win, struct dl_ntbb_win, fw);
	resource_size_t size;

	return dl_ntbb_mw_at(nb, w->widx, off, len, addr, run, &size);
}

static void dl_ntbb_window_put(struct dl_fabric *fab,
			       struct dl_fabric_window *win)
{
	container_of(win, struct dl_ntbb_win, fw)->claimed = false;
}

/* The peer index of port @port, or -1. */
static int dl_ntbb_pidx(struct dl_ntbb *nb, u32 port)
{
	int pidx;

	for (pidx = 0; pidx < nb->npeers; pidx++)
		if (ntb_peer_port_number(nb->ntb, pidx) == port)
			return pidx;
	return -1;
}

/* The bus address window 1 of peer @pidx translates onto. */
static dma_addr_t dl_ntbb_win_bus(struct dl_ntbb *nb, int pidx)
{
	return nb->dom ? DL_NTBB_IOVA_BASE + (u64)(pidx + 1) * nb->stride : 0;
}

/*
 * Make offset @off of peer @peer's window 1 reach @phys (the core hands
 * out the offsets, fabric/window.c): our domain maps IOVA base + @off.
 */
static int dl_ntbb_inbound_map(struct dl_fabric *fab, u32 peer, u64 off,
			       phys_addr_t phys, u64 len)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);
	int pidx = dl_ntbb_pidx(nb, peer);
	dma_addr_t iova;
	u64 done, n;
	int ret;

	if (pidx < 0)
		return -ENODEV;
	if (off > nb->win_size || len > nb->win_size - off)
		return -ERANGE;
	iova = dl_ntbb_win_bus(nb, pidx) + off;
	for (done = 0; done < len; done += n) {
		n = min_t(u64, len - done, DL_NTBB_MAP_PIECE);
		ret = iommu_map(nb->dom, iova + done, phys + done, n,
				IOMMU_READ | IOMMU_WRITE, GFP_KERNEL);
		if (ret)
			goto err_unmap;
	}
	return 0;

err_unmap:
	if (done)
		iommu_unmap(nb->dom, iova, done);
	dev_err_ratelimited(&nb->ntb->dev, "devlend: cannot map %#llx+%#llx of port %u's window: %d\n",
			    off, len, peer, ret);
	return ret;
}

/* After it returns, the adapter no longer reaches what was there. */
static void dl_ntbb_inbound_unmap(struct dl_fabric *fab, u32 peer, u64 off,
				  u64 len)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);
	int pidx = dl_ntbb_pidx(nb, peer);
	size_t unmapped;

	if (pidx < 0 || off > nb->win_size || len > nb->win_size - off)
		return;
	unmapped = iommu_unmap(nb->dom, dl_ntbb_win_bus(nb, pidx) + off, len);
	if (unmapped != len)
		dev_warn_ratelimited(&nb->ntb->dev, "devlend: unmapped %zu of %llu bytes of port %u's window\n",
				     unmapped, len, peer);
}

/*
 * Take window 1 from a peer whose incarnation is over, and give it back
 * for the next: on a real adapter its stores and its devices' DMA into
 * this host's RAM are then dropped, whatever it still has mapped. (The
 * emulated port only tells the peer; a mapped window still writes.)
 */
static void dl_ntbb_peer_inbound(struct dl_fabric *fab, u32 peer, bool open)
{
	struct dl_ntbb *nb = dl_fabric_backend_priv(fab);
	int pidx = dl_ntbb_pidx(nb, peer);
	int ret = 0;

	if (pidx < 0)
		return;
	mutex_lock(&nb->trans_lock);
	if (!(nb->shown & BIT_ULL(pidx)) ||
	    !!(nb->revoked & BIT_ULL(pidx)) == !open)
		goto out_unlock;
	if (open)
		ret = ntb_mw_set_trans(nb->ntb, pidx, DL_NTBB_MW_RAM,
				       dl_ntbb_win_bus(nb, pidx), nb->win_size);
	else
		ret = ntb_mw_clear_trans(nb->ntb, pidx, DL_NTBB_MW_RAM);
	if (ret)
		dev_warn(&nb->ntb->dev, "devlend: cannot %s window %d of port %u: %d\n",
			 open ? "open" : "close", DL_NTBB_MW_RAM, peer, ret);
	else if (open)
		nb->revoked &= ~BIT_ULL(pidx);
	else
		nb->revoked |= BIT_ULL(pidx);
out_unlock:
	mutex_unlock(&nb->trans_lock);
}

/* Without a translating IOMMU: window 1 shows bus addresses 1:1. */
static const struct dl_fabric_backend_ops dl_ntbb_ops = {
	.name = "ntb",
	.peer_db_set = dl_ntbb_peer_db_set,
	.window_find = dl_ntbb_window_find,
	.window_put = dl_ntbb_window_put,
	.peer_inbound = dl_ntbb_peer_inbound,
	.window_xlate = dl_ntbb_window_xlate,
};

/* Behind one: window 1 of each peer onto IOVAs of our domain. */
static const struct dl_fabric_backend_ops dl_ntbb_ops_iommu = {
	.name = "ntb",
	.peer_db_set = dl_ntbb_peer_db_set,
	.window_find = dl_ntbb_window_find,
	.window_put = dl_ntbb_window_put,
	.peer_inbound = dl_ntbb_peer_inbound,
	.window_xlate = dl_ntbb_window_xlate,
	.inbound_map = dl_ntbb_inbound_map,
	.inbound_unmap = dl_ntbb_inbound_unmap,
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
	if (nb->dom) {
		/* Our domain: the DMA API's mappings no longer apply. */
		nb->area_dma = DL_NTBB_IOVA_BASE;
		if (iommu_map(nb->dom, nb->area_dma, virt_to_phys(nb->area),
			      nb->area_size, IOMMU_READ | IOMMU_WRITE,
			      GFP_KERNEL)) {
			free_pages_exact(nb->area, nb->area_size);
			nb->area = NULL;
			return -ENOMEM;
		}
	} else {
		nb->area_dma = dma_map_single(ntb_get_dma_dev(nb->ntb),
					      nb->area, nb->area_size,
					      DMA_BIDIRECTIONAL);
		if (dma_mapping_error(ntb_get_dma_dev(nb->ntb),
				      nb->area_dma)) {
			free_pages_exact(nb->area, nb->area_size);
			nb->area = NULL;
			return -ENOMEM;
		}
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
	if (nb->dom)
		iommu_unmap(nb->dom, nb->area_dma, nb->area_size);
	else
		dma_unmap_single(ntb_get_dma_dev(nb->ntb), nb->area_dma,
				 nb->area_size, DMA_BIDIRECTIONAL);
	if (nb->area_shown) {
		dev_warn(&nb->ntb->dev,
			 "control area of %zu bytes kept: a peer may still write it\n",
			 nb->area_size);
		return;
	}
	free_pages_exact(nb->area, nb->area_size);
}

/* Whether inbound window @widx for peer @pidx takes @size bytes. */
static int dl_ntbb_window_fits(struct dl_ntbb *nb, int pidx, int widx,
			       u64 size, const char *what)
{
	resource_size_t size_max;
	int ret;

	ret = ntb_mw_get_align(nb->ntb, pidx, widx, NULL, NULL, &size_max);
	if (ret)
		return ret;
	if (size <= size_max)
		return 0;
	dev_err(&nb->ntb->dev,
		"devlend: window %d translates at most %llu bytes; %s needs %llu\n",
		widx, (u64)size_max, what, size);
	return -ENOSPC;
}

/* Both windows for peer @pidx checked before either is shown. */
static int dl_ntbb_windows_fit(struct dl_ntbb *nb, int pidx, u64 win_size)
{
	int ret;

	ret = dl_ntbb_window_fits(nb, pidx, DL_NTBB_MW_RAM, win_size,
				  "the window of the other ports");
	if (!ret && nb->owner)
		ret = dl_ntbb_window_fits(nb, pidx, DL_NTBB_MW_CTL,
					  nb->area_size, "the control area");
	return ret;
}

/*
 * Show this host to each peer in @links not shown yet: its window 1 (our
 * IOVAs for it, or bus addresses one to one), for the peers' DMA and
 * their stores into our inbox; the control area in window 0, when the
 * owner.
 */
static int dl_ntbb_show(struct dl_ntbb *nb, u64 links)
{
	int pidx, ret = 0;

	lockdep_assert_held(&nb->lock);

	mutex_lock(&nb->trans_lock);
	for (pidx = 0; pidx < nb->npeers; pidx++) {
		if (!(links & BIT_ULL(pidx)) || (nb->shown & BIT_ULL(pidx)))
			continue;
		ret = dl_ntbb_windows_fit(nb, pidx, nb->win_size);
		if (ret)
			break;
		if (nb->owner) {
			ret = ntb_mw_set_trans(nb->ntb, pidx, DL_NTBB_MW_CTL,
					       nb->area_dma, nb->area_size);
			if (ret) {
				dev_err(&nb->ntb->dev, "cannot show the control area in window %d: %d\n",
					DL_NTBB_MW_CTL, ret);
				break;
			}
			nb->area_shown = true;
		}
		nb->shown |= BIT_ULL(pidx);
		nb->revoked &= ~BIT_ULL(pidx);
		ret = ntb_mw_set_trans(nb->ntb, pidx, DL_NTBB_MW_RAM,
				       dl_ntbb_win_bus(nb, pidx), nb->win_size);
		if (ret) {
			dev_err(&nb->ntb->dev, "cannot show window %d of %llu bytes: %d\n",
				DL_NTBB_MW_RAM, nb->win_size, ret);
			break;
		}
	}
	mutex_unlock(&nb->trans_lock);
	return ret;
}

/*
 * The size of window 1 for every peer: what the adapter offers for the
 * peers up now (the smallest, whole pages); a peer whose window is
 * smaller is not shown this host. Behind our domain, each peer's window
 * takes a power-of-two stride of IOVA space, which must fit the domain.
 */
static int dl_ntbb_win_setup(struct dl_ntbb *nb, u64 links)
{
	resource_size_t size_max;
	u64 size = U64_MAX, top;
	int pidx, ret;

	for (pidx = 0; pidx < nb->npeers; pidx++) {
		if (!(links & BIT_ULL(pidx)))
			continue;
		ret = ntb_mw_get_align(nb->ntb, pidx, DL_NTBB_MW_RAM, NULL,
				       NULL, &size_max);
		if (ret)
			return ret;
		size = min_t(u64, size, size_max);
	}
	size = round_down(size, PAGE_SIZE);
	if (size == U64_MAX || !size)
		return -ENOSPC;
	nb->win_size = size;
	if (!nb->dom)
		return 0;
	nb->stride = roundup_pow_of_two(size);
	top = DL_NTBB_IOVA_BASE + (u64)(nb->npeers + 1) * nb->stride - 1;
	if (nb->dom->geometry.force_aperture &&
	    top > nb->dom->geometry.aperture_end) {
		dev_err(&nb->ntb->dev, "devlend: %d windows of %llu bytes do not fit the adapter's IOMMU aperture\n",
			nb->npeers, size);
		return -ENOSPC;
	}
	return 0;
}

static int dl_ntbb_fabric_up(struct dl_ntbb *nb, void *ctl, size_t ctl_size,
			     u64 links)
{
	struct dl_fabric_config cfg = {
		.dev = nb->fdev,
		.ops = nb->dom ? &dl_ntbb_ops_iommu : &dl_ntbb_ops,
		.priv = nb,
		.ctl = ctl,
		.ctl_size = ctl_size,
		.host_id = ntb_port_number(nb->ntb),
		.db_vectors = nb->npeers == 1 ? DL_DB_VECTORS : 1,
	};
	struct dl_fabric *fab;
	unsigned long flags;
	int pidx, ret;

	lockdep_assert_held(&nb->lock);

	ret = dl_ntbb_win_setup(nb, links);
	if (ret)
		return ret;
	/* Every window checked before any is shown, or the fabric made. */
	for (pidx = 0; pidx < nb->npeers; pidx++) {
		if (!(links & BIT_ULL(pidx)))
			continue;
		ret = dl_ntbb_windows_fit(nb, pidx, nb->win_size);
		if (ret)
			return ret;
	}
	cfg.inbound_size = nb->win_size;
	/* The core maps the ident page and inbox through our domain too. */
	fab = dl_fabric_create(&cfg);
	if (IS_ERR(fab))
		return PTR_ERR(fab);
	spin_lock_irqsave(&nb->fab_lock, flags);
	nb->fab = fab;
	spin_unlock_irqrestore(&nb->fab_lock, flags);
	ret = dl_ntbb_show(nb, links);
	if (ret)
		goto err_unpublish;
	ret = dl_fabric_start(fab);
	if (ret)
		goto err_unpublish;
	return 0;

err_unpublish:
	spin_lock_irqsave(&nb->fab_lock, flags);
	nb->fab = NULL;
	spin_unlock_irqrestore(&nb->fab_lock, flags);
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

/*
 * Not the owner: map the owner's control area once it shows it, in
 * whichever outbound window starts with its magic.
 */
static int dl_ntbb_join(struct dl_ntbb *nb, u64 links)
{
	resource_size_t size;
	phys_addr_t base;
	int widx, ret;
	u64 run;

	for (widx = 0; widx < nb->nwins; widx++)
		if (dl_ntbb_window_peek(nb, widx, 0, DL_CTL_HEADER_SIZE,
					&size) == DL_CTL_MAGIC)
			break;
	if (widx == nb->nwins)
		return -EAGAIN;
	/* The area is physically contiguous: one run, however it is shown. */
	ret = dl_ntbb_mw_at(nb, widx, 0, size, &base, &run, &size);
	if (ret || run != size)
		return ret ?: -EAGAIN;
	nb->remote = memremap(base, size, MEMREMAP_WB);
	if (!nb->remote)
		return -ENOMEM;
	if (le64_to_cpu(READ_ONCE(*(__le64 *)nb->remote)) != DL_CTL_MAGIC) {
		ret = -EAGAIN;
		goto err_unmap;
	}
	ret = dl_ntbb_fabric_up(nb, nb->remote, size, links);
	if (ret)
		goto err_unmap;
	return 0;

err_unmap:
	memunmap(nb->remote);
	nb->remote = NULL;
	return ret;
}

/*
 * The fabric comes up once a link is (the owner's: to any peer; the
 * others': to the owner): the windows' limits are known only then
 * (ntb_mw_get_align() needs the link). Peers whose link comes up later
 * are shown this host then. The owner keeps its fabric when links go
 * down (its area is its own RAM; liveness tells the peers gone); the
 * others leave when the link to the owner goes, since its area may go.
 */
static void dl_ntbb_setup_work(struct work_struct *work)
{
	struct dl_ntbb *nb = container_of(to_delayed_work(work),
					  struct dl_ntbb, setup);
	u64 links, up;
	int ret;

	mutex_lock(&nb->lock);
	if (nb->dying)
		goto out_unlock;
	links = ntb_link_is_up(nb->ntb, NULL, NULL) &
		GENMASK_ULL(nb->npeers - 1, 0);
	up = nb->owner ? links : links & BIT_ULL(nb->owner_pidx);
	if (!up) {
		if (!nb->owner)
			dl_ntbb_fabric_down(nb);
		goto out_unlock;
	}
	if (nb->fab)
		ret = dl_ntbb_show(nb, links);
	else if (nb->owner)
		ret = dl_ntbb_fabric_up(nb, nb->area, nb->area_size, links);
	else
		ret = dl_ntbb_join(nb, links);
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

	bits = ntb_db_read(nb->ntb) & nb->db_bits;
	if (!bits)
		return;
	ntb_db_clear(nb->ntb, bits);
	spin_lock_irqsave(&nb->fab_lock, flags);
	if (nb->fab && nb->npeers == 1)
		for_each_set_bit(v, &bits, DL_DB_VECTORS)
			dl_fabric_db_event(nb->fab, v);
	else if (nb->fab)
		dl_fabric_db_event(nb->fab, DL_DB_VEC_MSG);
	spin_unlock_irqrestore(&nb->fab_lock, flags);
}

static const struct ntb_ctx_ops dl_ntbb_ctx_ops = {
	.link_event = dl_ntbb_link_event,
	.db_event = dl_ntbb_db_event,
};

/* Withdraw the translations shown; the area itself stays if it was. */
static void dl_ntbb_unshow(struct dl_ntbb *nb)
{
	int pidx;

	mutex_lock(&nb->trans_lock);
	for (pidx = 0; pidx < nb->npeers; pidx++) {
		if (!(nb->shown & BIT_ULL(pidx)))
			continue;
		ntb_mw_clear_trans(nb->ntb, pidx, DL_NTBB_MW_RAM);
		if (nb->owner)
			ntb_mw_clear_trans(nb->ntb, pidx, DL_NTBB_MW_CTL);
	}
	nb->shown = 0;
	nb->revoked = 0;
	mutex_unlock(&nb->trans_lock);
}

/*
 * Whether this backend can run on @ntb: ports numbered 0..n-1 (they are
 * the fabric's host ids), two inbound windows per peer, and the doorbell
 * bits it rings and receives.
 */
static int dl_ntbb_check(struct ntb_dev *ntb, int npeers)
{
	int port = ntb_port_number(ntb);
	u64 need_db;
	int pidx;

	if (npeers < 1 || npeers >= DL_MAX_HOSTS || port < 0 ||
	    port > npeers) {
		dev_info(&ntb->dev, "devlend: port %d of %d: needs 2 to %d ports numbered from 0\n",
			 port, npeers + 1, DL_MAX_HOSTS);
		return -EOPNOTSUPP;
	}
	for (pidx = 0; pidx < npeers; pidx++) {
		int pport = ntb_peer_port_number(ntb, pidx);

		if (pport < 0 || pport > npeers || pport == port) {
			dev_info(&ntb->dev, "devlend: peer port %d: ports must be numbered 0..%d\n",
				 pport, npeers);
			return -EOPNOTSUPP;
		}
		if (ntb_mw_count(ntb, pidx) < 2) {
			dev_info(&ntb->dev, "devlend: needs 2 memory windows per peer\n");
			return -EOPNOTSUPP;
		}
	}
	need_db = npeers == 1 ? GENMASK_ULL(DL_DB_VECTORS - 1, 0) :
		  GENMASK_ULL(npeers, 0);
	if (ntb_peer_mw_count(ntb) < 2 ||
	    (ntb_db_valid_mask(ntb) & need_db) != need_db) {
		dev_info(&ntb->dev, "devlend: needs 2 outbound memory windows and doorbell bits %#llx\n",
			 need_db);
		return -EOPNOTSUPP;
	}
	return 0;
}

/*
 * Behind a translating IOMMU (the adapter's DMA API domain), own a paging
 * domain of the adapter: window 1 of each peer is then IOVA space we
 * place pages in. With an identity domain or none, bus addresses are
 * physical and nothing is attached.
 */
static int dl_ntbb_domain_get(struct dl_ntbb *nb)
{
	struct device *dev = ntb_get_dma_dev(nb->ntb);
	struct iommu_domain *cur = iommu_get_domain_for_dev(dev);
	struct iommu_domain *dom;
	int ret;

	if (!cur || cur->type == IOMMU_DOMAIN_IDENTITY ||
	    !(cur->type & __IOMMU_DOMAIN_PAGING))
		return 0;
	dom = iommu_paging_domain_alloc(dev);
	if (IS_ERR(dom))
		return PTR_ERR(dom);
	ret = iommu_attach_device(dom, dev);
	if (ret) {
		dev_err(&nb->ntb->dev, "devlend: cannot attach a domain of our own to %s (alone in its IOMMU group?): %d\n",
			dev_name(dev), ret);
		iommu_domain_free(dom);
		return ret;
	}
	nb->dom = dom;
	return 0;
}

static void dl_ntbb_domain_put(struct dl_ntbb *nb)
{
	if (!nb->dom)
		return;
	iommu_detach_device(nb->dom, ntb_get_dma_dev(nb->ntb));
	iommu_domain_free(nb->dom);
	nb->dom = NULL;
}

static int dl_ntbb_probe(struct ntb_client *client, struct ntb_dev *ntb)
{
	int npeers = ntb_peer_port_count(ntb);
	struct dl_ntbb *nb;
	int pidx, ret;

	ret = dl_ntbb_check(ntb, npeers);
	if (ret)
		return ret;
	nb = kzalloc(sizeof(*nb), GFP_KERNEL);
	if (!nb)
		return -ENOMEM;
	nb->ntb = ntb;
	nb->npeers = npeers;
	nb->nwins = ntb_peer_mw_count(ntb);
	nb->wins = kcalloc(nb->nwins, sizeof(*nb->wins), GFP_KERNEL);
	if (!nb->wins) {
		ret = -ENOMEM;
		goto err_free;
	}
	/* The lowest port owns the control area. */
	nb->owner = true;
	for (pidx = 0; pidx < npeers; pidx++) {
		int pport = ntb_peer_port_number(ntb, pidx);

		if (pport < ntb_port_number(ntb) &&
		    (nb->owner ||
		     pport < ntb_peer_port_number(ntb, nb->owner_pidx))) {
			nb->owner = false;
			nb->owner_pidx = pidx;
		}
	}
	nb->db_bits = npeers == 1 ? GENMASK_ULL(DL_DB_VECTORS - 1, 0) :
		      BIT_ULL(ntb_port_number(ntb));
	mutex_init(&nb->lock);
	mutex_init(&nb->trans_lock);
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
	ntb_db_clear(ntb, nb->db_bits);
	ntb_db_clear_mask(ntb, nb->db_bits);
	ret = dl_ntbb_domain_get(nb);
	if (ret)
		goto err_clear_ctx;
	if (nb->owner) {
		ret = dl_ntbb_area_alloc(nb, ntb_peer_port_count(ntb) + 1);
		if (ret)
			goto err_clear_ctx;
	}
	ret = ntb_link_enable(ntb, NTB_SPEED_AUTO, NTB_WIDTH_AUTO);
	if (ret)
		goto err_clear_ctx;
	queue_delayed_work(system_wq, &nb->setup, 0);
	dev_info(&ntb->dev, "devlend: NTB backend on port %d (%s of the control area), window 1 %s\n",
		 ntb_port_number(ntb), nb->owner ? "owner" : "user",
		 nb->dom ? "through an IOMMU domain of its own" :
			   "one to one (no translating IOMMU)");
	return 0;

err_clear_ctx:
	ntb_clear_ctx(ntb);
	dl_ntbb_area_free(nb);
	dl_ntbb_domain_put(nb);
err_unregister:
	device_unregister(nb->fdev);
err_free:
	kfree(nb->wins);
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
	ntb_db_set_mask(ntb, nb->db_bits);
	ntb_clear_ctx(ntb);
	dl_ntbb_area_free(nb);
	/*
	 * The adapter goes back to its DMA API domain, where nothing of ours
	 * is mapped: a real adapter's peers' stores fault from now on (a
	 * shown area's pages stay leaked all the same).
	 */
	dl_ntbb_domain_put(nb);
	device_unregister(nb->fdev);
	kfree(nb->wins);
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
