// SPDX-License-Identifier: GPL-2.0
/*
 * Live migration of a guest whose borrowed device stays with its lender
 * (docs/migration.md): the mdev's VFIO migration (the v2 state machine,
 * with P2P) and its device dirty logging.
 *
 * What moves is the guest's RAM, which QEMU sends, and a small state of
 * the mdev (struct dl_mig_state, in devlend_wire.h). The device stays:
 *  - Source, RUNNING -> STOP: interrupts are latched (noted, not
 *    signalled), then the lender quiesces the device (it waits until the
 *    device settles, then turns bus mastering off) and answers with a
 *    ticket. A device that does not settle keeps running: the arc
 *    succeeds (QEMU would reset a device whose stop fails) and the next
 *    one, STOP -> STOP_COPY, is refused, which fails the migration; the
 *    guest keeps its device, untouched.
 *  - Source, STOP -> STOP_COPY: the state (lender, device, ticket, the
 *    latched interrupts) is the data QEMU reads.
 *  - Destination: the mdev was opened as a migration's destination (its
 *    `migration` attribute): it holds nothing, and its config writes,
 *    resets and interrupt setup stay virtual while its source holds the
 *    device. RESUMING takes the state; RESUMING -> STOP checks it and
 *    takes the device over (%DL_MSG_MIG_TAKEOVER with the ticket: the
 *    lender drops everything of the source's), then pins and maps its own
 *    copy of the guest's RAM and sets the interrupts up again, all with
 *    bus mastering still off at the device.
 *  - STOP -> RUNNING (the destination's guest runs, or a failed
 *    migration's source runs again): the lender resumes the device (bus
 *    mastering back) and the latched interrupts are signalled.
 * The source learns that the device was taken over from the lender's
 * DEV_CHANGED (its mdev is then lost; its lease settles as the lender
 * answers "not the holder", which means it holds nothing of the source).
 *
 * Dirty logging: only the lender's IOMMU sees the device's writes, and it
 * does not say which pages they hit. So once the device may have reached
 * guest memory (bus mastering on at any time since logging started),
 * every page of every range QEMU asks about is reported written, but
 * only while the device is stopped: while it runs it may write a page
 * again after any report, so a report then would be stale at once, and
 * would make every pre-copy round send all of guest RAM. QEMU reads the
 * log once more after it stops the device (its last sync, in the
 * downtime), and that report covers every write. Pre-copy so converges
 * on the vCPUs' writes alone, with QEMU's defaults (no
 * x-pre-copy-dirty-page-tracking, so libvirt can run it). It needs a
 * kernel whose VFIO can report device dirty pages at all
 * (CONFIG_IOMMUFD_DRIVER, which Debian's lacks): on any other, the mdev
 * offers no migration, and QEMU blocks migrating its guest rather than
 * lose the device's writes.
 */
#include <linux/anon_inodes.h>
#include <linux/delay.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/iova_bitmap.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "internal.h"
#include "../include/dl_mig_rules.h"

/**
 * struct dl_mig_file - the data file of a saving or resuming state.
 * @filp: the file.
 * @lock: the fields below.
 * @st: the state: saved, to be read; or being written.
 * @len: bytes of @st that are valid (saving: all; resuming: written).
 * @disabled: the state machine left the data state: reads and writes
 *	fail with -ENODEV.
 */
struct dl_mig_file {
	struct file *filp;
	struct mutex lock;		/* see above */
	struct dl_mig_state st;
	size_t len;
	bool disabled;
};

static ssize_t dl_mig_read(struct file *filp, char __user *buf, size_t len,
			   loff_t *pos)
{
	struct dl_mig_file *f = filp->private_data;
	ssize_t ret;

	if (pos)
		return -ESPIPE;
	pos = &filp->f_pos;
	mutex_lock(&f->lock);
	if (f->disabled) {
		ret = -ENODEV;
	} else if (*pos >= f->len) {
		ret = 0;	/* end of stream */
	} else {
		len = min_t(size_t, len, f->len - *pos);
		ret = copy_to_user(buf, (u8 *)&f->st + *pos, len) ? -EFAULT : len;
		if (ret > 0)
			*pos += ret;
	}
	mutex_unlock(&f->lock);
	return ret;
}

static ssize_t dl_mig_write(struct file *filp, const char __user *buf,
			    size_t len, loff_t *pos)
{
	struct dl_mig_file *f = filp->private_data;
	ssize_t ret;

	if (pos)
		return -ESPIPE;
	pos = &filp->f_pos;
	mutex_lock(&f->lock);
	if (f->disabled) {
		ret = -ENODEV;
	} else if (*pos < 0 || *pos > sizeof(f->st) ||
		   len > sizeof(f->st) - *pos) {
		/* More than a state: not ours. */
		ret = -EINVAL;
	} else {
		ret = copy_from_user((u8 *)&f->st + *pos, buf, len) ? -EFAULT : len;
		if (ret > 0) {
			*pos += ret;
			f->len = max_t(size_t, f->len, *pos);
		}
	}
	mutex_unlock(&f->lock);
	return ret;
}

static int dl_mig_release(struct inode *inode, struct file *filp)
{
	struct dl_mig_file *f = filp->private_data;

	mutex_destroy(&f->lock);
	kfree(f);
	return 0;
}

static const struct file_operations dl_mig_fops = {
	.owner = THIS_MODULE,
	.read = dl_mig_read,
	.write = dl_mig_write,
	.release = dl_mig_release,
};

/* A data file; the mdev keeps a reference of its own (v->mig.file). */
static struct dl_mig_file *dl_mig_file_new(struct dl_vdev *v, bool saving)
{
	struct dl_mig_file *f;

	f = kzalloc(sizeof(*f), GFP_KERNEL_ACCOUNT);
	if (!f)
		return ERR_PTR(-ENOMEM);
	mutex_init(&f->lock);
	f->filp = anon_inode_getfile("devlend_mig", &dl_mig_fops, f,
				     saving ? O_RDONLY : O_WRONLY);
	if (IS_ERR(f->filp)) {
		struct file *err = f->filp;

		mutex_destroy(&f->lock);
		kfree(f);
		return ERR_CAST(err);
	}
	stream_open(f->filp->f_inode, f->filp);
	if (saving) {
		f->st = v->mig.st;
		f->len = sizeof(f->st);
	}
	v->mig.file = f;
	return f;
}

/* The data file's stream ends: later reads and writes fail. */
static void dl_mig_file_disable(struct dl_vdev *v)
{
	struct dl_mig_file *f = v->mig.file;

	if (!f)
		return;
	mutex_lock(&f->lock);
	f->disabled = true;
	mutex_unlock(&f->lock);
	v->mig.file = NULL;
	fput(f->filp);
}

/* The state the source puts in the stream. */
static void dl_mig_save(struct dl_vdev *v)
{
	struct dl_mig_state *st = &v->mig.st;

	memset(st, 0, sizeof(*st));
	st->magic = cpu_to_le32(DL_MIG_STATE_MAGIC);
	st->version = cpu_to_le16(DL_MIG_STATE_VERSION);
	st->size = cpu_to_le16(sizeof(*st));
	st->lender = cpu_to_le32(v->sess.host);
	st->dev_id = cpu_to_le32(v->sess.dev_id);
	st->from_host = cpu_to_le32(v->b->host_id);
	if (v->mig.ticket && v->sess.lease) {
		st->flags = cpu_to_le32(DL_MIG_F_HELD);
		st->incarnation = cpu_to_le64(v->sess.lease->incarnation);
		st->ticket = cpu_to_le64(v->mig.ticket);
	}
	dl_irq_pending_save(v, st);
}

/*
 * RUNNING -> STOP: the device's DMA stops once it settles; its interrupts
 * from now on are latched. A destination that has not taken its device
 * over, and an mdev that holds nothing, have nothing to stop.
 *
 * A quiesce that fails (the device did not settle, the answer was lost,
 * the lender is down) does not fail this arc: QEMU resets a device whose RUNNING -> STOP
 * fails (its recover state there is ERROR), which would reset the device
 * under the guest that keeps it. The device runs on instead, its
 * interrupts latched for the guest's return, and the next arc, STOP ->
 * STOP_COPY, is refused (QEMU recovers to STOP there, with no reset):
 * the migration fails before any state is saved, and the guest runs on
 * here with its device.
 */
static int dl_mig_stop(struct dl_vdev *v)
{
	u32 settle = clamp(READ_ONCE(dl_mig_settle_ms), 1U, DL_MIG_TIMEOUT_MAX_MS);
	u32 timeout = clamp(READ_ONCE(dl_mig_timeout_ms), settle,
			    DL_MIG_TIMEOUT_MAX_MS);
	u32 waited;
	int ret;

	if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED ||
	    (v->mig.quiesced && v->mig.ticket))
		return 0;
	dl_irq_latch(v);
	ret = dl_session_quiesce(v, settle, timeout, &v->mig.ticket, &waited);
	if (ret) {
		if (ret == -ETIMEDOUT)
			v->mig.unsettled++;
		dev_err_ratelimited(dl_vdev_dev(v),
				    "remote device %u:%u cannot be stopped for migration: %d%s\n",
				    v->sess.host, v->sess.dev_id, ret,
				    ret == -ETIMEDOUT ?
				    " (it did not settle, or the answer was lost)" : "");
		v->mig.ticket = 0;
		v->mig.stop_err = ret;
		return 0;
	}
	v->mig.quiesced = true;
	v->mig.quiesces++;
	v->mig.settle_ms = waited;
	return 0;
}

/*
 * The guest runs again here without its device: it was lost while the
 * guest was stopped (taken over by a migration's destination, or its
 * lender went down), or the lender says this host no longer holds it.
 * The user is told now, as of a loss while it runs (dl_vdev_lost() kept
 * quiet then); what fired for the device is dropped.
 */
static void dl_mig_run_without(struct dl_vdev *v)
{
	v->mig.quiesced = false;
	v->mig.ticket = 0;
	dl_irq_unlatch(v, false);
	dl_irq_signal_lost(v);
}

/*
 * Tests: a device taken over by migration is resumed late, a window in
 * which its destination can be killed mid-handover; a fatal signal ends
 * the wait (its QEMU is being killed).
 */
static int dl_mig_fault_resume_delay(struct dl_vdev *v)
{
	unsigned int ms = min(READ_ONCE(dl_fault_mig_resume_delay_ms), 60000U);

	if (!ms || !v->mig.loaded)
		return 0;
	dev_info(dl_vdev_dev(v), "fault_mig_resume_delay_ms: resuming remote device %u:%u in %u ms\n",
		 v->sess.host, v->sess.dev_id, ms);
	msleep_interruptible(ms);
	return fatal_signal_pending(current) ? -EINTR : 0;
}

/*
 * STOP -> RUNNING: the device resumes (bus mastering back), and what
 * fired while the guest was stopped is signalled. A device whose quiesce
 * failed at the stop never stopped: nothing to resume.
 */
static int dl_mig_run(struct dl_vdev *v)
{
	int stop_err = v->mig.stop_err;
	int ret;

	v->mig.stop_err = 0;
	if (READ_ONCE(v->sess.state) == DL_VDEV_LOST) {
		dl_mig_run_without(v);
		return 0;
	}
	/*
	 * The quiesce failed at the stop, but its answer may only have been
	 * lost (a timeout here reads as "did not settle"): the lender may
	 * have quiesced the device after all. Resuming is harmless for a
	 * device that was never quiesced (the lender answers 0), so ask;
	 * a device that most likely runs on is not failed for its answer.
	 */
	if (stop_err && !v->mig.quiesced) {
		ret = dl_session_resume(v);
		if (ret)
			dev_warn_ratelimited(dl_vdev_dev(v),
					     "remote device %u:%u: resume after a failed quiesce: %d\n",
					     v->sess.host, v->sess.dev_id, ret);
	}
	if (v->mig.quiesced) {
		ret = dl_mig_fault_resume_delay(v);
		if (!ret)
			ret = dl_session_resume(v);
		/*
		 * Not the holder (held by another: -EBUSY; by nobody:
		 * -EINVAL): taken over or taken back, the lender's
		 * DEV_CHANGED still on its way.
		 */
		if (ret == -EBUSY || ret == -EINVAL) {
			dev_err_ratelimited(dl_vdev_dev(v),
					    "remote device %u:%u is no longer held here: the guest runs on without it\n",
					    v->sess.host, v->sess.dev_id);
			dl_mig_run_without(v);
			return 0;
		}
		if (ret) {
			dev_err_ratelimited(dl_vdev_dev(v),
					    "remote device %u:%u cannot resume: %d\n",
					    v->sess.host, v->sess.dev_id, ret);
			return ret;
		}
		v->mig.quiesced = false;
		v->mig.ticket = 0;
	}
	dl_irq_unlatch(v, true);
	return 0;
}

/*
 * After a takeover: the guest's memory mapped for the device's DMA, its
 * BARs where the guest put them, its interrupts set up, as the loaded
 * config space says; bus mastering stays off at the device until
 * dl_mig_run().
 */
static int dl_mig_replay(struct dl_vdev *v)
{
	u16 cmd = dl_config_command(v);
	int ret;

	if (cmd & PCI_COMMAND_MASTER) {
		ret = v->config_ops->dma_enable(v);
		if (ret)
			return ret;
	}
	if (v->config_ops->mem_decode)
		v->config_ops->mem_decode(v, cmd & PCI_COMMAND_MEMORY);
	if (v->config_ops->bars_changed)
		v->config_ops->bars_changed(v);
	return dl_irq_replay(v);
}

/* RESUMING -> STOP: check the state written, and take the device over. */
static int dl_mig_load(struct dl_vdev *v)
{
	struct dl_mig_file *f = v->mig.file;
	struct dl_mig_expect want = {
		.lender = v->sess.host,
		.dev_id = v->sess.dev_id,
		.incarnation = v->remote->incarnation,
		.self = v->b->host_id,
		.nvec = dl_irq_max_vectors(v),
	};
	struct dl_mig_state *st = &v->mig.st;
	int ret;

	if (!f)
		return -EINVAL;
	mutex_lock(&f->lock);
	ret = f->len == sizeof(*st) ? 0 : -EINVAL;
	if (!ret)
		*st = f->st;
	mutex_unlock(&f->lock);
	if (!ret)
		ret = dl_mig_state_check(st, &want);
	if (ret) {
		dev_err_ratelimited(dl_vdev_dev(v),
				    "migration state for remote device %u:%u refused: %d\n",
				    v->sess.host, v->sess.dev_id, ret);
		return ret;
	}
	if (!(le32_to_cpu(st->flags) & DL_MIG_F_HELD)) {
		/* The source held nothing: borrowed at first use, as ever. */
		dl_session_set_incoming(v, false);
		v->mig.loaded = true;
		return 0;
	}
	dl_irq_latch(v);
	dl_irq_pending_load(v, st);
	ret = dl_session_takeover(v, le32_to_cpu(st->from_host),
				  le64_to_cpu(st->ticket));
	if (ret) {
		dl_irq_unlatch(v, false);
		return ret;
	}
	/* Held, quiesced, the ticket used: dl_mig_run() resumes it. */
	v->mig.quiesced = true;
	v->mig.ticket = 0;
	v->mig.takeovers++;
	v->mig.loaded = true;
	ret = dl_mig_replay(v);
	if (ret)
		dev_err_ratelimited(dl_vdev_dev(v),
				    "remote device %u:%u taken over, but its setup failed: %d\n",
				    v->sess.host, v->sess.dev_id, ret);
	dev_info(dl_vdev_dev(v), "took remote device %u:%u over from host %u\n",
		 v->sess.host, v->sess.dev_id, le32_to_cpu(st->from_host));
	return ret;
}

/* One arc of the state machine; v->lock held. */
static struct file *dl_mig_step(struct dl_vdev *v,
				enum vfio_device_mig_state next)
{
	enum vfio_device_mig_state cur = v->mig.state;
	struct dl_mig_file *f;
	int ret;

	/* The device runs in both; only other devices' P2P stops. */
	if ((cur == VFIO_DEVICE_STATE_RUNNING &&
	     next == VFIO_DEVICE_STATE_RUNNING_P2P) ||
	    (cur == VFIO_DEVICE_STATE_RUNNING_P2P &&
	     next == VFIO_DEVICE_STATE_RUNNING))
		return NULL;
	if ((cur == VFIO_DEVICE_STATE_RUNNING ||
	     cur == VFIO_DEVICE_STATE_RUNNING_P2P) &&
	    next == VFIO_DEVICE_STATE_STOP) {
		ret = dl_mig_stop(v);
		return ret ? ERR_PTR(ret) : NULL;
	}
	if (cur == VFIO_DEVICE_STATE_STOP &&
	    (next == VFIO_DEVICE_STATE_RUNNING ||
	     next == VFIO_DEVICE_STATE_RUNNING_P2P)) {
		ret = dl_mig_run(v);
		return ret ? ERR_PTR(ret) : NULL;
	}
	if (cur == VFIO_DEVICE_STATE_STOP &&
	    next == VFIO_DEVICE_STATE_STOP_COPY) {
		/* Not stopped: no state may go out (see dl_mig_stop()). */
		if (v->mig.stop_err) {
			dev_err_ratelimited(dl_vdev_dev(v),
					    "remote device %u:%u was not stopped: its state is not saved, the migration fails\n",
					    v->sess.host, v->sess.dev_id);
			return ERR_PTR(v->mig.stop_err);
		}
		dl_mig_save(v);
		f = dl_mig_file_new(v, true);
		return IS_ERR(f) ? ERR_CAST(f) : f->filp;
	}
	if (cur == VFIO_DEVICE_STATE_STOP &&
	    next == VFIO_DEVICE_STATE_RESUMING) {
		/* A destination not told so: it holds nothing, so it may be. */
		if (READ_ONCE(v->sess.state) == DL_VDEV_IDLE)
			dl_session_set_incoming(v, true);
		if (!dl_session_incoming(v))
			return ERR_PTR(-EBUSY);
		v->mig.loaded = false;
		f = dl_mig_file_new(v, false);
		return IS_ERR(f) ? ERR_CAST(f) : f->filp;
	}
	if (cur == VFIO_DEVICE_STATE_STOP_COPY &&
	    next == VFIO_DEVICE_STATE_STOP) {
		dl_mig_file_disable(v);
		return NULL;
	}
	if (cur == VFIO_DEVICE_STATE_RESUMING &&
	    next == VFIO_DEVICE_STATE_STOP) {
		ret = dl_mig_load(v);
		dl_mig_file_disable(v);
		return ret ? ERR_PTR(ret) : NULL;
	}
	WARN_ON_ONCE(1);
	return ERR_PTR(-EINVAL);
}

static struct file *dl_mig_set_state(struct vfio_device *vdev,
				     enum vfio_device_mig_state new)
{
	struct dl_vdev *v = to_dl_vdev(vdev);
	enum vfio_device_mig_state next;
	struct file *res = NULL;
	int ret;

	mutex_lock(&v->lock);
	while (new != v->mig.state) {
		ret = vfio_mig_get_next_state(vdev, v->mig.state, new, &next);
		if (ret) {
			res = ERR_PTR(ret);
			break;
		}
		res = dl_mig_step(v, next);
		if (IS_ERR(res))
			break;
		v->mig.state = next;
		/* Only the last arc may open a file, and the user gets it. */
		if (WARN_ON_ONCE(res && new != next)) {
			res = ERR_PTR(-EINVAL);
			break;
		}
		if (res)
			get_file(res);
	}
	mutex_unlock(&v->lock);
	return res;
}

static int dl_mig_get_state(struct vfio_device *vdev,
			    enum vfio_device_mig_state *cur)
{
	struct dl_vdev *v = to_dl_vdev(vdev);

	mutex_lock(&v->lock);
	*cur = v->mig.state;
	mutex_unlock(&v->lock);
	return 0;
}

static int dl_mig_get_data_size(struct vfio_device *vdev,
				unsigned long *stop_copy_length)
{
	*stop_copy_length = sizeof(struct dl_mig_state);
	return 0;
}

static const struct vfio_migration_ops dl_mig_ops = {
	.migration_set_state = dl_mig_set_state,
	.migration_get_state = dl_mig_get_state,
	.migration_get_data_size = dl_mig_get_data_size,
};

/*
 * iova_bitmap_set() is real only with CONFIG_IOMMUFD_DRIVER; without, the
 * header's stub sets nothing, and migration is not offered (below).
 */
#if IS_ENABLED(CONFIG_IOMMUFD_DRIVER)
MODULE_IMPORT_NS(IOMMUFD);
#endif

static int dl_mig_log_start(struct vfio_device *vdev,
			    struct rb_root_cached *ranges, u32 nnodes,
			    u64 *page_size)
{
	struct dl_vdev *v = to_dl_vdev(vdev);
	int ret = 0;

	mutex_lock(&v->lock);
	if (v->mig.logging) {
		ret = -EBUSY;
	} else {
		v->mig.logging = true;
		v->mig.fills = 0;
		v->mig.wrote = dl_dma_wrote_since(v, &v->mig.fills);
	}
	mutex_unlock(&v->lock);
	return ret;
}

static int dl_mig_log_stop(struct vfio_device *vdev)
{
	struct dl_vdev *v = to_dl_vdev(vdev);

	mutex_lock(&v->lock);
	v->mig.logging = false;
	mutex_unlock(&v->lock);
	return 0;
}

/*
 * Whether the device can write guest memory no more: the guest is stopped
 * and the lender quiesced the device (or this mdev held none). One whose
 * quiesce failed runs on; its migration fails at STOP_COPY.
 */
static bool dl_mig_device_stopped(struct dl_vdev *v)
{
	enum vfio_device_mig_state s = v->mig.state;

	if (s != VFIO_DEVICE_STATE_STOP && s != VFIO_DEVICE_STATE_STOP_COPY)
		return false;
	return !v->mig.stop_err;
}

static int dl_mig_log_read_and_clear(struct vfio_device *vdev,
				     unsigned long iova, unsigned long length,
				     struct iova_bitmap *dirty)
{
	struct dl_vdev *v = to_dl_vdev(vdev);
	int ret = 0;

	mutex_lock(&v->lock);
	if (!v->mig.logging) {
		ret = -EINVAL;
	} else {
		if (dl_dma_wrote_since(v, &v->mig.fills))
			v->mig.wrote = true;
		/*
		 * Nothing says which pages it wrote: all it could reach, once
		 * it can write no more (see the top of this file).
		 */
		if (v->mig.wrote && dl_mig_device_stopped(v))
			iova_bitmap_set(dirty, iova, length);
	}
	mutex_unlock(&v->lock);
	return ret;
}

static const struct vfio_log_ops dl_mig_log_ops = {
	.log_start = dl_mig_log_start,
	.log_stop = dl_mig_log_stop,
	.log_read_and_clear = dl_mig_log_read_and_clear,
};

/**
 * dl_mig_supported() - whether this build offers migration.
 *
 * Return: true where VFIO reports device dirty pages.
 */
bool dl_mig_supported(void)
{
	return IS_ENABLED(CONFIG_IOMMUFD_DRIVER);
}

/**
 * dl_mig_init() - offer VFIO migration for a new mdev, where VFIO can
 *	report its device's dirty pages.
 * @v: the mdev, being initialized (before it is registered).
 */
void dl_mig_init(struct dl_vdev *v)
{
	v->mig.state = VFIO_DEVICE_STATE_RUNNING;
	if (!dl_mig_supported())
		return;
	v->vdev.migration_flags = VFIO_MIGRATION_STOP_COPY | VFIO_MIGRATION_P2P;
	v->vdev.mig_ops = &dl_mig_ops;
	v->vdev.log_ops = &dl_mig_log_ops;
}

/**
 * dl_mig_open() - an mdev opens: as a migration's destination if it was
 *	told so.
 * @v: the mdev, opening, its session open; caller holds v->lock.
 *
 * Return: whether it opens as a destination (then it holds nothing).
 */
bool dl_mig_open(struct dl_vdev *v)
{
	v->mig.state = VFIO_DEVICE_STATE_RUNNING;
	v->mig.quiesced = false;
	v->mig.stop_err = 0;
	v->mig.ticket = 0;
	v->mig.loaded = false;
	v->mig.logging = false;
	if (!v->mig.incoming)
		return false;
	dl_session_set_incoming(v, true);
	return true;
}

/**
 * dl_mig_reset() - the device is reset (VFIO_DEVICE_RESET): the state is
 *	RUNNING again, any data stream ends, and a quiesced device resumes
 *	first (the lender refuses to reset it while it is quiesced).
 * @v: the mdev, open; caller holds v->lock.
 */
void dl_mig_reset(struct dl_vdev *v)
{
	dl_mig_file_disable(v);
	if (v->mig.quiesced)
		dl_session_resume(v);
	v->mig.quiesced = false;
	v->mig.stop_err = 0;
	v->mig.ticket = 0;
	dl_irq_unlatch(v, false);
	v->mig.state = VFIO_DEVICE_STATE_RUNNING;
}

/**
 * dl_mig_close() - the mdev closes: any data stream ends; the next open is
 *	an ordinary one unless told otherwise again.
 * @v: the mdev, closing; caller holds v->lock.
 */
void dl_mig_close(struct dl_vdev *v)
{
	dl_mig_file_disable(v);
	dl_irq_unlatch(v, false);
	v->mig.quiesced = false;
	v->mig.stop_err = 0;
	v->mig.ticket = 0;
	v->mig.logging = false;
	v->mig.incoming = false;
	v->mig.state = VFIO_DEVICE_STATE_RUNNING;
}

/**
 * dl_mig_stopped() - whether the mdev's guest is stopped for a migration
 *	(or a pause): a loss of its device is then not told to the user, who
 *	learns it if the guest runs again here.
 * @v: the mdev; any lock.
 *
 * Return: true if so.
 */
bool dl_mig_stopped(struct dl_vdev *v)
{
	enum vfio_device_mig_state s = READ_ONCE(v->mig.state);

	return s == VFIO_DEVICE_STATE_STOP || s == VFIO_DEVICE_STATE_STOP_COPY;
}

/**
 * dl_mig_set_incoming() - the `migration` attribute: make the next open a
 *	migration's destination, or not.
 * @v: the mdev; caller holds v->lock.
 * @incoming: which.
 *
 * Return: 0; -EBUSY while open; -EINVAL for a destination without a
 * chosen remote device (the source's); -EOPNOTSUPP where this build
 * offers no migration.
 */
int dl_mig_set_incoming(struct dl_vdev *v, bool incoming)
{
	lockdep_assert_held(&v->lock);

	if (v->open)
		return -EBUSY;
	if (incoming && !dl_mig_supported())
		return -EOPNOTSUPP;
	if (incoming && !v->remote)
		return -EINVAL;
	v->mig.incoming = incoming;
	return 0;
}

/**
 * dl_mig_show() - the `migration` attribute: "incoming" for a destination
 *	(told so, or open as one), else the VFIO migration state, or
 *	"unsupported".
 * @v: the mdev; caller holds v->lock.
 *
 * Return: the name.
 */
const char *dl_mig_show(struct dl_vdev *v)
{
	static const char * const names[] = {
		[VFIO_DEVICE_STATE_ERROR] = "error",
		[VFIO_DEVICE_STATE_STOP] = "stop",
		[VFIO_DEVICE_STATE_RUNNING] = "running",
		[VFIO_DEVICE_STATE_STOP_COPY] = "stop_copy",
		[VFIO_DEVICE_STATE_RESUMING] = "resuming",
		[VFIO_DEVICE_STATE_RUNNING_P2P] = "running_p2p",
		[VFIO_DEVICE_STATE_PRE_COPY] = "pre_copy",
		[VFIO_DEVICE_STATE_PRE_COPY_P2P] = "pre_copy_p2p",
	};

	if (!dl_mig_supported())
		return "unsupported";
	if ((!v->open && v->mig.incoming) || dl_session_incoming(v))
		return "incoming";
	if (v->mig.state >= ARRAY_SIZE(names) || !names[v->mig.state])
		return "error";
	return names[v->mig.state];
}
