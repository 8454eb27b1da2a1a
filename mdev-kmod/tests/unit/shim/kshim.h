/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Just enough of the kernel's API, in userspace, to compile devlend's pure
 * logic for the unit tests: types, byte order, helpers, and empty or fake
 * versions of locks, lists, allocation, work, logging. Every <linux/...>
 * header a compiled file includes is a one-line file in shim/linux/ that
 * includes this one. Nothing here is meant to be faithful beyond what the
 * tested code needs; fakes the tests control (config space, VFIO pinning,
 * the fabric) are declared here and defined by the tests.
 */
#ifndef KSHIM_H
#define KSHIM_H

#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <linux/pci_regs.h>	/* the uapi header: the same constants */

/* Types, as the kernel's on x86_64 (__bitwise is for sparse only). */
#define __bitwise
typedef unsigned char u8, __u8;
typedef unsigned short u16, __u16;
typedef unsigned int u32, __u32;
typedef unsigned long long u64, __u64;
typedef signed char s8, __s8;
typedef short s16, __s16;
typedef int s32, __s32;
typedef long long s64, __s64;
typedef u16 __bitwise __le16, __be16;
typedef u32 __bitwise __le32, __be32;
typedef u64 __bitwise __le64, __be64;
typedef u64 phys_addr_t, resource_size_t, dma_addr_t;
typedef unsigned int __bitwise gfp_t;
typedef s64 ktime_t;
typedef struct { int counter; } atomic_t;
#define ATOMIC_INIT(n)		{ (n) }
typedef struct { s64 counter; } atomic64_t;

/* Annotations. */
#define __user
#define __iomem
#define __force
#define __rcu
#define __must_check
#define __printf(a, b)	__attribute__((format(printf, a, b)))
#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)

/* Byte order. */
#define cpu_to_le16(x)	((__le16)htole16(x))
#define cpu_to_le32(x)	((__le32)htole32(x))
#define cpu_to_le64(x)	((__le64)htole64(x))
#define le16_to_cpu(x)	((u16)le16toh(x))
#define le32_to_cpu(x)	((u32)le32toh(x))
#define le64_to_cpu(x)	((u64)le64toh(x))
#define lower_32_bits(n)	((u32)((n) & 0xffffffff))
#define upper_32_bits(n)	((u32)(((u64)(n)) >> 32))

/* Helpers. */
#define U32_MAX		((u32)~0U)
#define U64_MAX		((u64)~0ULL)
#define BIT(n)		(1UL << (n))
/* Bits of one word only, which is all devlend's masks use. */
#define for_each_set_bit(bit, addr, size)				\
	for ((bit) = 0; (bit) < (size) && (bit) < 64; (bit)++)		\
		if (!(*(addr) & (1UL << (bit)))) {} else
#define BIT_ULL(n)	(1ULL << (n))
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
/*
 * a and b evaluated once each, and compared in the type of a + b, as the
 * kernel's checked min() allows.
 */
#define __kshim_cmp(a, b, op) ({			\
	typeof(a) _a = (a);				\
	typeof(b) _b = (b);				\
	typeof(_a + _b) _x = _a;			\
	typeof(_a + _b) _y = _b;			\
							\
	_x op _y ? _x : _y;				\
})
#define min(a, b)	__kshim_cmp(a, b, <)
#define max(a, b)	__kshim_cmp(a, b, >)
#define min_t(t, a, b)	({ t _a = (a), _b = (b); _a < _b ? _a : _b; })
#define max_t(t, a, b)	({ t _a = (a), _b = (b); _a > _b ? _a : _b; })
#define ALIGN(x, a) \
	({ __auto_type _mask = (typeof(x))(a) - 1; ((x) + _mask) & ~_mask; })
#define ALIGN_DOWN(x, a)	((x) & ~((typeof(x))(a) - 1))
#define round_up(x, y)		ALIGN(x, y)
#define round_down(x, y)	ALIGN_DOWN(x, y)
#define IS_ALIGNED(x, a)	(((x) & ((typeof(x))(a) - 1)) == 0)
#define container_of(p, type, member) \
	((type *)((char *)(p) - offsetof(type, member)))
#define sizeof_field(t, m)	sizeof(((t *)0)->m)
#define struct_size(p, member, n) \
	(sizeof(*(p)) + sizeof((p)->member[0]) * (size_t)(n))
#define FIELD_GET(mask, reg) \
	((typeof(mask))(((reg) & (mask)) >> __builtin_ctzll(mask)))
#define FIELD_PREP(mask, val) \
	((typeof(mask))(((typeof(mask))(val) << __builtin_ctzll(mask)) & (mask)))
#define SZ_2M		0x00200000
#define SZ_4G		0x100000000ULL
#define PAGE_SHIFT	12
#define PAGE_SIZE	BIT(PAGE_SHIFT)
#define PAGE_ALIGNED(addr)	IS_ALIGNED((unsigned long)(addr), PAGE_SIZE)
#define PAGE_ALIGN(addr)	ALIGN(addr, PAGE_SIZE)
#define check_add_overflow(a, b, d)	__builtin_add_overflow(a, b, d)
#define EXPORT_SYMBOL_GPL(sym)	extern int kshim_exported_##sym

/*
 * Memory ordering: the tests are single-threaded, but the accesses are the
 * compiler's atomics all the same, so it can neither tear, merge nor drop
 * them, as with the kernel's macros.
 */
#define READ_ONCE(x)		__atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v)	__atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
/* Acquire: no later access moves before the load (pairs with the release). */
#define smp_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
/* Release: no earlier access moves after the store (pairs with the acquire). */
#define smp_store_release(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELEASE)
/* Full barrier, as the kernel's mb(). */
#define mb()			__atomic_thread_fence(__ATOMIC_SEQ_CST)
/* The kernel's wmb() orders write-combining stores: a full barrier here. */
#define wmb()			__atomic_thread_fence(__ATOMIC_SEQ_CST)
#define smp_mb__after_atomic()	__atomic_thread_fence(__ATOMIC_SEQ_CST)

/* Locks, all empty: nothing runs concurrently here. */
struct mutex { int unused; };
typedef struct { int unused; } spinlock_t;
struct rw_semaphore { int unused; };
struct srcu_struct { int unused; };
struct lockdep_map;
#define lockdep_assert_held(l)		((void)(l))
#define device_lock_assert(d)		((void)(d))
#define might_sleep()			do { } while (0)
#define cond_resched()			do { } while (0)
static inline void mutex_lock(struct mutex *m) { (void)m; }
static inline int mutex_trylock(struct mutex *m) { (void)m; return 1; }
#ifndef mutex_init
#define mutex_init(m)			((void)(m))
#endif
static inline void mutex_unlock(struct mutex *m) { (void)m; }
static inline void spin_lock(spinlock_t *l) { (void)l; }
static inline void spin_unlock(spinlock_t *l) { (void)l; }
/* Fails while a test says the lock is taken elsewhere. */
extern bool kshim_lock_taken;
static inline int spin_trylock(spinlock_t *l)
{
	(void)l;
	return !kshim_lock_taken;
}

#define spin_lock_irqsave(l, f)		((void)(l), (f) = 0)
#define spin_unlock_irqrestore(l, f)	((void)(l), (void)(f))
static inline int srcu_read_lock(struct srcu_struct *s) { (void)s; return 0; }
static inline void srcu_read_unlock(struct srcu_struct *s, int i)
{
	(void)s;
	(void)i;
}

/* Atomics. */
#define atomic_read(a)		((a)->counter)
#define atomic_read_acquire(a)	__atomic_load_n(&(a)->counter, __ATOMIC_ACQUIRE)
#define atomic64_read(a)	((a)->counter)
#define atomic64_inc(a)		((void)((a)->counter++))
#define atomic64_add(n, a)	((void)((a)->counter += (n)))
#define atomic_inc(a)		((void)((a)->counter++))
#define atomic_dec(a)		((void)((a)->counter--))

/* Lists: the kernel's doubly linked list. */
struct rcu_head {
	struct rcu_head *next;
	void (*func)(struct rcu_head *head);
};

struct list_head { struct list_head *next, *prev; };
static inline void INIT_LIST_HEAD(struct list_head *l)
{
	l->next = l;
	l->prev = l;
}

static inline void __list_add(struct list_head *n, struct list_head *prev,
			      struct list_head *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

static inline void list_add(struct list_head *n, struct list_head *head)
{
	__list_add(n, head, head->next);
}

static inline void list_add_tail(struct list_head *n, struct list_head *head)
{
	__list_add(n, head->prev, head);
}

static inline void list_del(struct list_head *e)
{
	e->next->prev = e->prev;
	e->prev->next = e->next;
	e->next = NULL;
	e->prev = NULL;
}

static inline bool list_empty(const struct list_head *h)
{
	return h->next == h;
}

#define list_entry(p, type, member)	container_of(p, type, member)
#define list_first_entry(h, type, member) list_entry((h)->next, type, member)
#define list_last_entry(h, type, member) list_entry((h)->prev, type, member)
/* The entry after e, whose list_head is off bytes into it. */
static inline void *__kshim_next_entry(void *e, size_t off)
{
	struct list_head *l = (struct list_head *)((char *)e + off);

	return (char *)l->next - off;
}

#define list_next_entry(p, member) ({					\
	typeof(p) _p = (p);						\
									\
	(typeof(p))__kshim_next_entry(_p, offsetof(typeof(*_p), member)); \
})
#define list_for_each_entry(p, h, member) \
	for (p = list_first_entry(h, typeof(*p), member); \
	     &p->member != (h); p = list_next_entry(p, member))
#define list_for_each_entry_safe(p, n, h, member) \
	for (p = list_first_entry(h, typeof(*p), member), \
	     n = list_next_entry(p, member); &p->member != (h); \
	     p = n, n = list_next_entry(n, member))

/* Allocation. */
#define GFP_KERNEL	0x1u
#define __GFP_NOFAIL	0x2u
static inline void *kmalloc(size_t n, gfp_t f) { (void)f; return malloc(n); }
static inline void *kzalloc(size_t n, gfp_t f) { (void)f; return calloc(1, n); }
static inline void *kcalloc(size_t n, size_t s, gfp_t f)
{
	(void)f;
	return calloc(n, s);
}

#define kvcalloc	kcalloc
#define kfree		free
#define kvfree		free

/* Time: jiffies advance only when the code sleeps. */
#define HZ		1000
extern unsigned long jiffies;
#define msecs_to_jiffies(ms)	((unsigned long)(ms))
#define jiffies_to_msecs(j)	((unsigned int)(j))
#define time_after(a, b)	((long)((b) - (a)) < 0)
#define time_before(a, b)	time_after(b, a)
static inline void usleep_range(unsigned long lo, unsigned long hi)
{
	(void)hi;
	jiffies += lo / 1000 + 1;
}

static inline void msleep(unsigned int ms)
{
	jiffies += ms;
}

/* Nanoseconds: the jiffies, so that durations are whole milliseconds. */
static inline u64 ktime_get_ns(void)
{
	return (u64)jiffies * 1000000;
}

/* Work, completions, timers, wait queues: the fields only. */
struct work_struct { int queued; };
#define DECLARE_WORK(n, f)	struct work_struct n = { 0 }
static inline bool flush_work(struct work_struct *w)
{
	(void)w;
	return false;
}
struct delayed_work { struct work_struct work; unsigned long delay; };
struct workqueue_struct;
struct timer_list { unsigned long expires; int armed; };
#define from_timer(var, t, field)	container_of(t, typeof(*(var)), field)
static inline int mod_timer(struct timer_list *t, unsigned long expires)
{
	t->expires = expires;
	t->armed++;
	return 0;
}

struct completion { int done; };
typedef struct { int unused; } wait_queue_head_t;
struct notifier_block;
extern struct workqueue_struct *system_unbound_wq;
#define to_delayed_work(w)	container_of(w, struct delayed_work, work)
static inline bool queue_work(struct workqueue_struct *wq,
			      struct work_struct *w)
{
	(void)wq;
	w->queued++;
	return true;
}

static inline bool mod_delayed_work(struct workqueue_struct *wq,
				    struct delayed_work *dw,
				    unsigned long delay)
{
	(void)wq;
	dw->work.queued++;
	dw->delay = delay;
	return true;
}

/* The work item the caller runs in, as a test sets it. */
extern struct work_struct *kshim_current_work;
static inline struct work_struct *current_work(void)
{
	return kshim_current_work;
}

/* Trees, kobjects: the fields only. */
struct maple_tree { void *root; };
struct kobject { const char *name; };

/* A tiny xarray: an unsorted array of (index, entry). */
struct xarray {
	unsigned long *idx;
	void **ent;
	size_t n, cap;
};

void *xa_store(struct xarray *xa, unsigned long index, void *entry, gfp_t gfp);
void *xa_erase(struct xarray *xa, unsigned long index);
void *xa_load(struct xarray *xa, unsigned long index);
void xa_destroy(struct xarray *xa);
typedef unsigned int xa_mark_t;
#define XA_PRESENT	8U
void *xa_find(struct xarray *xa, unsigned long *indexp, unsigned long max,
	      xa_mark_t filter);
void *xa_find_after(struct xarray *xa, unsigned long *indexp,
		    unsigned long max, xa_mark_t filter);
#define xa_for_each_range(xa, index, entry, start, last)		\
	for (index = start, entry = xa_find(xa, &index, last, XA_PRESENT); \
	     entry; entry = xa_find_after(xa, &index, last, XA_PRESENT))
static inline int xa_err(void *entry) { (void)entry; return 0; }
static inline void *xa_tag_pointer(void *p, unsigned long tag)
{
	return (void *)((unsigned long)p | tag);
}

static inline void *xa_untag_pointer(void *entry)
{
	return (void *)((unsigned long)entry & ~3UL);
}

static inline unsigned int xa_pointer_tag(void *entry)
{
	return (unsigned long)entry & 3UL;
}

static inline void *xa_mk_value(unsigned long v)
{
	return (void *)((v << 1) | 1);
}

static inline unsigned long xa_to_value(const void *entry)
{
	return (unsigned long)entry >> 1;
}

/* Bitmaps, bit by bit: the tests' windows are small. */
#define BITS_PER_LONG		64
#define BITS_TO_LONGS(n)	(((n) + BITS_PER_LONG - 1) / BITS_PER_LONG)
#define DECLARE_BITMAP(name, bits)	unsigned long name[BITS_TO_LONGS(bits)]

static inline bool kshim_test_bit(const unsigned long *map, unsigned long i)
{
	return map[i / BITS_PER_LONG] & (1UL << (i % BITS_PER_LONG));
}

static inline void bitmap_set(unsigned long *map, unsigned long start,
			      unsigned long n)
{
	for (; n; n--, start++)
		map[start / BITS_PER_LONG] |= 1UL << (start % BITS_PER_LONG);
}

static inline void bitmap_clear(unsigned long *map, unsigned long start,
				unsigned long n)
{
	for (; n; n--, start++)
		map[start / BITS_PER_LONG] &= ~(1UL << (start % BITS_PER_LONG));
}

static inline unsigned long find_next_zero_bit(const unsigned long *map,
					       unsigned long size,
					       unsigned long start)
{
	for (; start < size; start++)
		if (!kshim_test_bit(map, start))
			return start;
	return size;
}

/* Like the kernel's: > size - nr (no room) is returned as is. */
static inline unsigned long
bitmap_find_next_zero_area(unsigned long *map, unsigned long size,
			   unsigned long start, unsigned int nr,
			   unsigned long align_mask)
{
	unsigned long i, j;

	(void)align_mask;
	for (i = start; i + nr <= size; i++) {
		for (j = 0; j < nr && !kshim_test_bit(map, i + j); j++)
			;
		if (j == nr)
			return i;
		i += j;
	}
	return size + 1;
}

/* Devices and logging: messages are counted, printed with UNIT_VERBOSE. */
struct device { const char *name; int refs; };

static inline struct device *get_device(struct device *d)
{
	d->refs++;
	return d;
}

static inline void put_device(struct device *d) { d->refs--; }
struct va_format {
	const char *fmt;
	va_list *va;
};

extern unsigned int kshim_warnings;
void kshim_log(const char *level, const char *fmt, ...) __printf(2, 3);
#define dev_err_ratelimited(d, ...)	((void)(d), kshim_log("err", __VA_ARGS__))
#define dev_warn_ratelimited(d, ...)	((void)(d), kshim_log("warn", __VA_ARGS__))
#define dev_info_ratelimited(d, ...)	((void)(d), kshim_log("info", __VA_ARGS__))
#define dev_warn(d, ...)		((void)(d), kshim_log("warn", __VA_ARGS__))
#define dev_err(d, ...)			((void)(d), kshim_log("err", __VA_ARGS__))
#define dev_dbg_ratelimited(d, ...)	((void)(d), kshim_log("dbg", __VA_ARGS__))
#define dev_info(d, ...)		((void)(d), kshim_log("info", __VA_ARGS__))
#define WARN_ONCE(c, ...) \
	({ bool _c = (c); if (_c) kshim_log("WARN", __VA_ARGS__); _c; })
#define WARN_ON_ONCE(c) \
	({ bool _c = (c); if (_c) kshim_log("WARN", "%s:%d\n", __FILE__, __LINE__); _c; })

/* Memory: a page is its physical address and a count of extra refs. */
struct page { u64 phys; int refs; };
#define page_to_phys(p)		((phys_addr_t)(p)->phys)
#define virt_to_phys(p)		((phys_addr_t)(unsigned long)(p))
static inline void get_page(struct page *p) { p->refs++; }
static inline void put_page(struct page *p) { p->refs--; }

/*
 * A process's memory: its users and holds, and its locked pages. Pinning
 * it (pin_user_pages_remote() and friends) is the test's fake.
 */
struct mm_struct {
	int users;
	int count;
	long locked_vm;
};

/* The task the code runs in: only its memory is looked at. */
struct task_struct {
	struct mm_struct *mm;
	unsigned int flags;
};
#define PF_KTHREAD	0x00200000
extern struct task_struct *kshim_current;
#define current kshim_current

static inline bool mmget_not_zero(struct mm_struct *mm)
{
	if (!mm->users)
		return false;
	mm->users++;
	return true;
}

static inline void mmput(struct mm_struct *mm) { mm->users--; }
static inline void mmgrab(struct mm_struct *mm) { mm->count++; }
static inline void mmdrop(struct mm_struct *mm) { mm->count--; }
static inline void mmap_read_lock(struct mm_struct *mm) { (void)mm; }
static inline void mmap_read_unlock(struct mm_struct *mm) { (void)mm; }
#define FOLL_WRITE	0x01
#define FOLL_LONGTERM	0x100
long pin_user_pages_remote(struct mm_struct *mm, unsigned long start,
			   unsigned long nr_pages, unsigned int gup_flags,
			   struct page **pages, int *locked);
void unpin_user_page(struct page *page);
void unpin_user_pages(struct page **pages, unsigned long npages);
int account_locked_vm(struct mm_struct *mm, unsigned long pages, bool inc);

/* PCI: config space is the test's fake (struct pci_dev.cfg). */
#define PCIBIOS_SUCCESSFUL	0x00
#define PCIBIOS_BAD_REGISTER_NUMBER	0x87
struct pci_dev {
	struct device dev;
	int cfg_size;
	u32 devcap;
	unsigned int msix_enabled:1;
	u8 *cfg;
	/* What the lender's DEV_INFO answer reads (test_lender_msg.c). */
	u16 vendor, device, subsystem_vendor, subsystem_device;
	u32 class;
	u8 revision, msix_cap, msi_cap;
	unsigned int is_virtfn:1;
	/* Where its BARs are (test_lender_p2p.c). */
	u64 bar_start[6];
	/* Its place, and its resets (test_lender_group.c). */
	struct pci_bus *bus;
	unsigned int devfn;
	u8 hdr_type;
	u8 reset_methods[8];
};
/* A bus: its number and PCI domain (test_lender_group.c). */
struct pci_bus {
	int number;
	int domain_nr;
};
#define pci_resource_start(dev, bar)	((dev)->bar_start[(bar)])

struct pci_driver;
struct pci_saved_state;
int pci_read_config_byte(const struct pci_dev *dev, int where, u8 *val);
int pci_read_config_word(const struct pci_dev *dev, int where, u16 *val);
int pci_read_config_dword(const struct pci_dev *dev, int where, u32 *val);
int pci_write_config_byte(const struct pci_dev *dev, int where, u8 val);
int pci_write_config_word(const struct pci_dev *dev, int where, u16 val);
int pci_reset_function_locked(struct pci_dev *dev);
static inline int pcibios_err_to_errno(int err)
{
	return err <= PCIBIOS_SUCCESSFUL ? err : -ERANGE;
}

/* IOMMU, KVM, VFIO, mdev: what the borrower's DMA code touches. */
#define IOMMU_READ	BIT(0)
#define IOMMU_WRITE	BIT(1)
#define IOMMU_MMIO	BIT(4)
struct iommu_domain_geometry {
	dma_addr_t aperture_start;
	dma_addr_t aperture_end;
};
struct iommu_domain;
typedef int (*iommu_fault_handler_t)(struct iommu_domain *, struct device *,
				     unsigned long, int, void *);
/* What the lender's P2P code reads; a test's fake domain embeds it. */
struct iommu_domain {
	struct iommu_domain_geometry geometry;
	iommu_fault_handler_t handler;
	void *handler_token;
};
/* Defined by the test that needs it (test_lender_p2p.c). */
size_t iommu_unmap(struct iommu_domain *domain, unsigned long iova,
		   size_t size);
#define KVM_MEM_READONLY	BIT(1)
struct kvm_memory_slot {
	u64 base_gfn;
	unsigned long npages;
	unsigned long userspace_addr;
	u32 flags;
};

struct kvm_memslots {
	struct kvm_memory_slot *slots;
	int n;
};

struct kvm {
	struct srcu_struct srcu;
	struct kvm_memslots memslots;
	struct mm_struct *mm;
};

#define kvm_memslots(kvm)	(&(kvm)->memslots)
/* The slot at bkt, or NULL past the last one. */
static inline struct kvm_memory_slot *__kshim_memslot(struct kvm_memslots *ms,
						      int bkt)
{
	return bkt < ms->n ? &ms->slots[bkt] : NULL;
}

#define kvm_for_each_memslot(slot, bkt, ms) \
	for (bkt = 0; ((slot) = __kshim_memslot(ms, bkt)); bkt++)
#define VFIO_PIN_PAGES_MAX_ENTRIES	(PAGE_SIZE / sizeof(unsigned long))
struct vfio_device {
	struct device *dev;
	struct kvm *kvm;
	struct device device;
};

/* The VFIO migration states (uapi/linux/vfio.h). */
enum vfio_device_mig_state {
	VFIO_DEVICE_STATE_ERROR = 0,
	VFIO_DEVICE_STATE_STOP = 1,
	VFIO_DEVICE_STATE_RUNNING = 2,
	VFIO_DEVICE_STATE_STOP_COPY = 3,
	VFIO_DEVICE_STATE_RESUMING = 4,
	VFIO_DEVICE_STATE_RUNNING_P2P = 5,
	VFIO_DEVICE_STATE_PRE_COPY = 6,
	VFIO_DEVICE_STATE_PRE_COPY_P2P = 7,
};

struct vfio_device_ops;
struct vfio_irq_info;
struct vfio_irq_set;
struct eventfd_ctx;
struct seq_file;
void seq_printf(struct seq_file *s, const char *fmt, ...) __printf(2, 3);
/* linux/uuid.h: the borrower keeps an mdev UUID per remote device. */
typedef struct { __u8 b[16]; } guid_t;
struct mdev_type { const char *sysfs_name; };
struct mdev_parent { struct device *dev; };
int vfio_pin_pages(struct vfio_device *device, dma_addr_t iova, int npage,
		   int prot, struct page **pages);
void vfio_unpin_pages(struct vfio_device *device, dma_addr_t iova, int npage);

/* User copies: the buffer is ours. */
static inline unsigned long copy_from_user(void *to, const void *from,
					   unsigned long n)
{
	memcpy(to, from, n);
	return 0;
}

static inline unsigned long copy_to_user(void *to, const void *from,
					 unsigned long n)
{
	memcpy(to, from, n);
	return 0;
}

#endif /* KSHIM_H */
