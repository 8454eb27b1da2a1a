// SPDX-License-Identifier: GPL-2.0
/*
 * devlend_ntb_emu.ko: the emulated fabric adapter as NTB hardware.
 *
 * A fabric client: for each fabric it registers one ntb_dev (a port of a
 * switch: NTB_TOPO_SWITCH, port number = host id) on the NTB bus, where
 * ntb_tool, ntb_pingpong or devlend's own NTB backend bind to it. What
 * one port does to another travels as DL_MSG_NTB_* messages, handled
 * here: every one is checked (sender, length, index) and a bad one is
 * counted and dropped, never trusted.
 *
 * The link to a peer is up when the fabric link is, both ports are
 * registered and both sides enabled it (ntb_link_enable()). Ports tell
 * each other with DL_MSG_NTB_HELLO when they come, go, or change their
 * side of the link; a hello that asks is answered, and is followed by
 * the inbound translations the sender holds for the receiver.
 */
#include <linux/debugfs.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/seq_file.h>
#include <linux/slab.h>

#include "internal.h"

static_assert(sizeof(struct dl_ntb_hello) == DL_NTB_HELLO_SIZE);
static_assert(sizeof(struct dl_ntb_db) == DL_NTB_DB_SIZE);
static_assert(sizeof(struct dl_ntb_reg) == DL_NTB_REG_SIZE);
static_assert(sizeof(struct dl_ntb_mw) == DL_NTB_MW_SIZE);
static_assert(sizeof(struct dl_ntb_xlate) == DL_NTB_XLATE_SIZE);
/* The state file prints both windows of each peer. */
static_assert(DL_NTB_MWS == 2);

static struct dentry *dl_ntbe_debugfs;

/*
 * What the port offers, as a real adapter's BARs and LUTs limit it; the
 * topology file sets them (docs/ntb.md). Read when a port is added.
 */
static unsigned int mw_count = DL_NTB_MWS;
module_param(mw_count, uint, 0444);
MODULE_PARM_DESC(mw_count, "inbound memory windows per peer (1-" __stringify(DL_NTB_MWS) ")");
static unsigned long mw_size_max;
module_param(mw_size_max, ulong, 0444);
MODULE_PARM_DESC(mw_size_max, "largest translation of one window, bytes (0: the host's RAM)");

/* Whether a message comes from a peer port and has @len bytes. */
static bool dl_ntbe_msg_ok(struct dl_ntbe *ne, const struct dl_fabric_msg *msg,
			   size_t len)
{
	unsigned long flags;

	if (msg->peer < ne->hosts && msg->peer != ne->self &&
	    msg->len == len)
		return true;
	spin_lock_irqsave(&ne->lock, flags);
	ne->rej++;
	spin_unlock_irqrestore(&ne->lock, flags);
	dev_dbg_ratelimited(&ne->ntb.dev, "NTB message %u from host %u refused: %zu bytes\n",
			    msg->type, msg->peer, msg->len);
	return false;
}

static void dl_ntbe_reject(struct dl_ntbe *ne, const struct dl_fabric_msg *msg)
{
	unsigned long flags;

	spin_lock_irqsave(&ne->lock, flags);
	ne->rej++;
	spin_unlock_irqrestore(&ne->lock, flags);
	dev_dbg_ratelimited(&ne->ntb.dev, "NTB message %u from host %u refused: out of range\n",
			    msg->type, msg->peer);
}

static void dl_ntbe_rx_hello(struct dl_fabric *fab,
			     const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_ntb_hello *h = msg->data;
	struct dl_ntbe *ne = priv;
	struct dl_ntbe_peer *p;
	unsigned long flags;
	u32 f;

	if (!dl_ntbe_msg_ok(ne, msg, sizeof(*h)))
		return;
	f = le32_to_cpu(h->flags);
	p = &ne->peers[msg->peer];
	spin_lock_irqsave(&ne->lock, flags);
	p->present = f & DL_NTB_F_PRESENT;
	p->link = p->present && (f & DL_NTB_F_LINK);
	if (!p->present)
		memset(p->out, 0, sizeof(p->out));
	/*
	 * The answer is the work's to send: a peer that holds its consumer
	 * index back would keep a handler waiting for room, and with it
	 * every other peer's messages.
	 */
	if (f & DL_NTB_F_ASK)
		ne->hello_owed |= BIT_ULL(msg->peer);
	spin_unlock_irqrestore(&ne->lock, flags);
	if (f & DL_NTB_F_ASK)
		mod_delayed_work(system_wq, &ne->db_work, 0);
	dl_ntbe_link_update(ne);
}

static void dl_ntbe_rx_db(struct dl_fabric *fab,
			  const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_ntb_db *db = msg->data;
	struct dl_ntbe *ne = priv;
	unsigned long flags;
	u64 bits;

	if (!dl_ntbe_msg_ok(ne, msg, sizeof(*db)))
		return;
	bits = le64_to_cpu(db->bits);
	if (!bits || bits & ~GENMASK_ULL(DL_NTB_DB_BITS - 1, 0)) {
		dl_ntbe_reject(ne, msg);
		return;
	}
	spin_lock_irqsave(&ne->lock, flags);
	ne->db_rx++;
	spin_unlock_irqrestore(&ne->lock, flags);
	dl_ntbe_db_change(ne, bits, 0, 0, 0);
}

static void dl_ntbe_rx_spad(struct dl_fabric *fab,
			    const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_ntb_reg *r = msg->data;
	struct dl_ntbe *ne = priv;
	unsigned long flags;
	u32 idx;

	if (!dl_ntbe_msg_ok(ne, msg, sizeof(*r)))
		return;
	idx = le32_to_cpu(r->index);
	if (idx >= DL_NTB_SPADS) {
		dl_ntbe_reject(ne, msg);
		return;
	}
	spin_lock_irqsave(&ne->lock, flags);
	ne->spad[idx] = le32_to_cpu(r->value);
	spin_unlock_irqrestore(&ne->lock, flags);
}

static void dl_ntbe_rx_spad_read(struct dl_fabric *fab,
				 const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_ntb_reg *r = msg->data;
	struct dl_ntbe *ne = priv;
	struct dl_ntb_reg resp;
	unsigned long flags;
	u32 idx;

	if (!dl_ntbe_msg_ok(ne, msg, sizeof(*r)) || !msg->req_id) {
		if (msg->req_id)
			dl_fabric_respond(fab, msg, -EINVAL, NULL, 0);
		return;
	}
	idx = le32_to_cpu(r->index);
	if (idx >= DL_NTB_SPADS) {
		dl_ntbe_reject(ne, msg);
		dl_fabric_respond(fab, msg, -EINVAL, NULL, 0);
		return;
	}
	resp.index = cpu_to_le32(idx);
	spin_lock_irqsave(&ne->lock, flags);
	resp.value = cpu_to_le32(ne->spad[idx]);
	spin_unlock_irqrestore(&ne->lock, flags);
	dl_fabric_respond(fab, msg, 0, &resp, sizeof(resp));
}

static void dl_ntbe_rx_msg(struct dl_fabric *fab,
			   const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_ntb_reg *r = msg->data;
	struct dl_ntbe *ne = priv;
	unsigned long flags;
	bool full;
	u32 idx;

	if (!dl_ntbe_msg_ok(ne, msg, sizeof(*r)))
		return;
	idx = le32_to_cpu(r->index);
	if (idx >= DL_NTB_MSGS) {
		dl_ntbe_reject(ne, msg);
		return;
	}
	spin_lock_irqsave(&ne->lock, flags);
	/* An unread message is not overwritten, as on real registers. */
	full = ne->msg_sts & BIT_ULL(idx);
	if (full) {
		ne->msgs_dropped++;
	} else {
		ne->msg[idx] = le32_to_cpu(r->value);
		ne->msg_src[idx] = dl_ntbe_pidx(ne, msg->peer);
	}
	spin_unlock_irqrestore(&ne->lock, flags);
	if (!full)
		dl_ntbe_msg_change(ne, BIT_ULL(idx), 0, 0, 0);
}

static void dl_ntbe_rx_mw(struct dl_fabric *fab,
			  const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_ntb_mw *m = msg->data;
	struct dl_ntbe *ne = priv;
	unsigned long flags;
	u64 addr, size;
	u32 idx, mflags;

	if (!dl_ntbe_msg_ok(ne, msg, sizeof(*m)))
		return;
	idx = le32_to_cpu(m->index);
	mflags = le32_to_cpu(m->flags);
	addr = le64_to_cpu(m->addr);
	size = le64_to_cpu(m->size);
	/* Where in the peer's RAM is checked when it is used (xlate). */
	if (idx >= DL_NTB_MWS || (mflags & ~DL_NTB_MW_F_BUS) ||
	    !IS_ALIGNED(addr, PAGE_SIZE) ||
	    !IS_ALIGNED(size, PAGE_SIZE) || addr + size < addr) {
		dl_ntbe_reject(ne, msg);
		return;
	}
	spin_lock_irqsave(&ne->lock, flags);
	ne->peers[msg->peer].out[idx].addr = size ? addr : 0;
	ne->peers[msg->peer].out[idx].size = size;
	ne->peers[msg->peer].out[idx].bus = size && (mflags & DL_NTB_MW_F_BUS);
	spin_unlock_irqrestore(&ne->lock, flags);
}

/*
 * DL_MSG_NTB_XLATE: where the asking peer's stores at an offset of our
 * inbound window for it land, through our adapter's IOMMU (hook.h).
 * Only what the window translates is answered: an offset not mapped,
 * outside the window, or of a window not translated by bus address is
 * refused, as the IOMMU would fault the store.
 */
static void dl_ntbe_rx_xlate(struct dl_fabric *fab,
			     const struct dl_fabric_msg *msg, void *priv)
{
	const struct dl_ntb_xlate *x = msg->data;
	struct dl_ntbe *ne = priv;
	struct dl_ntb_xlate resp;
	struct dl_ntbe_mw mw;
	unsigned long flags;
	u64 off, len, end, run;
	phys_addr_t phys;
	u32 idx;

	if (!dl_ntbe_msg_ok(ne, msg, sizeof(*x)) || !msg->req_id) {
		if (msg->req_id)
			dl_fabric_respond(fab, msg, -EINVAL, NULL, 0);
		return;
	}
	idx = le32_to_cpu(x->index);
	off = le64_to_cpu(x->off);
	len = le64_to_cpu(x->len);
	if (idx >= ne->mws || !len || !IS_ALIGNED(off, PAGE_SIZE) ||
	    !IS_ALIGNED(len, PAGE_SIZE) || check_add_overflow(off, len, &end))
		goto err_reject;
	spin_lock_irqsave(&ne->lock, flags);
	mw = ne->peers[msg->peer].in[idx];
	spin_unlock_irqrestore(&ne->lock, flags);
	if (!mw.bus || end > mw.size ||
	    dl_ntbe_bus_walk(ne, mw.addr + off, len, &phys, &run))
		goto err_reject;
	resp = *x;
	resp.len = cpu_to_le64(run);
	resp.addr = cpu_to_le64(phys);
	spin_lock_irqsave(&ne->lock, flags);
	ne->xlate_rx++;
	spin_unlock_irqrestore(&ne->lock, flags);
	dl_fabric_respond(fab, msg, 0, &resp, sizeof(resp));
	return;

err_reject:
	dl_ntbe_reject(ne, msg);
	dl_fabric_respond(fab, msg, -EINVAL, NULL, 0);
}

static const struct {
	u16 type;
	dl_fabric_msg_fn fn;
} dl_ntbe_handlers[] = {
	{ DL_MSG_NTB_HELLO, dl_ntbe_rx_hello },
	{ DL_MSG_NTB_DB, dl_ntbe_rx_db },
	{ DL_MSG_NTB_SPAD, dl_ntbe_rx_spad },
	{ DL_MSG_NTB_SPAD_READ, dl_ntbe_rx_spad_read },
	{ DL_MSG_NTB_MSG, dl_ntbe_rx_msg },
	{ DL_MSG_NTB_MW, dl_ntbe_rx_mw },
	{ DL_MSG_NTB_XLATE, dl_ntbe_rx_xlate },
};

static void dl_ntbe_unregister_handlers(struct dl_ntbe *ne, unsigned int n)
{
	while (n--)
		dl_fabric_unregister_handler(ne->fab, dl_ntbe_handlers[n].type);
}

static int dl_ntbe_add(struct dl_fabric *fab, void **ctx)
{
	struct device *dev = dl_fabric_device(fab);
	struct dl_ntbe *ne;
	unsigned int i;
	int ret;

	if (!dev_is_pci(dev))
		return -ENODEV;
	ne = kzalloc(sizeof(*ne), GFP_KERNEL);
	if (!ne)
		return -ENOMEM;
	ne->fab = fab;
	ne->self = dl_fabric_host_id(fab);
	ne->hosts = dl_fabric_max_hosts(fab);
	ne->mws = clamp_t(unsigned int, mw_count, 1, DL_NTB_MWS);
	ne->mw_size_max = dl_fabric_ram_size(fab);
	if (mw_size_max && mw_size_max < ne->mw_size_max)
		ne->mw_size_max = rounddown_pow_of_two(max_t(unsigned long,
							     mw_size_max,
							     PAGE_SIZE));
	spin_lock_init(&ne->lock);
	INIT_DELAYED_WORK(&ne->db_work, dl_ntbe_db_work);
	/* Everything masked until a client unmasks it, as after a reset. */
	ne->db_mask = GENMASK_ULL(DL_NTB_DB_BITS - 1, 0);
	ne->msg_mask = GENMASK_ULL(DL_NTB_MSGS - 1, 0);
	ne->ntb.pdev = to_pci_dev(dev);
	ne->ntb.topo = NTB_TOPO_SWITCH;
	ne->ntb.ops = &dl_ntbe_ops;

	for (i = 0; i < ARRAY_SIZE(dl_ntbe_handlers); i++) {
		ret = dl_fabric_register_handler(fab, dl_ntbe_handlers[i].type,
						 dl_ntbe_handlers[i].fn, ne);
		if (ret)
			goto err_unregister_handlers;
	}
	/* NTB clients may probe, and enable the link, in here. */
	ret = ntb_register_device(&ne->ntb);
	if (ret)
		goto err_unregister_handlers;
	WRITE_ONCE(ne->registered, true);
	dev_info(dev, "emulated NTB port %u of %u registered as %s\n",
		 ne->self, ne->hosts, dev_name(&ne->ntb.dev));
	*ctx = ne;
	return 0;

err_unregister_handlers:
	dl_ntbe_unregister_handlers(ne, i);
	kfree(ne);
	return ret;
}

static void dl_ntbe_remove(struct dl_fabric *fab, void *ctx)
{
	struct dl_ntbe *ne = ctx;
	u32 host;

	/* The clients go first: they may still ring and write. */
	WRITE_ONCE(ne->registered, false);
	ntb_unregister_device(&ne->ntb);
	cancel_delayed_work_sync(&ne->db_work);
	for (host = 0; host < ne->hosts; host++)
		if (host != ne->self && dl_fabric_link_is_up(fab, host))
			dl_ntbe_hello(ne, host, 0, false);
	dl_ntbe_unregister_handlers(ne, ARRAY_SIZE(dl_ntbe_handlers));
	kfree(ne);
}

static void dl_ntbe_peer_event(struct dl_fabric *fab, void *ctx,
			       enum dl_fabric_event_type type, u32 peer,
			       u16 proto)
{
	struct dl_ntbe *ne = ctx;
	struct dl_ntbe_peer *p = &ne->peers[peer];
	unsigned long flags;
	bool on;

	if (peer >= ne->hosts || peer == ne->self)
		return;
	spin_lock_irqsave(&ne->lock, flags);
	if (type == DL_FABRIC_EV_PEER_DOWN) {
		p->present = false;
		p->link = false;
		memset(p->out, 0, sizeof(p->out));
		ne->db_pending[peer] = 0;
		ne->hello_owed &= ~BIT_ULL(peer);
	}
	on = ne->link_on;
	spin_unlock_irqrestore(&ne->lock, flags);
	/* Under the fabric's liveness lock: do not wait for ring room. */
	if (type == DL_FABRIC_EV_PEER_UP)
		dl_ntbe_hello(ne, peer, DL_NTB_F_PRESENT | DL_NTB_F_ASK |
			      (on ? DL_NTB_F_LINK : 0), true);
	dl_ntbe_link_update(ne);
}

static struct dl_fabric_client dl_ntbe_client = {
	.name = "emulated NTB",
	.add = dl_ntbe_add,
	.remove = dl_ntbe_remove,
	.peer_event = dl_ntbe_peer_event,
};

static int dl_ntbe_show_one(struct dl_fabric *fab, void *ctx, void *arg)
{
	struct dl_ntbe *ne = ctx;
	struct seq_file *s = arg;
	unsigned long flags;
	u32 host;

	spin_lock_irqsave(&ne->lock, flags);
	seq_printf(s, "ntb=%s port=%u ports=%u mws=%u mw_size_max=%llu link_on=%d linked=%#llx db=%#llx db_mask=%#llx msg_sts=%#llx db_rx=%llu rej=%llu msgs_dropped=%llu xlate_rx=%llu xlate_tx=%llu translating=%d\n",
		   dev_name(&ne->ntb.dev), ne->self, ne->hosts, ne->mws,
		   ne->mw_size_max, ne->link_on,
		   ne->linked, ne->db, ne->db_mask, ne->msg_sts, ne->db_rx,
		   ne->rej, ne->msgs_dropped, ne->xlate_rx, ne->xlate_tx,
		   dl_ntbe_translating(ne));
	/* Each peer's window translations: ours for it, and its for us. */
	for (host = 0; host < ne->hosts; host++) {
		const struct dl_ntbe_peer *p = &ne->peers[host];

		if (host == ne->self)
			continue;
		seq_printf(s, "peer=%u present=%d link=%d in=%llu,%llu out=%llu,%llu\n",
			   host, p->present, p->link, p->in[0].size,
			   p->in[1].size, p->out[0].size, p->out[1].size);
	}
	spin_unlock_irqrestore(&ne->lock, flags);
	return 0;
}

static int dl_ntbe_show(struct seq_file *s, void *unused)
{
	return dl_fabric_client_for_each(&dl_ntbe_client, dl_ntbe_show_one, s);
}
DEFINE_SHOW_ATTRIBUTE(dl_ntbe);

static int __init dl_ntbe_init(void)
{
	int ret;

	dl_ntbe_debugfs = debugfs_create_file("ntb_emu", 0400,
					      dl_fabric_debugfs_root(), NULL,
					      &dl_ntbe_fops);
	ret = dl_fabric_client_register(&dl_ntbe_client);
	if (ret)
		debugfs_remove(dl_ntbe_debugfs);
	return ret;
}

static void __exit dl_ntbe_exit(void)
{
	dl_fabric_client_unregister(&dl_ntbe_client);
	debugfs_remove(dl_ntbe_debugfs);
}

module_init(dl_ntbe_init);
module_exit(dl_ntbe_exit);

MODULE_DESCRIPTION("devlend: the emulated fabric adapter as NTB hardware, for Linux's NTB clients");
MODULE_LICENSE("GPL");
