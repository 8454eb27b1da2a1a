// SPDX-License-Identifier: GPL-2.0
/*
 * lender/msg.c: the table that decides what a fabric peer may ask of a
 * lent device (struct dl_lender_op: payload length and checks, who may
 * send it) and the skeleton that applies it (dl_lender_open(): dev_id,
 * allowed hosts, holder, state, a device busy resetting). The real
 * msg.c is built with the real table of lent devices (lent.c) and the
 * real answer helper (peers.c); the files below them (bar.c, cfg.c,
 * dma.c, irq.c, slow.c) and the fabric are fakes that count their calls.
 * A message goes in through the handler msg.c registers for its type;
 * the evidence is the answer's status (or that none was sent), the
 * refusal counters of debugfs, and whether the work was reached.
 */
#include <limits.h>
#include <stdio.h>

#include "kshim.h"
#include <linux/kref.h>

/* Kernel calls msg.c, lent.c and peers.c make that the shim lacks. */
#define __MUTEX_INITIALIZER(m)	{ 0 }
#define LIST_HEAD_INIT(n)	{ &(n), &(n) }
#define XARRAY_INIT(n, f)	{ 0 }
#define xa_lock(xa)		((void)(xa))
#define xa_unlock(xa)		((void)(xa))
#define xa_for_each(xa, i, e)	xa_for_each_range(xa, i, e, 0, ULONG_MAX)
#define smp_mb()		mb()
#define GENMASK(h, l)		((~0UL >> (63 - (h))) & (~0UL << (l)))
#define BUILD_BUG_ON(c)		((void)sizeof(char[1 - 2 * !!(c)]))
#define get_unaligned(p) \
	({ typeof(*(p)) _v; memcpy(&_v, (p), sizeof(_v)); _v; })
#define pci_info_ratelimited(p, ...)	((void)(p), kshim_log("info", __VA_ARGS__))
#define pci_dev_put(p)		((void)(p))
#define pci_set_dev_assigned(p)	((void)(p))
#define pci_is_pcie(p)		((void)(p), false)
#define pci_physfn(p)		(p)
#define pci_name(p)		((p)->dev.name)
#define pci_msix_vec_count(p)	((p)->msix_cap ? 4 : -EINVAL)
#define pci_msi_vec_count(p)	((p)->msi_cap ? 1 : -EINVAL)

static unsigned int lents_freed;
#define kfree_rcu(p, f)		((void)(p), lents_freed++)

static bool dev_locked;	/* someone else holds the device lock */
static inline bool device_trylock(struct device *d)
{
	(void)d;
	return !dev_locked;
}

static inline void device_unlock(struct device *d)
{
	(void)d;
}

static inline void strscpy_pad(char *dst, const char *src, size_t n)
{
	memset(dst, 0, n);
	strncpy(dst, src, n - 1);
}

static inline void *memchr_inv(const void *p, int c, size_t n)
{
	const u8 *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != (u8)c)
			return (void *)&b[i];
	return NULL;
}

/*
 * What lies below msg.c, and the fabric, are this file's fakes; renamed so
 * that they clash with no other test's (test_lender_cfg.c has the real
 * dl_lent_cfg_read()).
 */
#define dl_lent_fast_update		msgt_fast_update
#define dl_lent_slow_mark		msgt_slow_mark
#define dl_lender_on_bar_write_atomic	msgt_bar_write_atomic
#define dl_lent_slow_queue		msgt_slow_queue
#define dl_lent_bar_verdict		msgt_bar_verdict
#define dl_lent_bar_read		msgt_bar_read
#define dl_lent_bar_write		msgt_bar_write
#define dl_lent_intx_bar_access		msgt_intx_bar_access
#define dl_lent_cfg_read		msgt_cfg_read
#define dl_lent_cfg_write		msgt_cfg_write
#define dl_lent_irq_set			msgt_irq_set
#define dl_lent_intx_set_masked		msgt_intx_set_masked
#define dl_lent_irq_direct		msgt_irq_direct
#define dl_lent_bar_window		msgt_bar_window
#define dl_lent_bar_dma			msgt_bar_dma
#define dl_lent_p2p_dma			msgt_p2p_dma
#define dl_lent_p2p_dma_remote		msgt_p2p_dma_remote
#define dl_lent_p2p_export		msgt_p2p_export
#define dl_lent_p2p_fence_check		msgt_p2p_fence_check
#define dl_lent_holder_publish		msgt_holder_publish
#define dl_lent_group_lock		msgt_group_lock
#define dl_lent_group_unlock		msgt_group_unlock
#define dl_lent_group_id		msgt_group_id
#define dl_lent_dma_map			msgt_dma_map
#define dl_lent_dma_unmap		msgt_dma_unmap
#define dl_lent_unmap_all		msgt_unmap_all
#define dl_fabric_peer_info		msgt_fabric_peer_info
#define dl_fabric_respond		msgt_fabric_respond
#define dl_fabric_device		msgt_fabric_device
#define dl_fabric_register_handler	msgt_fabric_register_handler
#define dl_fabric_register_handler_atomic msgt_fabric_register_handler_atomic
#define dl_fabric_unregister_handler	msgt_fabric_unregister_handler
#define dl_fabric_host_id		msgt_fabric_host_id
#define dl_fabric_max_hosts		msgt_fabric_max_hosts
#define dl_fabric_link_is_up		msgt_fabric_link_is_up
#define dl_fabric_send			msgt_fabric_send

/* The kernel builds with -Wextra but without these (Makefile.extrawarn). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "../../lender/lent.c"
#include "../../lender/peers.c"
#include "../../lender/msg.c"
#pragma GCC diagnostic pop

#include "unit.h"

/* The fakes take the kernel functions' parameters, and use few. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* The fabric: one, with peers whose link and incarnation a test sets. */
static char fab_storage;
static struct dl_fabric *const fab = (struct dl_fabric *)&fab_storage;
static char other_fab_storage;
static struct dl_fabric *const other_fab =
	(struct dl_fabric *)&other_fab_storage;
static struct device fab_dev = { .name = "fabric" };
static bool peer_up[DL_MAX_HOSTS];
static u64 peer_inc[DL_MAX_HOSTS];

#define NTYPES	64
static dl_fabric_msg_fn handler[NTYPES];
static dl_fabric_msg_atomic_fn atomic_handler[NTYPES];

/* The last answer. */
static struct {
	unsigned int n;
	int err;
	size_t len;
	u8 data[sizeof(union dl_lender_resp)];
} ans;

/* Calls that reached the files below msg.c. */
static struct {
	unsigned int slow_queue, bar_read, bar_write, intx_access, cfg_read,
		     cfg_write, irq_set, intx_masked, dma_map, dma_unmap,
		     dma_unmap_all, fast_update, irq_direct,
		     bar_window, bar_dma, p2p_dma, holder_publish, p2p_remote,
		     p2p_export, group_lock, group_unlock, mig_resume,
		     mig_takeover;
	u64 group_inc;
	bool published_in_group;
	u32 export_to;
	bool bar_dma_map;
	u64 bar_dma_iova;
	bool p2p_map;
	u32 p2p_target;
	u64 p2p_iova;
	u32 dma_count;
} calls;

/* What the fakes answer. */
static int bar_err, cfg_write_ret, irq_ret, mask_ret, dma_ret, direct_ret;
static int window_ret, bar_dma_ret, p2p_dma_ret, remote_ret, export_ret;
static int fence_ret, group_ret;
static u32 group_id;
/* A lent device's domain: dma.c's business, never looked into here. */
static struct iommu_domain domain;
static enum dl_lender_reject bar_why;

struct device *dl_fabric_device(struct dl_fabric *f)
{
	return &fab_dev;
}

u32 dl_fabric_host_id(struct dl_fabric *f)
{
	return 0;
}

u32 dl_fabric_max_hosts(struct dl_fabric *f)
{
	return DL_MAX_HOSTS;
}

bool dl_fabric_link_is_up(struct dl_fabric *f, u32 peer)
{
	return peer < DL_MAX_HOSTS && peer_up[peer];
}

int dl_fabric_send(struct dl_fabric *f, u32 peer, u16 type, const void *data,
		   size_t len)
{
	return 0;
}

int dl_fabric_peer_info(struct dl_fabric *f, u32 peer,
			struct dl_fabric_peer_info *info)
{
	if (peer >= DL_MAX_HOSTS)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->up = peer_up[peer];
	info->incarnation = peer_inc[peer];
	return 0;
}

int dl_fabric_respond(struct dl_fabric *f, const struct dl_fabric_msg *req,
		      int err, const void *data, size_t len)
{
	ans.n++;
	ans.err = err;
	ans.len = len;
	if (data && len <= sizeof(ans.data))
		memcpy(ans.data, data, len);
	return 0;
}

int dl_fabric_register_handler(struct dl_fabric *f, u16 type,
			       dl_fabric_msg_fn fn, void *priv)
{
	if (type >= NTYPES || handler[type])
		return -EEXIST;
	handler[type] = fn;
	return 0;
}

int dl_fabric_register_handler_atomic(struct dl_fabric *f, u16 type,
				      dl_fabric_msg_fn fn,
				      dl_fabric_msg_atomic_fn atomic_fn,
				      void *priv)
{
	int ret = dl_fabric_register_handler(f, type, fn, priv);

	if (!ret)
		atomic_handler[type] = atomic_fn;
	return ret;
}

void dl_fabric_unregister_handler(struct dl_fabric *f, u16 type)
{
	if (type < NTYPES) {
		handler[type] = NULL;
		atomic_handler[type] = NULL;
	}
}

void dl_lent_fast_update(struct dl_lent *l)
{
	calls.fast_update++;
}

void dl_lent_slow_mark(struct dl_lent *l, unsigned int bit)
{
	l->slow_busy |= BIT(bit);
}

bool dl_lender_on_bar_write_atomic(struct dl_fabric *f,
				   const struct dl_fabric_msg *msg, void *priv)
{
	return false;
}

void dl_lent_slow_queue(struct dl_lent *l)
{
	calls.slow_queue++;
}

int dl_lent_bar_verdict(struct dl_lent *l, const struct dl_bar_access *a,
			enum dl_lender_reject *why)
{
	*why = bar_why;
	return bar_err;
}

u64 dl_lent_bar_read(struct dl_lent *l, const struct dl_bar_access *a)
{
	calls.bar_read++;
	return 0x1122334455667788ULL;
}

void dl_lent_bar_write(struct dl_lent *l, const struct dl_bar_access *a)
{
	calls.bar_write++;
}

void dl_lent_intx_bar_access(struct dl_lent *l)
{
	calls.intx_access++;
}

int dl_lent_cfg_read(struct dl_lent *l, unsigned int pos, unsigned int size,
		     u32 *val)
{
	calls.cfg_read++;
	*val = 0xc0de0000 | pos;
	return 0;
}

int dl_lent_cfg_write(struct dl_lent *l, unsigned int pos, unsigned int size,
		      u32 val)
{
	calls.cfg_write++;
	return cfg_write_ret;
}

int dl_lent_irq_set(struct dl_lent *l, struct dl_fabric *f, u32 peer,
		    u16 type, u32 count, u16 set_flags)
{
	calls.irq_set++;
	return irq_ret;
}

int dl_lent_irq_direct(struct dl_lent *l, struct dl_fabric *f, u32 peer,
		       u16 type, u16 index, u16 db_vector)
{
	calls.irq_direct++;
	return direct_ret;
}

int dl_lent_bar_window(struct dl_lent *l, struct dl_fabric *f, u32 peer,
		       unsigned int bar, u64 *token, u64 *len)
{
	calls.bar_window++;
	*token = 7;
	*len = 8192;
	return window_ret;
}

int dl_lent_bar_dma(struct dl_lent *l, struct dl_fabric *f, u32 peer,
		    unsigned int bar, bool map, u64 iova)
{
	calls.bar_dma++;
	calls.bar_dma_map = map;
	calls.bar_dma_iova = iova;
	return bar_dma_ret;
}

int dl_lent_p2p_dma(struct dl_lent *x, struct dl_fabric *f, u32 peer,
		    u32 target_id, unsigned int bar, bool map, u64 iova)
{
	calls.p2p_dma++;
	calls.p2p_map = map;
	calls.p2p_target = target_id;
	calls.p2p_iova = iova;
	return p2p_dma_ret;
}

int dl_lent_p2p_dma_remote(struct dl_lent *x, struct dl_fabric *f,
			   const struct dl_fabric_msg *msg,
			   const struct dl_p2p_dma *d)
{
	calls.p2p_remote++;
	return remote_ret;
}

int dl_lent_p2p_fence_check(struct dl_lent *y)
{
	return fence_ret;
}

int dl_lent_mig_resume(struct dl_lent *l)
{
	calls.mig_resume++;
	l->mig_quiesced = false;
	return 0;
}

int dl_lent_mig_takeover(struct dl_lent *l, struct dl_fabric *f, u32 peer,
			 const struct dl_mig_takeover *t)
{
	calls.mig_takeover++;
	return l->mig_quiesced && le64_to_cpu(t->ticket) == l->mig_ticket ?
	       0 : -EBUSY;
}

int dl_lent_p2p_export(struct dl_lent *y, struct dl_fabric *f, u32 holder,
		       unsigned int bar, u32 to_host)
{
	calls.p2p_export++;
	calls.export_to = to_host;
	return export_ret;
}

void dl_lent_holder_publish(struct dl_lent *l)
{
	calls.holder_publish++;
	calls.published_in_group = calls.group_lock > calls.group_unlock;
}

int dl_lent_group_lock(struct dl_lent *l, struct dl_fabric *f, u32 peer,
		       u64 inc)
{
	calls.group_inc = inc;
	if (group_ret)
		return group_ret;
	calls.group_lock++;
	return 0;
}

void dl_lent_group_unlock(struct dl_lent *l)
{
	calls.group_unlock++;
}

u32 dl_lent_group_id(struct dl_lent *l)
{
	return group_id;
}

int dl_lent_intx_set_masked(struct dl_lent *l, bool mask)
{
	calls.intx_masked++;
	return mask_ret;
}

int dl_lent_dma_map(struct dl_lent *l, struct dl_fabric *f, u32 peer,
		    const struct dl_dma_range *ranges, u32 count)
{
	calls.dma_map++;
	calls.dma_count = count;
	return dma_ret;
}

int dl_lent_dma_unmap(struct dl_lent *l, u64 iova, u64 len)
{
	calls.dma_unmap++;
	return 0;
}

void dl_lent_unmap_all(struct dl_lent *l)
{
	calls.dma_unmap_all++;
}

/* The lent device, dev_id 5, and hosts 1 (its holder, in some tests) and 2. */
#define DEV	5
#define HOLDER	1
#define OTHER	2
static struct pci_dev pdev = { .dev = { .name = "0000:01:00.0" } };
static struct dl_lent lent;

/* An answer that never came: the slow work answers, or nobody does. */
#define NO_ANSWER	1000

static void setup(void)
{
	unsigned int i;

	dl_lender_unregister_handlers(fab);
	xa_destroy(&dl_lender.devs);
	memset(&dl_lender.rej, 0, sizeof(dl_lender.rej));
	memset(&lent, 0, sizeof(lent));
	memset(&calls, 0, sizeof(calls));
	bar_err = 0;
	cfg_write_ret = 0;
	irq_ret = 0;
	mask_ret = 0;
	direct_ret = 0;
	window_ret = 0;
	bar_dma_ret = 0;
	p2p_dma_ret = 0;
	remote_ret = 0;
	export_ret = 0;
	fence_ret = 0;
	group_ret = 0;
	group_id = 0;
	dma_ret = 0;
	dev_locked = false;
	kref_init(&lent.ref);
	lent.pdev = &pdev;
	lent.dev_id = DEV;
	lent.state = DL_LENT_AVAILABLE;
	lent.borrower = DL_NO_HOST;
	lent.allowed = DL_ALL_HOSTS;
	lent.cfg_size = 256;
	lent.domain = &domain;
	xa_store(&dl_lender.devs, DEV, &lent, GFP_KERNEL);
	for (i = 0; i < DL_MAX_HOSTS; i++) {
		peer_up[i] = true;
		peer_inc[i] = 100 + i;
	}
	CHECK_EQ(dl_lender_register_handlers(fab), 0);
}

static void hold(u32 peer)
{
	lent.state = DL_LENT_BORROWED;
	lent.borrower = peer;
	lent.borrower_inc = peer_inc[peer];
	lent.fab = fab;
}

/* Send one message (with an answer asked for, unless posted) and wait. */
static int send_as(u32 peer, u16 type, const void *payload, size_t len,
		   bool posted)
{
	struct dl_fabric_msg m = {
		.peer = peer, .type = type, .req_id = posted ? 0 : 42,
		.len = len,
	};
	u8 copy[1024];

	memcpy(copy, payload, len);
	m.data = copy;
	ans.n = 0;
	ans.err = 999;
	ans.len = 0;
	if (type >= NTYPES || !handler[type]) {
		unit_fail(__FILE__, __LINE__, "no handler for type %u", type);
		return -EPROTO;
	}
	handler[type](fab, &m, NULL);
	CHECK(ans.n <= 1);
	return ans.n ? ans.err : NO_ANSWER;
}

static int send(u32 peer, u16 type, const void *payload, size_t len)
{
	return send_as(peer, type, payload, len, false);
}

static u64 rej(enum dl_lender_reject r)
{
	return atomic64_read(&lent.rej[r]);
}

static u64 grej(enum dl_lender_reject r)
{
	return atomic64_read(&dl_lender.rej[r]);
}

static u64 cnt(enum dl_lender_counter c)
{
	return atomic64_read(&lent.cnt[c]);
}

/* Whether the work behind the table was reached at all. */
static bool nothing_done(void)
{
	return !calls.slow_queue && !calls.bar_read && !calls.bar_write &&
	       !calls.cfg_read && !calls.cfg_write && !calls.irq_set &&
	       !calls.intx_masked && !calls.irq_direct && !calls.dma_map &&
	       !calls.bar_window && !calls.bar_dma && !calls.p2p_dma &&
	       !calls.dma_unmap &&
	       !calls.dma_unmap_all && !lent.slow_busy;
}

/* A well-formed payload of each type that names the device. */
union payload {
	struct dl_dev_ref ref;
	struct dl_cfg_access cfg;
	struct dl_cfg_block_req block;
	struct dl_bar_access bar;
	struct dl_dma_unmap unmap;
	struct dl_irq_set irq;
	struct dl_irq_mask mask;
	struct dl_irq_direct direct;
	struct dl_bar_window window;
	struct dl_bar_dma bar_dma;
	struct dl_p2p_dma p2p;
	struct dl_p2p_export export;
	struct dl_mig_quiesce quiesce;
	struct dl_mig_takeover takeover;
	struct {
		struct dl_dma_map map;
		struct dl_dma_range range[2];
	} dma;
	u8 bytes[128];
};

static size_t good(u16 type, union payload *p)
{
	memset(p, 0, sizeof(*p));
	p->ref.dev_id = cpu_to_le32(DEV);
	switch (type) {
	case DL_MSG_DEV_INFO:
	case DL_MSG_DEV_ACQUIRE:
	case DL_MSG_DEV_RELEASE:
	case DL_MSG_DEV_RESET:
		return sizeof(p->ref);
	case DL_MSG_CFG_READ:
	case DL_MSG_CFG_WRITE:
		p->cfg.offset = cpu_to_le16(0x10);
		p->cfg.size = 4;
		return sizeof(p->cfg);
	case DL_MSG_CFG_READ_BLOCK:
		p->block.len = cpu_to_le16(64);
		return sizeof(p->block);
	case DL_MSG_BAR_READ:
	case DL_MSG_BAR_WRITE:
		p->bar.size = 4;
		return sizeof(p->bar);
	case DL_MSG_DMA_MAP:
		p->dma.map.count = cpu_to_le32(1);
		p->dma.range[0].len = cpu_to_le64(4096);
		return sizeof(p->dma.map) + sizeof(p->dma.range[0]);
	case DL_MSG_DMA_UNMAP:
		p->unmap.flags = cpu_to_le32(DL_DMA_UNMAP_F_ALL);
		return sizeof(p->unmap);
	case DL_MSG_IRQ_SET:
		p->irq.type = cpu_to_le16(DL_IRQ_MSIX);
		p->irq.count = cpu_to_le32(1);
		return sizeof(p->irq);
	case DL_MSG_IRQ_MASK:
		p->mask.type = cpu_to_le16(DL_IRQ_INTX);
		p->mask.mask = 1;
		return sizeof(p->mask);
	case DL_MSG_IRQ_DIRECT:
		p->direct.type = cpu_to_le16(DL_IRQ_MSIX);
		p->direct.db_vector = cpu_to_le16(1);
		return sizeof(p->direct);
	case DL_MSG_BAR_WINDOW:
		p->window.bar = 2;
		return sizeof(p->window);
	case DL_MSG_BAR_DMA:
		p->bar_dma.bar = 2;
		p->bar_dma.flags = DL_BAR_DMA_F_MAP;
		p->bar_dma.iova = cpu_to_le64(0xfe000000);
		return sizeof(p->bar_dma);
	case DL_MSG_P2P_DMA:
		p->p2p.target_id = cpu_to_le32(9);
		p->p2p.bar = 4;
		p->p2p.flags = DL_P2P_DMA_F_MAP;
		p->p2p.iova = cpu_to_le64(0xfd000000);
		return sizeof(p->p2p);
	case DL_MSG_P2P_EXPORT:
		p->export.bar = 2;
		p->export.to_host = cpu_to_le32(3);
		return sizeof(p->export);
	case DL_MSG_MIG_QUIESCE:
		p->quiesce.settle_ms = cpu_to_le32(50);
		p->quiesce.timeout_ms = cpu_to_le32(3000);
		return sizeof(p->quiesce);
	case DL_MSG_MIG_RESUME:
		return sizeof(p->ref);
	case DL_MSG_MIG_TAKEOVER:
		p->takeover.from_host = cpu_to_le32(1);
		p->takeover.ticket = cpu_to_le64(0x77);
		return sizeof(p->takeover);
	}
	return 0;
}

/* Every message type that names a device, and who may send it. */
static const struct {
	u16 type;
	bool holder_only;	/* else anyone (DL_ACC_ANY, DL_ACC_READ) */
} types[] = {
	{ DL_MSG_DEV_INFO, false },
	{ DL_MSG_DEV_ACQUIRE, false },
	{ DL_MSG_DEV_RELEASE, true },
	{ DL_MSG_DEV_RESET, true },
	{ DL_MSG_CFG_READ, false },
	{ DL_MSG_CFG_READ_BLOCK, false },
	{ DL_MSG_CFG_WRITE, true },
	{ DL_MSG_BAR_READ, true },
	{ DL_MSG_BAR_WRITE, true },
	{ DL_MSG_DMA_MAP, true },
	{ DL_MSG_DMA_UNMAP, true },
	{ DL_MSG_IRQ_SET, true },
	{ DL_MSG_IRQ_MASK, true },
	{ DL_MSG_IRQ_DIRECT, true },
	{ DL_MSG_BAR_WINDOW, true },
	{ DL_MSG_BAR_DMA, true },
	{ DL_MSG_P2P_DMA, true },
	{ DL_MSG_P2P_EXPORT, true },
	{ DL_MSG_MIG_QUIESCE, true },
	{ DL_MSG_MIG_RESUME, true },
	{ DL_MSG_MIG_TAKEOVER, false },
};

/*
 * The lender answers exactly DEV_LIST and the device types; what it only
 * sends (DEV_CHANGED, IRQ_FIRE, DEV_FAULT) or knows nothing of has no
 * handler, so the fabric refuses it. BAR_WRITE alone is served from the
 * doorbell interrupt too. Unregistering leaves nothing behind.
 */
static void test_registered_types(void)
{
	unsigned int t, i, n = 0;

	setup();
	for (t = 0; t < NTYPES; t++) {
		bool want = t == DL_MSG_DEV_LIST;

		for (i = 0; i < ARRAY_SIZE(types); i++)
			want |= types[i].type == t;
		if (!!handler[t] != want)
			unit_fail(__FILE__, __LINE__, "type %u: handler %d, want %d",
				  t, !!handler[t], want);
		n += !!handler[t];
		CHECK_EQ(!!atomic_handler[t], t == DL_MSG_BAR_WRITE);
	}
	CHECK_EQ(n, ARRAY_SIZE(types) + 1);
	CHECK(!handler[DL_MSG_DEV_CHANGED] && !handler[DL_MSG_IRQ_FIRE] &&
	      !handler[DL_MSG_DEV_FAULT] && !handler[DL_MSG_PING]);
	dl_lender_unregister_handlers(fab);
	for (t = 0; t < NTYPES; t++)
		CHECK(!handler[t] && !atomic_handler[t]);
}

/*
 * A payload one byte short or long, or empty, is refused as malformed for
 * every type, before the device is looked up: even the holder's, even
 * for a dev_id that does not exist.
 */
static void test_bad_lengths(void)
{
	union payload p;
	unsigned int i, refusals = 0;
	size_t len;

	setup();
	hold(HOLDER);
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		u16 t = types[i].type;

		len = good(t, &p);
		CHECK_EQ(send(HOLDER, t, &p, len - 1), -EINVAL);
		CHECK_EQ(send(HOLDER, t, &p, len + 1), -EINVAL);
		CHECK_EQ(send(HOLDER, t, &p, 0), -EINVAL);
		refusals += 3;
	}
	len = sizeof(struct dl_dev_ref);
	memset(&p, 0, sizeof(p));
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_LIST, &p, len - 1), -EINVAL);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_LIST, &p, len + 1), -EINVAL);
	refusals += 2;
	CHECK_EQ(grej(DL_REJ_MALFORMED), refusals);
	CHECK_EQ(grej(DL_REJ_NODEV), 0);
	CHECK_EQ(rej(DL_REJ_NOT_HOLDER), 0);
	CHECK(nothing_done());
	CHECK_EQ(lent.ref.refcount, 1);	/* never even looked up */
}

/* DMA_MAP's length must be its header and exactly count ranges. */
static void test_dma_map_lengths(void)
{
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_DMA_MAP, &p);
	p.dma.map.count = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, sizeof(p.dma.map)), -EINVAL);
	p.dma.map.count = cpu_to_le32(2);	/* one range sent */
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len), -EINVAL);
	/* A count so large that count * size wraps. */
	p.dma.map.count = cpu_to_le32(0xaaaaaaab);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len), -EINVAL);
	p.dma.map.count = cpu_to_le32(1);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len + 8), -EINVAL);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, 4), -EINVAL);
	CHECK_EQ(grej(DL_REJ_MALFORMED), 5);
	CHECK_EQ(calls.dma_map, 0);

	/* Two ranges, said so: served, with the count it said. */
	p.dma.map.count = cpu_to_le32(2);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len + sizeof(p.dma.range[0])),
		 0);
	CHECK_EQ(calls.dma_map, 1);
	CHECK_EQ(calls.dma_count, 2);
	/* Overlap and budget are "invalid" on the wire. */
	dma_ret = -EEXIST;
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len + sizeof(p.dma.range[0])),
		 -EINVAL);
	dma_ret = -ENOSPC;
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len + sizeof(p.dma.range[0])),
		 -EINVAL);
	dma_ret = -ENOMEM;
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len + sizeof(p.dma.range[0])),
		 -ENOMEM);
}

/* Reserved fields and flags must be zero (but those each type allows). */
static void test_reserved_fields(void)
{
	union payload p;
	size_t len;
	u64 malformed = 0;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_DEV_RELEASE, &p);
	p.ref.flags = cpu_to_le32(DL_DEV_REF_F_INFO_EXT);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_RELEASE, &p, len), -EINVAL);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_RESET, &p, len), -EINVAL);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_ACQUIRE, &p, len), -EINVAL);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_LIST, &p, len), -EINVAL);
	malformed += 4;
	/* DEV_INFO may ask for the extension, and for nothing else. */
	p.ref.flags = cpu_to_le32(2);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_INFO, &p, len), -EINVAL);
	malformed++;
	CHECK_EQ(grej(DL_REJ_MALFORMED), malformed);

	/* IRQ_MASK: INTx, vector 0, mask 0 or 1, reserved bytes zero. */
	len = good(DL_MSG_IRQ_MASK, &p);
	p.mask.reserved[2] = 1;
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_MASK, &p, len), -EINVAL);
	len = good(DL_MSG_IRQ_MASK, &p);
	p.mask.vector = cpu_to_le16(1);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_MASK, &p, len), -EINVAL);
	len = good(DL_MSG_IRQ_MASK, &p);
	p.mask.mask = 2;
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_MASK, &p, len), -EINVAL);
	len = good(DL_MSG_IRQ_MASK, &p);
	p.mask.type = cpu_to_le16(DL_IRQ_MSIX);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_MASK, &p, len), -EINVAL);
	malformed += 4;

	/* IRQ_DIRECT: reserved bytes zero. */
	len = good(DL_MSG_IRQ_DIRECT, &p);
	p.direct.reserved[5] = 1;
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_DIRECT, &p, len), -EINVAL);
	malformed++;

	/* BAR_WINDOW: reserved bytes and the answer's fields zero. */
	len = good(DL_MSG_BAR_WINDOW, &p);
	p.window.reserved[2] = 1;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WINDOW, &p, len), -EINVAL);
	len = good(DL_MSG_BAR_WINDOW, &p);
	p.window.token = cpu_to_le64(1);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WINDOW, &p, len), -EINVAL);
	len = good(DL_MSG_BAR_WINDOW, &p);
	p.window.len = cpu_to_le64(4096);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WINDOW, &p, len), -EINVAL);
	malformed += 3;

	/* BAR_DMA: known flags, reserved zero, an unmap names no IOVA. */
	len = good(DL_MSG_BAR_DMA, &p);
	p.bar_dma.flags = 2;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), -EINVAL);
	len = good(DL_MSG_BAR_DMA, &p);
	p.bar_dma.reserved = cpu_to_le16(1);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), -EINVAL);
	len = good(DL_MSG_BAR_DMA, &p);
	p.bar_dma.flags = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), -EINVAL);
	malformed += 3;

	/* P2P_DMA: the same. */
	len = good(DL_MSG_P2P_DMA, &p);
	p.p2p.flags = 2;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EINVAL);
	len = good(DL_MSG_P2P_DMA, &p);
	p.p2p.reserved = cpu_to_le16(1);
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EINVAL);
	len = good(DL_MSG_P2P_DMA, &p);
	p.p2p.flags = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EINVAL);
	malformed += 3;

	/* IRQ_SET: flags only with INTx, and only the known one. */
	len = good(DL_MSG_IRQ_SET, &p);
	p.irq.flags = cpu_to_le16(DL_IRQ_SET_F_UNMASK_MSG);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_SET, &p, len), -EINVAL);
	p.irq.type = cpu_to_le16(DL_IRQ_INTX);
	p.irq.flags = cpu_to_le16(2);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_SET, &p, len), -EINVAL);
	malformed += 2;
	CHECK_EQ(grej(DL_REJ_MALFORMED), malformed);
	CHECK(nothing_done());

	/* The same, well formed, are served. */
	p.irq.flags = cpu_to_le16(DL_IRQ_SET_F_UNMASK_MSG);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_SET, &p, len), 0);
	CHECK_EQ(calls.irq_set, 1);
	CHECK_EQ(cnt(DL_LCNT_IRQ_SETS), 1);
	len = good(DL_MSG_IRQ_MASK, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_MASK, &p, len), 0);
	CHECK_EQ(calls.intx_masked, 1);
	len = good(DL_MSG_IRQ_DIRECT, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_DIRECT, &p, len), 0);
	CHECK_EQ(calls.irq_direct, 1);
	len = good(DL_MSG_BAR_DMA, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), 0);
	CHECK_EQ(calls.bar_dma, 1);
	CHECK(calls.bar_dma_map);
	CHECK_EQ(calls.bar_dma_iova, 0xfe000000);
	p.bar_dma.flags = 0;
	p.bar_dma.iova = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), 0);
	CHECK_EQ(calls.bar_dma, 2);
	CHECK(!calls.bar_dma_map);
	/* A BAR the lender cannot map there is refused and counted. */
	bar_dma_ret = -ERANGE;
	p.bar_dma.flags = DL_BAR_DMA_F_MAP;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_BAR_DMA), 1);
	bar_dma_ret = -EOPNOTSUPP;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), -EOPNOTSUPP);
	CHECK_EQ(rej(DL_REJ_BAR_DMA), 1);
	bar_dma_ret = 0;
	/* P2P_DMA reaches the lender's p2p.c with what it names. */
	len = good(DL_MSG_P2P_DMA, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), 0);
	CHECK_EQ(calls.p2p_dma, 1);
	CHECK(calls.p2p_map);
	CHECK_EQ(calls.p2p_target, 9);
	CHECK_EQ(calls.p2p_iova, 0xfd000000);
	p.p2p.flags = 0;
	p.p2p.iova = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), 0);
	CHECK_EQ(calls.p2p_dma, 2);
	CHECK(!calls.p2p_map);
	/*
	 * A target on another lender: p2p_remote.c's, answered by its work
	 * later; its refusals answered now, a bad host counted.
	 */
	p.p2p.target_host = cpu_to_le32(3);
	remote_ret = 1;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), NO_ANSWER);
	CHECK_EQ(calls.p2p_remote, 1);
	CHECK_EQ(calls.p2p_dma, 2);
	remote_ret = -EBUSY;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EBUSY);
	CHECK_EQ(rej(DL_REJ_P2P_DMA), 0);
	remote_ret = -EINVAL;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_P2P_DMA), 1);
	CHECK_EQ(send(OTHER, DL_MSG_P2P_DMA, &p, len), -EBUSY);
	CHECK_EQ(calls.p2p_remote, 3);
	remote_ret = 0;
	p.p2p.target_host = 0;
	/* P2P_EXPORT: the holder's only, its fields to p2p_remote.c. */
	len = good(DL_MSG_P2P_EXPORT, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_EXPORT, &p, len), 0);
	CHECK_EQ(calls.p2p_export, 1);
	CHECK_EQ(calls.export_to, 3);
	p.export.reserved[1] = 1;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_EXPORT, &p, len), -EINVAL);
	p.export.reserved[1] = 0;
	p.export.reserved2 = cpu_to_le32(1);
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_EXPORT, &p, len), -EINVAL);
	p.export.reserved2 = 0;
	CHECK_EQ(send(OTHER, DL_MSG_P2P_EXPORT, &p, len), -EBUSY);
	CHECK_EQ(calls.p2p_export, 1);
	export_ret = -EINVAL;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_EXPORT, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_P2P_DMA), 2);
	export_ret = 0;
	malformed += 2;
	len = good(DL_MSG_P2P_DMA, &p);
	p2p_dma_ret = -ENOSPC;
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_P2P_DMA), 3);
	p2p_dma_ret = 0;
	len = good(DL_MSG_DEV_INFO, &p);
	p.ref.flags = cpu_to_le32(DL_DEV_REF_F_INFO_EXT);
	group_id = 0x00010109;
	CHECK_EQ(send(OTHER, DL_MSG_DEV_INFO, &p, len), 0);
	CHECK_EQ(ans.len, sizeof(struct dl_dev_info_full));
	/* The group of a function lent with its slot's others (group.c). */
	CHECK_EQ(le32_to_cpu(((struct dl_dev_info_full *)ans.data)->ext.group),
		 0x00010109);
	CHECK_EQ(grej(DL_REJ_MALFORMED), malformed);
}

/*
 * A dev_id that names no device, or one being removed, is ENODEV for
 * every type, from anyone, counted where no device is.
 */
static void test_forged_dev_id(void)
{
	union payload p;
	unsigned int i;
	size_t len;

	setup();
	hold(HOLDER);
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		len = good(types[i].type, &p);
		p.ref.dev_id = cpu_to_le32(DEV + 1);
		CHECK_EQ(send(HOLDER, types[i].type, &p, len), -ENODEV);
		p.ref.dev_id = cpu_to_le32(0xffffffff);
		CHECK_EQ(send(OTHER, types[i].type, &p, len), -ENODEV);
	}
	CHECK_EQ(grej(DL_REJ_NODEV), 2 * ARRAY_SIZE(types));

	/* Still in the table, but going: the same answer. */
	lent.dead = true;
	len = good(DL_MSG_CFG_READ, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_READ, &p, len), -ENODEV);
	CHECK_EQ(grej(DL_REJ_NODEV), 2 * ARRAY_SIZE(types) + 1);
	CHECK(nothing_done());
	CHECK_EQ(lent.ref.refcount, 1);	/* every lookup let go */
	CHECK_EQ(lents_freed, 0);
}

/*
 * Held by another host: EBUSY for everything but DEV_INFO (acquire too,
 * counted busy there); held by nobody: EINVAL (acquire first) for the
 * holder's requests, which are never served.
 */
static void test_not_the_holder(void)
{
	union payload p;
	unsigned int i, holder_only = 0;
	size_t len;

	setup();
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		if (!types[i].holder_only)
			continue;
		holder_only++;
		len = good(types[i].type, &p);
		CHECK_EQ(send(OTHER, types[i].type, &p, len), -EINVAL);
	}
	CHECK_EQ(rej(DL_REJ_NOT_HOLDER), holder_only);

	hold(HOLDER);
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		u16 t = types[i].type;

		/* Config reads are anyone's (a migration's destination). */
		if (t == DL_MSG_DEV_INFO || t == DL_MSG_CFG_READ ||
		    t == DL_MSG_CFG_READ_BLOCK)
			continue;
		len = good(t, &p);
		CHECK_EQ(send(OTHER, t, &p, len), -EBUSY);
	}
	/* The holder's requests, again. */
	CHECK_EQ(rej(DL_REJ_NOT_HOLDER), 2 * holder_only);
	CHECK_EQ(rej(DL_REJ_BUSY), 1);	/* the acquire */
	/* A takeover without a quiesce: refused by migrate.c. */
	CHECK_EQ(calls.mig_takeover, 1);
	CHECK(nothing_done());
	CHECK_EQ(lent.state, DL_LENT_BORROWED);
	CHECK_EQ(lent.borrower, HOLDER);
}

/*
 * The holder is the host id *and* incarnation that acquired, on that
 * fabric: the same host come back, or on another fabric, holds nothing.
 */
static void test_stale_holder(void)
{
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_BAR_READ, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), 0);
	CHECK_EQ(calls.bar_read, 1);

	peer_inc[HOLDER]++;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), -EBUSY);
	peer_inc[HOLDER]--;
	peer_up[HOLDER] = false;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), -EBUSY);
	peer_up[HOLDER] = true;
	lent.fab = other_fab;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), -EBUSY);
	lent.fab = fab;
	CHECK_EQ(rej(DL_REJ_NOT_HOLDER), 3);
	CHECK_EQ(calls.bar_read, 1);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), 0);
	CHECK_EQ(calls.bar_read, 2);
}

/*
 * A host the device is not lent to is told it does not exist, and does
 * not find it in DEV_LIST; a holder keeps it until it returns it.
 */
static void test_allowed_hosts(void)
{
	struct dl_dev_list *list = (struct dl_dev_list *)ans.data;
	union payload p;
	size_t len;

	setup();
	lent.allowed = BIT(HOLDER);
	len = good(DL_MSG_DEV_INFO, &p);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_INFO, &p, len), -ENODEV);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_ACQUIRE, &p, len), -ENODEV);
	CHECK_EQ(rej(DL_REJ_NOT_ALLOWED), 2);
	memset(&p, 0, sizeof(p));
	CHECK_EQ(send(OTHER, DL_MSG_DEV_LIST, &p, sizeof(p.ref)), 0);
	CHECK_EQ(le32_to_cpu(list->total), 0);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_LIST, &p, sizeof(p.ref)), 0);
	CHECK_EQ(le32_to_cpu(list->total), 1);
	CHECK_EQ(le32_to_cpu(list->ids[0]), DEV);

	/* Lent to nobody else any more, the holder keeps serving itself. */
	hold(OTHER);
	len = good(DL_MSG_CFG_WRITE, &p);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_WRITE, &p, len), 0);
	CHECK_EQ(calls.cfg_write, 1);
	/* Host 3 learns nothing, not even that it is held. */
	CHECK_EQ(send(3, DL_MSG_CFG_WRITE, &p, len), -ENODEV);
	CHECK_EQ(rej(DL_REJ_NOT_ALLOWED), 3);
	CHECK_EQ(rej(DL_REJ_NOT_HOLDER), 0);
}

/*
 * DEV_ACQUIRE: an available device goes to the sender (host and
 * incarnation), peers are told, the answer echoes the ref; held,
 * returning, failed, being unlent or fenced it is EBUSY, also for the
 * holder.
 */
static void test_acquire(void)
{
	struct dl_dev_ref *ref = (struct dl_dev_ref *)ans.data;
	union payload p;
	size_t len;

	setup();
	len = good(DL_MSG_DEV_ACQUIRE, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), 0);
	CHECK_EQ(ans.len, sizeof(*ref));
	CHECK_EQ(le32_to_cpu(ref->dev_id), DEV);
	CHECK_EQ(lent.state, DL_LENT_BORROWED);
	CHECK_EQ(lent.borrower, HOLDER);
	CHECK_EQ(lent.borrower_inc, peer_inc[HOLDER]);
	CHECK(lent.fab == fab);
	CHECK_EQ(cnt(DL_LCNT_ACQUIRES), 1);
	/* Shown to other devices' P2P maps (p2p.c), inside its group's lock. */
	CHECK_EQ(calls.holder_publish, 1);
	CHECK(calls.published_in_group);
	CHECK_EQ(calls.group_inc, peer_inc[HOLDER]);
	CHECK_EQ(calls.group_unlock, 1);
	CHECK_EQ(lent.changed_work.queued, 1);	/* DEV_CHANGED to peers */
	CHECK_EQ(lent.ref.refcount, 2);		/* held by that work */

	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), -EBUSY);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_ACQUIRE, &p, len), -EBUSY);
	CHECK_EQ(rej(DL_REJ_BUSY), 2);
	CHECK_EQ(lent.borrower, HOLDER);

	setup();
	lent.state = DL_LENT_FAILED;
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), -EBUSY);
	lent.state = DL_LENT_RETURNING;
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), -EBUSY);
	lent.state = DL_LENT_AVAILABLE;
	lent.unlending = true;
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), -EBUSY);
	CHECK_EQ(rej(DL_REJ_BUSY), 3);
	CHECK_EQ(cnt(DL_LCNT_ACQUIRES), 0);
	CHECK_EQ(lent.borrower, DL_NO_HOST);
	/* Another lender may still reach its BARs (p2p_remote.c's fence). */
	lent.unlending = false;
	fence_ret = -EBUSY;
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), -EBUSY);
	CHECK_EQ(lent.state, DL_LENT_AVAILABLE);
	fence_ret = 0;

	/* From a host whose link is down (as the fabric sees it): invalid. */
	lent.unlending = false;
	peer_up[HOLDER] = false;
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), -EINVAL);
	CHECK_EQ(lent.state, DL_LENT_AVAILABLE);
}

/*
 * Config reads: anyone while nobody holds the device, then the holder
 * alone; offsets, sizes and blocks inside config space, aligned.
 */
static void test_cfg_read(void)
{
	struct dl_cfg_access *a = (struct dl_cfg_access *)ans.data;
	struct dl_cfg_block *blk = (struct dl_cfg_block *)ans.data;
	union payload p;
	size_t len;

	setup();
	len = good(DL_MSG_CFG_READ, &p);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ, &p, len), 0);
	CHECK_EQ(le32_to_cpu(a->value), 0xc0de0010);
	CHECK_EQ(cnt(DL_LCNT_CFG_READS), 1);
	len = good(DL_MSG_CFG_READ_BLOCK, &p);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ_BLOCK, &p, len), 0);
	CHECK_EQ(le16_to_cpu(blk->len), 64);
	CHECK_EQ(get_unaligned_le32(&blk->data[60]), 0xc0de003c);
	CHECK_EQ(cnt(DL_LCNT_CFG_READS), 2);

	/* Ranges: size 3, misaligned, past the end, reserved byte. */
	len = good(DL_MSG_CFG_READ, &p);
	p.cfg.size = 3;
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ, &p, len), -EINVAL);
	p.cfg.size = 2;
	p.cfg.offset = cpu_to_le16(0x11);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ, &p, len), -EINVAL);
	p.cfg.size = 4;
	p.cfg.offset = cpu_to_le16(256);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ, &p, len), -EINVAL);
	p.cfg.offset = cpu_to_le16(0);
	p.cfg.reserved = 1;
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ, &p, len), -EINVAL);
	len = good(DL_MSG_CFG_READ_BLOCK, &p);
	p.block.offset = cpu_to_le16(2);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ_BLOCK, &p, len), -EINVAL);
	p.block.offset = cpu_to_le16(0);
	p.block.len = 0;
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ_BLOCK, &p, len), -EINVAL);
	p.block.len = cpu_to_le16(DL_CFG_BLOCK_MAX + 4);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ_BLOCK, &p, len), -EINVAL);
	p.block.offset = cpu_to_le16(256 - 60);
	p.block.len = cpu_to_le16(64);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ_BLOCK, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_CFG_RANGE), 8);
	CHECK_EQ(cnt(DL_LCNT_CFG_READS), 2);
	/* Up to the last dword, but not past it. */
	p.block.offset = cpu_to_le16(256 - 64);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ_BLOCK, &p, len), 0);
	len = good(DL_MSG_CFG_READ, &p);
	p.cfg.offset = cpu_to_le16(252);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ, &p, len), 0);
	CHECK_EQ(cnt(DL_LCNT_CFG_READS), 4);

	/*
	 * Held: the holder reads, and so does another host it is lent to (a
	 * migration's destination reads before it takes the device over).
	 */
	hold(HOLDER);
	len = good(DL_MSG_CFG_READ, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_READ, &p, len), 0);
	CHECK_EQ(send(OTHER, DL_MSG_CFG_READ, &p, len), 0);
	CHECK_EQ(rej(DL_REJ_NOT_HOLDER), 0);
	CHECK_EQ(calls.cfg_read, 1 + 16 + 16 + 1 + 1 + 1);
}

/*
 * Config writes: checked like reads; a filtered write still succeeds
 * (counted), one that asks for a reset goes to the slow work unanswered,
 * as DEV_RESET and DEV_RELEASE do.
 */
static void test_cfg_write_and_slow(void)
{
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_CFG_WRITE, &p);
	p.cfg.size = 1;
	p.cfg.offset = cpu_to_le16(255);
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_WRITE, &p, len), 0);
	p.cfg.size = 2;
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_WRITE, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_CFG_RANGE), 1);
	CHECK_EQ(calls.cfg_write, 1);
	cfg_write_ret = DL_CFG_WRITE_FILTERED;
	len = good(DL_MSG_CFG_WRITE, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_WRITE, &p, len), 0);
	CHECK_EQ(cnt(DL_LCNT_CFG_WRITES), 2);
	CHECK_EQ(cnt(DL_LCNT_CFG_FILTERED), 1);
	cfg_write_ret = -EIO;
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_WRITE, &p, len), -EIO);

	cfg_write_ret = DL_CFG_WRITE_RESET;
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_WRITE, &p, len), NO_ANSWER);
	CHECK_EQ(calls.slow_queue, 1);
	CHECK(lent.slow_busy & BIT(DL_LENT_SLOW_BUSY));
	CHECK_EQ(lent.slow_msg.type, DL_MSG_CFG_WRITE);
	CHECK_EQ(lent.slow_msg.peer, HOLDER);
	CHECK_EQ(lent.slow_msg.req_id, 42);
	CHECK(!lent.slow_msg.data && !lent.slow_msg.len);
	CHECK(lent.slow_fab == fab);

	/* Meanwhile the device takes no holder request: busy, counted. */
	len = good(DL_MSG_BAR_READ, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), -EAGAIN);
	len = good(DL_MSG_DEV_RESET, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_RESET, &p, len), -EAGAIN);
	CHECK_EQ(rej(DL_REJ_BUSY), 2);
	CHECK_EQ(calls.slow_queue, 1);
	CHECK_EQ(calls.bar_read, 0);
	/* ... but anyone may still ask what it is. */
	len = good(DL_MSG_DEV_INFO, &p);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_INFO, &p, len), 0);

	/* DEV_RESET and DEV_RELEASE: queued, answered by the slow work. */
	lent.slow_busy = 0;
	len = good(DL_MSG_DEV_RESET, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_RESET, &p, len), NO_ANSWER);
	CHECK_EQ(lent.slow_msg.type, DL_MSG_DEV_RESET);
	lent.slow_busy = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_RELEASE, &p, len), NO_ANSWER);
	CHECK_EQ(lent.slow_msg.type, DL_MSG_DEV_RELEASE);
	CHECK_EQ(calls.slow_queue, 3);
	CHECK_EQ(lent.state, DL_LENT_BORROWED);	/* until the slow work */
}

/*
 * While a reset or take-back holds the device's locks, the receive work
 * does not wait: EAGAIN at once, for anyone; the lookup lets go.
 */
static void test_locked_by_slow_work(void)
{
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	dev_locked = true;
	atomic_inc(&lent.slow_holds);
	len = good(DL_MSG_DEV_INFO, &p);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_INFO, &p, len), -EAGAIN);
	len = good(DL_MSG_BAR_WRITE, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WRITE, &p, len), -EAGAIN);
	CHECK_EQ(rej(DL_REJ_BUSY), 2);
	CHECK_EQ(lent.ref.refcount, 1);
	CHECK(nothing_done());

	/* Held by someone else briefly (no slow hold): answered once free. */
	atomic_dec(&lent.slow_holds);
	dev_locked = false;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WRITE, &p, len), 0);
	CHECK_EQ(calls.bar_write, 1);
}

/*
 * BAR accesses: bar.c's verdict is the answer, counted under its reason;
 * served, each access ends a relayed INTx. A posted BAR write is answered
 * only if the sender asked.
 */
static void test_bar_access(void)
{
	struct dl_bar_access *a = (struct dl_bar_access *)ans.data;
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_BAR_READ, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), 0);
	CHECK_EQ(le64_to_cpu(a->value), 0x1122334455667788ULL);
	CHECK_EQ(cnt(DL_LCNT_BAR_READS), 1);
	CHECK_EQ(calls.intx_access, 1);

	bar_err = -EINVAL;
	bar_why = DL_REJ_BAR_MSIX;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), -EINVAL);
	CHECK_EQ(send_as(HOLDER, DL_MSG_BAR_WRITE, &p, len, true), NO_ANSWER);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WRITE, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_BAR_MSIX), 3);
	bar_err = -EIO;
	bar_why = DL_REJ_BAR_DECODE;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_READ, &p, len), -EIO);
	CHECK_EQ(rej(DL_REJ_BAR_DECODE), 1);
	CHECK_EQ(calls.bar_read, 1);
	CHECK_EQ(calls.bar_write, 0);
	CHECK_EQ(calls.intx_access, 1);

	bar_err = 0;
	CHECK_EQ(send_as(HOLDER, DL_MSG_BAR_WRITE, &p, len, true), NO_ANSWER);
	CHECK_EQ(calls.bar_write, 1);
	CHECK_EQ(cnt(DL_LCNT_BAR_WRITES), 1);
	CHECK_EQ(calls.intx_access, 2);
}

/* DMA_UNMAP: everything, or a page-aligned range; flags known. */
static void test_dma_unmap(void)
{
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_DMA_UNMAP, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_UNMAP, &p, len), 0);
	CHECK_EQ(calls.dma_unmap_all, 1);
	p.unmap.flags = cpu_to_le32(2);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_UNMAP, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_MALFORMED), 1);
	p.unmap.flags = 0;
	p.unmap.iova = cpu_to_le64(0x1000);
	p.unmap.len = cpu_to_le64(0x800);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_UNMAP, &p, len), -EINVAL);
	p.unmap.iova = cpu_to_le64(-4096ULL);
	p.unmap.len = cpu_to_le64(0x2000);	/* wraps */
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_UNMAP, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_DMA_RANGE), 2);
	CHECK_EQ(calls.dma_unmap, 0);
	p.unmap.iova = cpu_to_le64(0x1000);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_UNMAP, &p, len), 0);
	CHECK_EQ(calls.dma_unmap, 1);
	CHECK_EQ(cnt(DL_LCNT_DMA_UNMAPS), 2);
}

/*
 * IRQ_SET, IRQ_MASK and IRQ_DIRECT refused by irq.c: its status, counted
 * as irq.
 */
static void test_irq_refusals(void)
{
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	irq_ret = -EINVAL;
	len = good(DL_MSG_IRQ_SET, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_SET, &p, len), -EINVAL);
	irq_ret = -ENOSPC;
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_SET, &p, len), -ENOSPC);
	mask_ret = -EINVAL;
	len = good(DL_MSG_IRQ_MASK, &p);
	CHECK_EQ(send_as(HOLDER, DL_MSG_IRQ_MASK, &p, len, true), NO_ANSWER);
	CHECK_EQ(rej(DL_REJ_IRQ), 3);
	CHECK_EQ(cnt(DL_LCNT_IRQ_SETS), 0);
	/* A direct vector the backend cannot make is a no, not a refusal. */
	len = good(DL_MSG_IRQ_DIRECT, &p);
	direct_ret = -EOPNOTSUPP;
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_DIRECT, &p, len), -EOPNOTSUPP);
	CHECK_EQ(rej(DL_REJ_IRQ), 3);
	direct_ret = -EINVAL;
	CHECK_EQ(send(HOLDER, DL_MSG_IRQ_DIRECT, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_IRQ), 4);
}

/*
 * BAR_WINDOW: the holder is told the window; a BAR the backend cannot
 * show (or no room) is a no that leaves it relayed, not a refusal; a BAR
 * the device does not have is refused.
 */
static void test_bar_window(void)
{
	const struct dl_bar_window *w = (const void *)ans.data;
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_BAR_WINDOW, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WINDOW, &p, len), 0);
	CHECK_EQ(ans.len, sizeof(*w));
	CHECK_EQ(w->bar, 2);
	CHECK_EQ(le32_to_cpu(w->dev_id), DEV);
	CHECK_EQ(le64_to_cpu(w->token), 7);
	CHECK_EQ(le64_to_cpu(w->len), 8192);
	CHECK_EQ(le64_to_cpu(w->offset), 0);
	window_ret = -ENOSPC;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WINDOW, &p, len), -EOPNOTSUPP);
	CHECK_EQ(rej(DL_REJ_BAR_RANGE), 0);
	window_ret = -EINVAL;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_WINDOW, &p, len), -EINVAL);
	CHECK_EQ(rej(DL_REJ_BAR_RANGE), 1);
	CHECK_EQ(calls.bar_window, 3);
}

/* DEV_LIST: from a start id, at most DL_DEV_LIST_MAX, total of all. */
static void test_dev_list(void)
{
	struct dl_dev_list *list = (struct dl_dev_list *)ans.data;
	static struct dl_lent more[40];
	union payload p;
	unsigned int i;

	setup();
	for (i = 0; i < ARRAY_SIZE(more); i++) {
		kref_init(&more[i].ref);
		more[i].allowed = DL_ALL_HOSTS;
		xa_store(&dl_lender.devs, 10 + i, &more[i], GFP_KERNEL);
	}
	memset(&p, 0, sizeof(p));
	CHECK_EQ(send(OTHER, DL_MSG_DEV_LIST, &p, sizeof(p.ref)), 0);
	CHECK_EQ(ans.len, sizeof(*list));
	CHECK_EQ(le32_to_cpu(list->total), 41);
	CHECK_EQ(le32_to_cpu(list->count), DL_DEV_LIST_MAX);
	CHECK_EQ(le32_to_cpu(list->ids[0]), DEV);
	p.ref.dev_id = cpu_to_le32(10 + 31);
	CHECK_EQ(send(OTHER, DL_MSG_DEV_LIST, &p, sizeof(p.ref)), 0);
	CHECK_EQ(le32_to_cpu(list->count), 9);
	CHECK_EQ(le32_to_cpu(list->ids[0]), 10 + 31);
	CHECK_EQ(le32_to_cpu(list->ids[8]), 10 + 39);
	xa_destroy(&dl_lender.devs);
}

/*
 * include/dl_bar_dma_rules.h: a BAR's own DMA reaches page-aligned BARs at
 * page-aligned IOVAs, all of the BAR's pages but the MSI-X table's and
 * PBA's, a BAR smaller than a page with its whole page.
 */
static void test_bar_dma_rules(void)
{
	struct dl_bar_dma_span skip[2], p[DL_BAR_DMA_MAX_PIECES];

	CHECK_EQ(dl_bar_dma_check(0xfe000000, 0x400, 0xc0000000), 0);
	CHECK_EQ(dl_bar_dma_check(0xfe000000, 0x400, 0xc0000400), -EINVAL);
	CHECK_EQ(dl_bar_dma_check(0xfe000400, 0x400, 0xc0000000), -EOPNOTSUPP);
	CHECK_EQ(dl_bar_dma_check(0xfe000000, 0x2000, ~0ULL - 0xfff), -EINVAL);
	CHECK_EQ(dl_bar_dma_check(0xfe000000, 0, 0xc0000000), -EINVAL);

	/* Nothing skipped: the BAR up to its last page. */
	CHECK_EQ(dl_bar_dma_pieces(0x400, NULL, 0, p), 1);
	CHECK_EQ(p[0].start, 0);
	CHECK_EQ(p[0].end, 0x1000);
	/* The table in the middle, the PBA at the end, given in reverse. */
	skip[0] = (struct dl_bar_dma_span){ 0x7000, 0x8000 };
	skip[1] = (struct dl_bar_dma_span){ 0x2000, 0x3000 };
	CHECK_EQ(dl_bar_dma_pieces(0x8000, skip, 2, p), 2);
	CHECK_EQ(p[0].start, 0);
	CHECK_EQ(p[0].end, 0x2000);
	CHECK_EQ(p[1].start, 0x3000);
	CHECK_EQ(p[1].end, 0x7000);
	/* Both in one page; the table at the start. */
	skip[0] = (struct dl_bar_dma_span){ 0, 0x1000 };
	skip[1] = (struct dl_bar_dma_span){ 0, 0x1000 };
	CHECK_EQ(dl_bar_dma_pieces(0x4000, skip, 2, p), 1);
	CHECK_EQ(p[0].start, 0x1000);
	CHECK_EQ(p[0].end, 0x4000);
	/* Three pieces. */
	skip[0] = (struct dl_bar_dma_span){ 0x1000, 0x2000 };
	skip[1] = (struct dl_bar_dma_span){ 0x3000, 0x4000 };
	CHECK_EQ(dl_bar_dma_pieces(0x5000, skip, 2, p), 3);
	CHECK_EQ(p[1].start, 0x2000);
	CHECK_EQ(p[1].end, 0x3000);
	CHECK_EQ(p[2].start, 0x4000);
	CHECK_EQ(p[2].end, 0x5000);
	/* A span past the end takes the rest. */
	skip[1] = (struct dl_bar_dma_span){ 0x3000, 0x9000 };
	CHECK_EQ(dl_bar_dma_pieces(0x5000, skip, 2, p), 2);
	CHECK_EQ(p[1].end, 0x3000);
	/* All of it skipped: nothing. */
	skip[0] = (struct dl_bar_dma_span){ 0, 0x4000 };
	CHECK_EQ(dl_bar_dma_pieces(0x4000, skip, 1, p), 0);
}

/*
 * DEV_ACQUIRE of a member of a lent IOMMU group that group.c refuses
 * (another member held by someone else, a bus reset due): EBUSY, counted
 * as group, the device left as it was, nobody published.
 */
static void test_acquire_refused_for_group(void)
{
	union payload p;
	size_t len;

	setup();
	group_ret = -EBUSY;
	len = good(DL_MSG_DEV_ACQUIRE, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), -EBUSY);
	CHECK_EQ(rej(DL_REJ_GROUP), 1);
	CHECK_EQ(lent.state, DL_LENT_AVAILABLE);
	CHECK_EQ(lent.borrower, DL_NO_HOST);
	CHECK_EQ(calls.holder_publish, 0);
	CHECK_EQ(calls.group_unlock, 0);
	CHECK_EQ(cnt(DL_LCNT_ACQUIRES), 0);
	group_ret = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_ACQUIRE, &p, len), 0);
	CHECK_EQ(calls.group_lock, 1);
	CHECK_EQ(calls.group_unlock, 1);
}

/*
 * A member of a lent group (group.c): its holder's maps and unmaps go to
 * dma.c as any device's (which shares them with the other members); its
 * BAR and P2P maps are not made in the group's one domain yet (EOPNOTSUPP:
 * the DMA faults), their unmaps answered.
 */
static void test_group_member_maps(void)
{
	static char grp_storage;
	union payload p;
	size_t len;

	setup();
	lent.grp = (struct dl_lent_grp *)&grp_storage;
	hold(HOLDER);
	len = good(DL_MSG_DMA_MAP, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_DMA_MAP, &p, len), 0);
	CHECK_EQ(calls.dma_map, 1);
	len = good(DL_MSG_BAR_DMA, &p);
	CHECK(p.bar_dma.flags & DL_BAR_DMA_F_MAP);
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), -EOPNOTSUPP);
	p.bar_dma.flags = 0;
	p.bar_dma.iova = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_BAR_DMA, &p, len), 0);
	CHECK_EQ(calls.bar_dma, 0);
	len = good(DL_MSG_P2P_DMA, &p);
	CHECK(p.p2p.flags & DL_P2P_DMA_F_MAP);
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EOPNOTSUPP);
	p.p2p.target_host = cpu_to_le32(OTHER);
	CHECK_EQ(send(HOLDER, DL_MSG_P2P_DMA, &p, len), -EOPNOTSUPP);
	CHECK_EQ(calls.p2p_dma, 0);
	CHECK_EQ(calls.p2p_remote, 0);
	CHECK_EQ(rej(DL_REJ_BAR_DMA) + rej(DL_REJ_P2P_DMA), 0);
}

/*
 * Live migration: a quiesce is the holder's, checked (settle and timeout
 * bounds) and done by the slow work; while the device is quiesced the
 * holder's config writes and resets are refused (either could turn bus
 * mastering back on), resume is the holder's, and a takeover is anyone's
 * to ask, migrate.c deciding.
 */
static void test_migration(void)
{
	union payload p;
	size_t len;

	setup();
	hold(HOLDER);
	len = good(DL_MSG_MIG_QUIESCE, &p);
	CHECK_EQ(send(OTHER, DL_MSG_MIG_QUIESCE, &p, len), -EBUSY);
	p.quiesce.settle_ms = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_MIG_QUIESCE, &p, len), -EINVAL);
	p.quiesce.settle_ms = cpu_to_le32(50);
	p.quiesce.timeout_ms = cpu_to_le32(DL_MIG_TIMEOUT_MAX_MS + 1);
	CHECK_EQ(send(HOLDER, DL_MSG_MIG_QUIESCE, &p, len), -EINVAL);
	CHECK_EQ(grej(DL_REJ_MALFORMED), 2);
	CHECK(nothing_done());
	len = good(DL_MSG_MIG_QUIESCE, &p);
	lent.slow_busy = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_MIG_QUIESCE, &p, len), NO_ANSWER);
	CHECK_EQ(calls.slow_queue, 1);
	CHECK_EQ(le32_to_cpu(lent.mig_req.settle_ms), 50);
	CHECK_EQ(le32_to_cpu(lent.mig_req.timeout_ms), 3000);
	lent.slow_busy = 0;

	/* Quiesced: no config write, no reset; reads and BARs go on. */
	lent.mig_quiesced = true;
	lent.mig_ticket = 0x77;
	len = good(DL_MSG_CFG_WRITE, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_WRITE, &p, len), -EBUSY);
	CHECK_EQ(calls.cfg_write, 0);
	len = good(DL_MSG_DEV_RESET, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_DEV_RESET, &p, len), -EBUSY);
	CHECK_EQ(calls.slow_queue, 1);
	len = good(DL_MSG_CFG_READ, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_READ, &p, len), 0);

	/* A takeover by another host, with the ticket: migrate.c's call. */
	len = good(DL_MSG_MIG_TAKEOVER, &p);
	CHECK_EQ(send(OTHER, DL_MSG_MIG_TAKEOVER, &p, len), 0);
	CHECK_EQ(calls.mig_takeover, 1);
	CHECK_EQ(ans.len, sizeof(struct dl_dev_ref));
	CHECK_EQ(get_unaligned((__le32 *)ans.data), cpu_to_le32(DEV));
	p.takeover.ticket = cpu_to_le64(0x78);
	CHECK_EQ(send(OTHER, DL_MSG_MIG_TAKEOVER, &p, len), -EBUSY);

	/* Resume: the holder's only; then writes go through again. */
	len = good(DL_MSG_MIG_RESUME, &p);
	CHECK_EQ(send(OTHER, DL_MSG_MIG_RESUME, &p, len), -EBUSY);
	p.ref.flags = cpu_to_le32(1);
	CHECK_EQ(send(HOLDER, DL_MSG_MIG_RESUME, &p, len), -EINVAL);
	p.ref.flags = 0;
	CHECK_EQ(send(HOLDER, DL_MSG_MIG_RESUME, &p, len), 0);
	CHECK_EQ(calls.mig_resume, 1);
	len = good(DL_MSG_CFG_WRITE, &p);
	CHECK_EQ(send(HOLDER, DL_MSG_CFG_WRITE, &p, len), 0);
	CHECK_EQ(calls.cfg_write, 1);
}

static const struct unit_test tests[] = {
	{ "BAR_DMA rules: alignment, the MSI-X table and PBA left out",
	  test_bar_dma_rules },
	{ "exactly the lender's message types have handlers", test_registered_types },
	{ "a payload of the wrong length is malformed, for every type", test_bad_lengths },
	{ "DMA_MAP's length is its header and count ranges", test_dma_map_lengths },
	{ "reserved fields and unknown flags are malformed", test_reserved_fields },
	{ "an unknown or dying dev_id is ENODEV for every type", test_forged_dev_id },
	{ "not the holder: EBUSY if held, EINVAL if not", test_not_the_holder },
	{ "a new incarnation or another fabric holds nothing", test_stale_holder },
	{ "hosts it is not lent to see nothing; the holder keeps it", test_allowed_hosts },
	{ "DEV_ACQUIRE takes an available device only", test_acquire },
	{ "DEV_ACQUIRE of a group member group.c refuses", test_acquire_refused_for_group },
	{ "a group member maps RAM, not BARs, for now", test_group_member_maps },
	{ "config reads: anyone it is lent to, ranges checked", test_cfg_read },
	{ "migration: quiesce waits in the slow work; while quiesced no config write or reset; resume and takeover",
	  test_migration },
	{ "config writes; resets and releases go to the slow work", test_cfg_write_and_slow },
	{ "busy while a reset holds the locks, without waiting", test_locked_by_slow_work },
	{ "BAR accesses answered with bar.c's verdict", test_bar_access },
	{ "DMA_UNMAP: all, or an aligned range", test_dma_unmap },
	{ "IRQ_SET and IRQ_MASK refusals are counted", test_irq_refusals },
	{ "BAR_WINDOW answers the holder; a backend's no is not a refusal",
	  test_bar_window },
	{ "DEV_LIST pages through the allowed devices", test_dev_list },
};

UNIT_SUITE(lender_msg_suite, "lender/msg.c", tests);
