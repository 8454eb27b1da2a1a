// SPDX-License-Identifier: GPL-2.0
/*
 * Host info: what this host publishes about itself in its slot of the
 * control area, and reading what peers publish in theirs.
 *
 * A host's slot is written by that host only. While attaching, the owner
 * sets the state to INIT, fills in every field and only then sets UP, with
 * write barriers between, so a reader that sees UP before and after its
 * copy has fields that belong together. Readers treat everything as
 * untrusted: a peer can write anything into its own slot.
 *
 * The slot also names this host's inbox, where its peers put their
 * messages for it, and says which incarnation of each peer the inbox is
 * bound to (bound[], see devlend_wire.h). A peer stops writing into the
 * inbox when the slot stops vouching for it, and says so by clearing its
 * own bound[] entry for this host; a host that leaves waits for that
 * before it frees its inbox, and leaks it when a peer never answers.
 *
 * The RAM layout tells peers how the addresses this host hands out map
 * onto their window of its RAM: the emulated window is the host's RAM
 * file, where q35 puts RAM below the PCI hole at the same offset and RAM
 * from 4 GiB up right after it; a bounded window (window.c) publishes the
 * identity of its offsets instead.
 */
#include <linux/ctype.h>
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/gfp.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/ioport.h>
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/random.h>
#include <linux/sizes.h>
#include <linux/string.h>
#include <linux/utsname.h>

#include "internal.h"

struct dl_ram_scan {
	u64 low_end;
	u64 high_bytes;
};

static int dl_ram_range(struct resource *res, void *arg)
{
	struct dl_ram_scan *scan = arg;
	u64 start = res->start;
	u64 end = (u64)res->end + 1;

	if (start < SZ_4G)
		scan->low_end = max(scan->low_end, min_t(u64, end, SZ_4G));
	if (end > SZ_4G)
		scan->high_bytes += end - max_t(u64, start, SZ_4G);
	return 0;
}

/*
 * The low part ends where the highest System RAM below 4 GiB ends, rounded
 * up to 256 MiB: firmware reserves the top pages of low RAM, but they are
 * still in the RAM file, and q35 splits low and high RAM on such a bound.
 */
static int dl_ram_layout_compute(struct device *dev, struct dl_ram_layout *l)
{
	struct dl_ram_scan scan = {};

	walk_iomem_res_desc(IORES_DESC_NONE,
			    IORESOURCE_SYSTEM_RAM | IORESOURCE_BUSY,
			    0, U64_MAX, &scan, dl_ram_range);
	if (!scan.low_end) {
		dev_err(dev, "no System RAM below 4 GiB: cannot describe RAM to peers\n");
		return -ENODEV;
	}
	l->ram_low_size = round_up(scan.low_end, SZ_256M);
	l->ram_high_base = SZ_4G;
	l->ram_size = l->ram_low_size + scan.high_bytes;
	return 0;
}

static bool dl_layout_valid(const struct dl_ram_layout *l)
{
	return l->ram_size && l->ram_low_size <= l->ram_size &&
	       l->ram_low_size <= l->ram_high_base;
}

/**
 * dl_hostinfo_init() - choose this incarnation's identity and describe RAM.
 * @fab: the fabric being created.
 *
 * Return: 0 or -errno.
 */
int dl_hostinfo_init(struct dl_fabric *fab)
{
	int ret;

	ret = dl_ram_layout_compute(fab->dev, &fab->layout);
	if (ret)
		return ret;
	ret = dl_inbound_init(fab);
	if (ret)
		return ret;

	fab->incarnation = get_random_u64();
	do {
		fab->ident_token = get_random_u64();
	} while (!fab->ident_token);

	fab->ident_page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!fab->ident_page)
		return -ENOMEM;
	WRITE_ONCE(*(__le64 *)page_address(fab->ident_page),
		   cpu_to_le64(fab->ident_token));

	/* Physically contiguous: peers reach it by one address. */
	fab->inbox = alloc_pages_exact(fab->geom.inbox_size,
				       GFP_KERNEL | __GFP_ZERO);
	if (!fab->inbox) {
		dev_err(fab->dev, "no memory for an inbox of %u bytes\n",
			fab->geom.inbox_size);
		ret = -ENOMEM;
		goto err_free_page;
	}
	ret = dl_inbound_reserve(fab, &fab->ident_addr, &fab->inbox_addr);
	if (ret)
		goto err_free_inbox;

	dev_dbg(fab->dev, "RAM as peers reach it: %llu bytes, low %llu, high base %#llx\n",
		fab->layout.ram_size, fab->layout.ram_low_size,
		fab->layout.ram_high_base);
	return 0;

err_free_inbox:
	free_pages_exact(fab->inbox, fab->geom.inbox_size);
	fab->inbox = NULL;
err_free_page:
	__free_page(fab->ident_page);
	fab->ident_page = NULL;
	return ret;
}

/**
 * dl_hostinfo_free() - free what dl_hostinfo_init() allocated.
 * @fab: the fabric; its slot must already say ABSENT, and
 *	dl_hostinfo_await_unbound() must have run if it was ever UP.
 */
void dl_hostinfo_free(struct dl_fabric *fab)
{
	if (fab->inbox && fab->ident_page)
		dl_inbound_release(fab);
	if (fab->inbox && fab->inbox_leaked)
		dev_warn(fab->dev,
			 "inbox of %u bytes leaked: a peer may still write into it\n",
			 fab->geom.inbox_size);
	else if (fab->inbox)
		free_pages_exact(fab->inbox, fab->geom.inbox_size);
	fab->inbox = NULL;
	if (fab->ident_page)
		__free_page(fab->ident_page);
	fab->ident_page = NULL;
}

static void dl_hostinfo_set_state(struct dl_fabric *fab, u32 state)
{
	WRITE_ONCE(fab->self->state, cpu_to_le32(state));
}

/* The host name is for humans; a torn read of it would be harmless. */
static void dl_hostinfo_set_name(struct dl_fabric *fab)
{
	char name[sizeof_field(struct dl_host_info, name)];

	strscpy_pad(name, init_utsname()->nodename, sizeof(name));
	if (memcmp(fab->self->name, name, sizeof(name)))
		memcpy(fab->self->name, name, sizeof(name));
}

/**
 * dl_hostinfo_begin() - tell peers this host is attaching (state INIT).
 * @fab: the fabric.
 *
 * Peers stop treating this host as up when they see it, so the caller may
 * then reset the rings and the slot's fields.
 */
void dl_hostinfo_begin(struct dl_fabric *fab)
{
	dl_hostinfo_set_state(fab, DL_HOST_INIT);
	/* INIT must be visible before any field changes. */
	smp_wmb();
}

/**
 * dl_hostinfo_publish() - write every field of this host's slot, then UP.
 * @fab: the fabric, after dl_hostinfo_begin().
 */
void dl_hostinfo_publish(struct dl_fabric *fab)
{
	struct dl_host_info *hi = fab->self;

	memset(hi->reserved, 0, sizeof(hi->reserved));
	hi->inbound = cpu_to_le32(dl_fabric_inbound_windowed(fab) ?
				  DL_INBOUND_WINDOW : DL_INBOUND_RAM);
	hi->magic = cpu_to_le64(DL_HOST_MAGIC);
	hi->host_id = cpu_to_le32(fab->host_id);
	hi->incarnation = cpu_to_le64(fab->incarnation);
	fab->heartbeat = 0;
	hi->heartbeat = cpu_to_le64(fab->heartbeat);
	hi->proto_min = cpu_to_le16(DL_PROTO_MIN);
	hi->proto_max = cpu_to_le16(DL_PROTO_MAX);
	hi->ram_size = cpu_to_le64(fab->layout.ram_size);
	hi->ram_low_size = cpu_to_le64(fab->layout.ram_low_size);
	hi->ram_high_base = cpu_to_le64(fab->layout.ram_high_base);
	hi->ident_phys = cpu_to_le64(fab->ident_addr);
	hi->ident_token = cpu_to_le64(fab->ident_token);
	hi->inbox_phys = cpu_to_le64(fab->inbox_addr);
	memset(hi->bound, 0, sizeof(hi->bound));
	dl_hostinfo_set_name(fab);

	/* Every field must be visible before UP vouches for them. */
	smp_wmb();
	dl_hostinfo_set_state(fab, DL_HOST_UP);
}

/**
 * dl_hostinfo_leave() - tell peers this host has left (state ABSENT).
 * @fab: the fabric.
 */
void dl_hostinfo_leave(struct dl_fabric *fab)
{
	dl_hostinfo_set_state(fab, DL_HOST_ABSENT);
}

/**
 * dl_hostinfo_set_bound() - say which incarnation of a peer this host is
 *	bound to.
 * @fab: the fabric, published.
 * @id: the peer.
 * @incarnation: its incarnation, or 0 once this host no longer writes into
 *	its inbox. Before a nonzero value, the peer's entry in our inbox must
 *	be ready for it: the barrier orders that before.
 */
void dl_hostinfo_set_bound(struct dl_fabric *fab, u32 id, u64 incarnation)
{
	/* The entry is zeroed before the binding says it is ready. */
	smp_wmb();
	WRITE_ONCE(fab->self->bound[id], cpu_to_le64(incarnation));
}

/* Peers whose slot still says they may write into our inbox. */
static unsigned int dl_hostinfo_writers(struct dl_fabric *fab)
{
	unsigned int n = 0;
	u32 id;

	for (id = 0; id < fab->geom.max_hosts; id++) {
		const struct dl_host_info *hi = dl_ctl_host(fab, id);

		if (id == fab->host_id)
			continue;
		/*
		 * A slot that is not UP belongs to a host that left or is
		 * attaching anew: its old incarnation writes no more.
		 */
		if (le64_to_cpu(READ_ONCE(hi->magic)) == DL_HOST_MAGIC &&
		    le32_to_cpu(READ_ONCE(hi->state)) == DL_HOST_UP &&
		    le64_to_cpu(READ_ONCE(hi->bound[fab->host_id])) ==
		    fab->incarnation)
			n++;
	}
	return n;
}

/**
 * dl_hostinfo_await_unbound() - wait until no peer writes into our inbox.
 * @fab: the fabric, its slot saying ABSENT; process context.
 *
 * Peers see that at their next scan and clear their bound[] entry for this
 * host once no store of theirs is under way. One that does not within
 * %DL_LEAVE_ACK_MS (stalled, or gone without leaving) might still write:
 * the inbox is then leaked rather than given back to the allocator.
 */
void dl_hostinfo_await_unbound(struct dl_fabric *fab)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(DL_LEAVE_ACK_MS);
	unsigned int n;

	while ((n = dl_hostinfo_writers(fab))) {
		if (time_after(jiffies, deadline)) {
			dev_warn(fab->dev,
				 "%u peer(s) did not stop writing into this host's inbox\n",
				 n);
			fab->inbox_leaked = true;
			return;
		}
		msleep(50);
	}
}

/**
 * dl_hostinfo_refresh() - keep this host's name in its slot current.
 * @fab: the fabric, published.
 */
void dl_hostinfo_refresh(struct dl_fabric *fab)
{
	dl_hostinfo_set_name(fab);
}

/*
 * The heartbeat beats from a timer of its own, not from the liveness work:
 * that work takes the fabric lock and waits behind whatever holds it (a
 * peer going down while the lender resets its devices, for one), and a
 * host that is merely busy must not look dead to its peers. A host whose
 * work is wedged still beats; its peers' requests time out instead.
 */
static void dl_hostinfo_beat_timer(struct timer_list *t)
{
	struct dl_fabric *fab = from_timer(fab, t, beat_timer);

	fab->heartbeat++;
	WRITE_ONCE(fab->self->heartbeat, cpu_to_le64(fab->heartbeat));
	mod_timer(&fab->beat_timer,
		  jiffies + msecs_to_jiffies(DL_HEARTBEAT_MS));
}

/**
 * dl_hostinfo_beat_start() - start beating every %DL_HEARTBEAT_MS.
 * @fab: the fabric, published.
 */
void dl_hostinfo_beat_start(struct dl_fabric *fab)
{
	timer_setup(&fab->beat_timer, dl_hostinfo_beat_timer, 0);
	mod_timer(&fab->beat_timer, jiffies);
}

/**
 * dl_hostinfo_beat_stop() - stop beating; waits for a running beat.
 * @fab: the fabric.
 */
void dl_hostinfo_beat_stop(struct dl_fabric *fab)
{
	timer_shutdown_sync(&fab->beat_timer);
}

/* Names end up in sysfs and in key=value lines: keep them one word. */
static void dl_hostinfo_copy_name(char *dst, const char *src, size_t len)
{
	size_t i;

	for (i = 0; i < len && src[i]; i++)
		dst[i] = isgraph(src[i]) && src[i] != '=' ? src[i] : '?';
	dst[i] = '\0';
}

/**
 * dl_hostinfo_read() - take a consistent copy of a peer's host info.
 * @fab: the fabric.
 * @id: the peer's host id.
 * @snap: filled in; only @snap->state when the state is not UP.
 *
 * Return: 0 if @snap is valid, -ENOENT if the slot was never written,
 * -EAGAIN if it changed while being read, -EINVAL if it is malformed.
 */
int dl_hostinfo_read(struct dl_fabric *fab, u32 id, struct dl_peer_snap *snap)
{
	const struct dl_host_info *hi = dl_ctl_host(fab, id);
	struct dl_host_info c;
	u32 state;

	state = le32_to_cpu(READ_ONCE(hi->state));
	/* Read the fields only after the state that vouches for them ... */
	smp_rmb();
	memcpy(&c, hi, sizeof(c));
	/* ... and check that it still does after. */
	smp_rmb();
	if (le32_to_cpu(READ_ONCE(hi->state)) != state)
		return -EAGAIN;

	if (le64_to_cpu(c.magic) != DL_HOST_MAGIC)
		return -ENOENT;
	if (le32_to_cpu(c.host_id) != id || state > DL_HOST_UP)
		return -EINVAL;
	snap->state = state;
	if (state != DL_HOST_UP)
		return 0;

	snap->incarnation = le64_to_cpu(c.incarnation);
	snap->heartbeat = le64_to_cpu(c.heartbeat);
	snap->proto_min = le16_to_cpu(c.proto_min);
	snap->proto_max = le16_to_cpu(c.proto_max);
	snap->inbound = le32_to_cpu(c.inbound);
	snap->layout.ram_size = le64_to_cpu(c.ram_size);
	snap->layout.ram_low_size = le64_to_cpu(c.ram_low_size);
	snap->layout.ram_high_base = le64_to_cpu(c.ram_high_base);
	snap->ident_phys = le64_to_cpu(c.ident_phys);
	snap->ident_token = le64_to_cpu(c.ident_token);
	snap->inbox_phys = le64_to_cpu(c.inbox_phys);
	snap->bound_me = le64_to_cpu(c.bound[fab->host_id]);
	dl_hostinfo_copy_name(snap->name, c.name, sizeof(c.name));

	/*
	 * The owner publishes the address of a page it allocated; anything
	 * else is malformed (and an address near a page's end would have
	 * the token straddle the page that peers map to read it).
	 */
	if (snap->proto_min > snap->proto_max ||
	    !PAGE_ALIGNED(snap->ident_phys) ||
	    !PAGE_ALIGNED(snap->inbox_phys) ||
	    !dl_layout_valid(&snap->layout))
		return -EINVAL;
	/* A bounded window's addresses are its offsets: identity layout. */
	if (snap->inbound > DL_INBOUND_WINDOW ||
	    (snap->inbound == DL_INBOUND_WINDOW &&
	     (snap->layout.ram_low_size != snap->layout.ram_size ||
	      snap->layout.ram_high_base != snap->layout.ram_size)))
		return -EINVAL;
	return 0;
}
