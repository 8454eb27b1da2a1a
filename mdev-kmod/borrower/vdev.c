// SPDX-License-Identifier: GPL-2.0
/*
 * The VFIO side of an mdev: a vfio-pci device that stands for a remote
 * device.
 *
 * Regions, at index << 40 of the device fd as vfio-pci places them:
 *   config   the virtual config space (config.c)
 *   BAR0-5   relayed: reads are DL_MSG_BAR_READ requests, writes posted
 *            DL_MSG_BAR_WRITEs, split into naturally aligned 1, 2, 4 or 8
 *            byte accesses; refused while the BAR's decode is off. A
 *            memory BAR the lender shows through a window of the fabric
 *            is also mmap-able, but for its MSI-X pages (mmap.c)
 *   ROM, VGA size 0
 * Interrupts: INTx, MSI, MSI-X relayed from the lender, ERR and REQ
 * (irq.c). DMA: pinned and mapped on Bus Master Enable (dma.c).
 *
 * Open resolves the remote device and reads its config space; the device
 * is borrowed (DL_MSG_DEV_ACQUIRE, session.c) only when first needed:
 * reset, a forwarded config write, a BAR access, or interrupts enabled.
 * Close gives it back. If the lender goes down or takes the device back,
 * the mdev is lost: REQ (or ERR) fires and device accesses fail until it
 * is closed.
 *
 * This file is the top of the mdev and the only one that calls across:
 * config.c, dma.c and irq.c sit on the session (session.c), which sits on
 * the remote table (remote.c) and the leases (lease.c); none calls up.
 * What a lower layer needs from above goes through the tables registered
 * here: &dl_session_ops (a loss, told to the user by irq.c) and
 * &dl_config_ops (bus mastering and FLR, done by dma.c and here).
 */
#include <linux/delay.h>
#include <linux/eventfd.h>
#include <linux/mdev.h>
#include <linux/pci.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vfio.h>

#include "internal.h"

/*
 * Function reset of the remote device, for VFIO_DEVICE_RESET and a PCIe
 * FLR written to the config space (&dl_config_ops.reset); caller holds
 * v->lock. Borrows the device if needed. Afterwards bus mastering and
 * interrupts are off in the virtual config space, and nothing is mapped
 * for DMA. Return: 0 or -errno.
 */
static int dl_vdev_reset(struct dl_vdev *v)
{
	struct dl_dev_ref ref = { .dev_id = cpu_to_le32(v->sess.dev_id) };
	int ret;

	lockdep_assert_held(&v->lock);

	/* A quiesced device resumes first: the lender resets no other. */
	dl_mig_reset(v);
	/*
	 * A migration's destination: its source holds the device, whose
	 * state the destination takes over as it is. The VMM's reset at
	 * start (QEMU's) is the config space's alone.
	 */
	if (dl_session_incoming(v)) {
		dl_config_after_reset(v);
		return 0;
	}
	ret = dl_session_borrow(v);
	if (ret)
		return ret;
	ret = dl_session_request(v, DL_MSG_DEV_RESET, &ref, sizeof(ref),
				 NULL, 0);
	if (ret)
		dev_err_ratelimited(dl_vdev_dev(v),
				    "reset of remote device %u:%u failed: %d\n",
				    v->sess.host, v->sess.dev_id, ret);
	/* Whatever the result, the guest sees a device after reset. */
	dl_config_after_reset(v);
	/* Decode is off after a reset: no mapping may reach the device. */
	dl_mmap_decode(v, false);
	dl_dma_disable(v);
	return ret;
}

/* Whether memory decode is on in the virtual command register. */
static bool dl_vdev_mem_decodes(struct dl_vdev *v)
{
	u16 cmd = le16_to_cpu(READ_ONCE(*(__le16 *)&v->cfg.vconfig[PCI_COMMAND]));

	return cmd & PCI_COMMAND_MEMORY;
}

/* Chooses a free remote device of the mdev's type, unless it has one. */
static int dl_vdev_choose(struct dl_vdev *v, bool *chosen)
{
	struct dl_borrower *b = v->b;
	struct dl_remote *r;

	lockdep_assert_held(&v->lock);

	*chosen = false;
	if (v->remote)
		return 0;
	mutex_lock(&b->lock);
	list_for_each_entry(r, &b->remotes, node) {
		if (dl_remote_is_free(r) && dl_remote_matches(r, v->mtype)) {
			r->ntargets++;
			v->remote = dl_remote_get(r);
			*chosen = true;
			break;
		}
	}
	mutex_unlock(&b->lock);
	if (!v->remote) {
		dev_err(dl_vdev_dev(v), "no free remote device of type %s\n",
			v->mtype->type.sysfs_name);
		return -ENODEV;
	}
	return 0;
}

static void dl_vdev_unchoose(struct dl_vdev *v)
{
	struct dl_borrower *b = v->b;
	struct dl_remote *r = v->remote;

	mutex_lock(&b->lock);
	r->ntargets--;
	v->remote = NULL;
	mutex_unlock(&b->lock);
	dl_remote_put(r);
}

static int dl_vdev_open(struct vfio_device *vdev)
{
	struct dl_vdev *v = to_dl_vdev(vdev);
	struct dl_borrower *b = v->b;
	struct dl_dev_ref ref;
	struct dl_dev_info di;
	bool chosen;
	int ret;

	mutex_lock(&v->lock);
	ret = dl_vdev_choose(v, &chosen);
	if (ret)
		goto out_unlock;

	ret = dl_session_open(v);
	if (ret)
		goto err_unchoose;

	ref.dev_id = cpu_to_le32(v->sess.dev_id);
	ref.flags = 0;
	ret = dl_session_request(v, DL_MSG_DEV_INFO, &ref, sizeof(ref), &di,
				 sizeof(di));
	if (!ret && le32_to_cpu(di.dev_id) != v->sess.dev_id)
		ret = -EPROTO;
	if (ret) {
		dev_err(dl_vdev_dev(v), "cannot reach remote device %u:%u: %d\n",
			v->sess.host, v->sess.dev_id, ret);
		/* Else every later open finds the device held by this mdev. */
		goto err_disown;
	}
	dl_rinfo_decode(&v->info, &di);
	/* A migration's destination opens while its source holds it. */
	if (dl_mig_open(v)) {
		dev_info(dl_vdev_dev(v), "open as a migration's destination for remote device %u:%u (%s), held by host %u\n",
			 v->sess.host, v->sess.dev_id, v->info.name,
			 v->info.borrower);
	} else if (v->info.borrower != DL_NO_HOST &&
		   v->info.borrower != b->host_id) {
		dev_err(dl_vdev_dev(v), "remote device %u:%u (%s) is held by host %u\n",
			v->sess.host, v->sess.dev_id, v->info.name, v->info.borrower);
		ret = -EBUSY;
		goto err_disown;
	}

	ret = dl_p2p_group_join(v);
	if (ret)
		goto err_disown;
	ret = dl_config_init(v);
	if (ret) {
		dev_err(dl_vdev_dev(v), "cannot read the config space of remote device %u:%u: %d\n",
			v->sess.host, v->sess.dev_id, ret);
		goto err_leave_group;
	}
	dl_mmap_decode(v, dl_vdev_mem_decodes(v));
	dl_p2p_open(v);
	v->open = true;
	mutex_unlock(&v->lock);
	return 0;

err_leave_group:
	dl_p2p_group_leave(v);
err_disown:
	dl_session_close(v);
err_unchoose:
	if (chosen)
		dl_vdev_unchoose(v);
out_unlock:
	mutex_unlock(&v->lock);
	return ret;
}

static void dl_vdev_close(struct vfio_device *vdev)
{
	struct dl_vdev *v = to_dl_vdev(vdev);

	/* It takes v->lock; a later one finds the mdev closed. */
	dl_dma_cancel_repin(v);
	mutex_lock(&v->lock);
	/* Before the release: no message about its device after it. */
	dl_p2p_close(v);
	dl_p2p_group_leave(v);
	dl_irq_release_all(v);
	/* The VMM's mappings stay until it unmaps them: they fault now. */
	dl_mmap_drop(v);
	dl_mig_close(v);
	dl_dma_disable(v);
	dl_session_release(v);
	/* What the lender may still map is the lease's business now. */
	dl_dma_lease_gone(v);
	dl_session_close(v);
	dl_config_free(v);
	v->open = false;
	mutex_unlock(&v->lock);
}

/* The access size at @off for up to @count bytes: aligned, 1 to @max. */
static unsigned int dl_vdev_access_size(u64 off, size_t count,
					unsigned int max)
{
	unsigned int size = max;

	while (size > 1 && (size > count || (off & (size - 1))))
		size >>= 1;
	return size;
}

static bool dl_vdev_bar_decodes(struct dl_vdev *v, unsigned int bar)
{
	u16 cmd = le16_to_cpu(READ_ONCE(*(__le16 *)&v->cfg.vconfig[PCI_COMMAND]));

	if (v->info.bar_flags[bar] & DL_BAR_F_IO)
		return cmd & PCI_COMMAND_IO;
	return cmd & PCI_COMMAND_MEMORY;
}

static int dl_vdev_bar_ready(struct dl_vdev *v, unsigned int bar)
{
	int ret = 0;

	if (READ_ONCE(v->sess.state) != DL_VDEV_BORROWED) {
		mutex_lock(&v->lock);
		ret = dl_session_borrow(v);
		mutex_unlock(&v->lock);
		if (ret)
			return ret;
	}
	if (!dl_vdev_bar_decodes(v, bar)) {
		dev_dbg_ratelimited(dl_vdev_dev(v),
				    "BAR%u access while its decode is off\n", bar);
		return -EIO;
	}
	return 0;
}

static ssize_t dl_vdev_bar_rw(struct dl_vdev *v, unsigned int bar,
			      char __user *buf, size_t count, u64 off,
			      bool write)
{
	struct dl_bar_access acc = {
		.dev_id = cpu_to_le32(v->sess.dev_id),
		.bar = bar,
	};
	struct dl_bar_access resp;
	u64 size = v->info.bar_size[bar];
	unsigned int n;
	size_t done = 0;
	__le64 val;
	int ret;

	if (!size || off >= size || count > size - off)
		return -EINVAL;
	ret = dl_vdev_bar_ready(v, bar);
	if (ret)
		return ret;

	while (done < count) {
		/*
		 * Each piece is a fabric round trip, so a large access takes
		 * long: yield the CPU, stop for a dying task, and at any other
		 * signal return what was done (a short read or write, as on a
		 * slow device), so that the task can be stopped or frozen.
		 */
		cond_resched();
		if (fatal_signal_pending(current))
			return done ? done : -EINTR;
		if (done && signal_pending(current))
			break;
		n = dl_vdev_access_size(off, count - done, 8);
		acc.size = n;
		acc.offset = cpu_to_le64(off);
		if (write) {
			val = 0;
			if (copy_from_user(&val, buf + done, n))
				return -EFAULT;
			acc.value = val;
			ret = dl_fabric_send(v->b->fab, v->sess.host,
					     DL_MSG_BAR_WRITE, &acc,
					     sizeof(acc));
		} else {
			ret = dl_session_request(v, DL_MSG_BAR_READ, &acc,
						 sizeof(acc), &resp,
						 sizeof(resp));
			/* @resp is complete only on success. */
			if (!ret) {
				val = resp.value;
				if (copy_to_user(buf + done, &val, n))
					return -EFAULT;
			}
		}
		if (ret) {
			dev_err_ratelimited(dl_vdev_dev(v),
					    "BAR%u %s of %u bytes at 0x%llx failed: %d\n",
					    bar, write ? "write" : "read", n,
					    off, ret);
			return done ? done : -EIO;
		}
		done += n;
		off += n;
	}
	return done;
}

static ssize_t dl_vdev_rw(struct dl_vdev *v, char __user *buf, size_t count,
			  loff_t *ppos, bool write)
{
	unsigned int index = DL_VFIO_INDEX(*ppos);
	u64 off = *ppos & DL_VFIO_OFFSET_MASK;
	ssize_t ret;

	if (!count)
		return 0;
	switch (index) {
	case VFIO_PCI_CONFIG_REGION_INDEX:
		mutex_lock(&v->lock);
		ret = dl_config_rw(v, buf, count, off, write);
		mutex_unlock(&v->lock);
		break;
	case VFIO_PCI_BAR0_REGION_INDEX ... VFIO_PCI_BAR5_REGION_INDEX:
		ret = dl_vdev_bar_rw(v, index - VFIO_PCI_BAR0_REGION_INDEX,
				     buf, count, off, write);
		break;
	default:
		return -EINVAL;
	}
	if (ret > 0)
		*ppos += ret;
	return ret;
}

static ssize_t dl_vdev_read(struct vfio_device *vdev, char __user *buf,
			    size_t count, loff_t *ppos)
{
	return dl_vdev_rw(to_dl_vdev(vdev), buf, count, ppos, false);
}

static ssize_t dl_vdev_write(struct vfio_device *vdev, const char __user *buf,
			     size_t count, loff_t *ppos)
{
	return dl_vdev_rw(to_dl_vdev(vdev), (char __user *)buf, count, ppos,
			  true);
}

static long dl_vdev_get_info(struct dl_vdev *v, void __user *arg)
{
	unsigned long minsz = offsetofend(struct vfio_device_info, num_irqs);
	struct vfio_device_info info;

	if (copy_from_user(&info, arg, minsz))
		return -EFAULT;
	if (info.argsz < minsz)
		return -EINVAL;
	info.flags = VFIO_DEVICE_FLAGS_PCI;
	/* As vfio-pci says of a device it cannot reset alone. */
	if (!(v->info.flags & DL_DEV_F_NO_RESET))
		info.flags |= VFIO_DEVICE_FLAGS_RESET;
	info.num_regions = VFIO_PCI_NUM_REGIONS;
	info.num_irqs = VFIO_PCI_NUM_IRQS;
	return copy_to_user(arg, &info, minsz) ? -EFAULT : 0;
}

static long dl_vdev_get_region_info(struct dl_vdev *v, void __user *arg)
{
	unsigned long minsz = offsetofend(struct vfio_region_info, offset);
	struct vfio_info_cap caps = { .buf = NULL, .size = 0 };
	struct vfio_region_info info;
	unsigned int bar;
	int ret = 0;

	if (copy_from_user(&info, arg, minsz))
		return -EFAULT;
	if (info.argsz < minsz)
		return -EINVAL;

	info.cap_offset = 0;
	info.size = 0;
	info.flags = 0;
	switch (info.index) {
	case VFIO_PCI_CONFIG_REGION_INDEX:
		info.size = v->info.cfg_size;
		break;
	case VFIO_PCI_BAR0_REGION_INDEX ... VFIO_PCI_BAR5_REGION_INDEX:
		bar = info.index - VFIO_PCI_BAR0_REGION_INDEX;
		info.size = v->info.bar_size[bar];
		break;
	case VFIO_PCI_ROM_REGION_INDEX:
	case VFIO_PCI_VGA_REGION_INDEX:
		break;
	default:
		return -EINVAL;
	}
	if (info.size)
		info.flags = VFIO_REGION_INFO_FLAG_READ |
			     VFIO_REGION_INFO_FLAG_WRITE;
	info.offset = DL_VFIO_OFFSET(info.index);
	if (info.size && info.index <= VFIO_PCI_BAR5_REGION_INDEX) {
		/* Where the lender shows the BAR through the fabric. */
		mutex_lock(&v->lock);
		if (v->open)
			dl_mmap_fetch(v);
		mutex_unlock(&v->lock);
		ret = dl_mmap_region_info(v, info.index - VFIO_PCI_BAR0_REGION_INDEX,
					  &info, &caps);
		if (ret)
			return ret;
	}
	if (caps.size) {
		if (info.argsz < sizeof(info) + caps.size) {
			/* The VMM asks again with room for the capability. */
			info.argsz = sizeof(info) + caps.size;
			info.cap_offset = 0;
		} else {
			vfio_info_cap_shift(&caps, sizeof(info));
			if (copy_to_user(arg + sizeof(info), caps.buf,
					 caps.size))
				ret = -EFAULT;
			info.cap_offset = sizeof(info);
		}
		kfree(caps.buf);
		if (ret)
			return ret;
	}
	return copy_to_user(arg, &info, minsz) ? -EFAULT : 0;
}

static long dl_vdev_get_irq_info(struct dl_vdev *v, void __user *arg)
{
	unsigned long minsz = offsetofend(struct vfio_irq_info, count);
	struct vfio_irq_info info;
	int ret;

	if (copy_from_user(&info, arg, minsz))
		return -EFAULT;
	if (info.argsz < minsz || info.index >= VFIO_PCI_NUM_IRQS)
		return -EINVAL;
	ret = dl_irq_info(v, &info);
	if (ret)
		return ret;
	return copy_to_user(arg, &info, minsz) ? -EFAULT : 0;
}

static long dl_vdev_set_irqs(struct dl_vdev *v, void __user *arg)
{
	unsigned long minsz = offsetofend(struct vfio_irq_set, count);
	struct vfio_irq_info info = {};
	struct vfio_irq_set hdr;
	size_t data_size = 0;
	void *data = NULL;
	int ret;

	if (copy_from_user(&hdr, arg, minsz))
		return -EFAULT;
	if (hdr.index >= VFIO_PCI_NUM_IRQS)
		return -EINVAL;
	info.index = hdr.index;
	ret = dl_irq_info(v, &info);
	if (ret)
		return ret;
	ret = vfio_set_irqs_validate_and_prepare(&hdr, info.count,
						 VFIO_PCI_NUM_IRQS,
						 &data_size);
	if (ret)
		return ret;
	if (data_size) {
		data = memdup_user(arg + minsz, data_size);
		if (IS_ERR(data))
			return PTR_ERR(data);
	}
	mutex_lock(&v->lock);
	ret = dl_irq_set(v, &hdr, data);
	mutex_unlock(&v->lock);
	kfree(data);
	return ret;
}

static long dl_vdev_ioctl(struct vfio_device *vdev, unsigned int cmd,
			  unsigned long arg)
{
	struct dl_vdev *v = to_dl_vdev(vdev);
	void __user *uarg = (void __user *)arg;
	long ret;

	switch (cmd) {
	case VFIO_DEVICE_GET_INFO:
		return dl_vdev_get_info(v, uarg);
	case VFIO_DEVICE_GET_REGION_INFO:
		return dl_vdev_get_region_info(v, uarg);
	case VFIO_DEVICE_GET_IRQ_INFO:
		return dl_vdev_get_irq_info(v, uarg);
	case VFIO_DEVICE_SET_IRQS:
		return dl_vdev_set_irqs(v, uarg);
	case VFIO_DEVICE_RESET:
		/*
		 * As vfio-pci answers for a device without reset; its lender
		 * resets its group's bus once all of the group is back.
		 */
		if (v->info.flags & DL_DEV_F_NO_RESET)
			return -EINVAL;
		mutex_lock(&v->lock);
		ret = dl_vdev_reset(v);
		mutex_unlock(&v->lock);
		return ret;
	}
	return -ENOTTY;
}

static int dl_vdev_mmap(struct vfio_device *vdev, struct vm_area_struct *vma)
{
	return dl_mmap_mmap(to_dl_vdev(vdev), vma);
}

static void dl_vdev_dma_unmap(struct vfio_device *vdev, u64 iova, u64 length)
{
	unsigned int delay = READ_ONCE(dl_fault_unmap_delay_ms);

	dl_dma_unmap_range(to_dl_vdev(vdev), iova, length);
	/* Tests: the time a round trip to a stalled lender would take. */
	if (delay)
		msleep(delay);
}

static void dl_vdev_request_op(struct vfio_device *vdev, unsigned int count)
{
	struct dl_vdev *v = to_dl_vdev(vdev);

	dl_irq_signal_req(v);
	if (!(count % 10))
		dev_notice_ratelimited(dl_vdev_dev(v),
				       "waiting for the user to release the device (%u)\n",
				       count);
}

/**
 * dl_vdev_fault() - handler of %DL_MSG_DEV_FAULT: the lender's IOMMU
 * blocked a DMA of a device; logged.
 * @fab: the fabric.
 * @msg: the message.
 * @priv: the borrower.
 */
void dl_vdev_fault(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		   void *priv)
{
	const struct dl_dev_fault *f = msg->data;
	struct dl_borrower *b = priv;

	if (msg->len < sizeof(*f))
		return;
	dev_warn_ratelimited(b->dev, "remote device %u:%u: DMA %s at 0x%llx blocked by the lender\n",
			     msg->peer, le32_to_cpu(f->dev_id),
			     le32_to_cpu(f->flags) & 1 ? "write" : "read",
			     le64_to_cpu(f->iova));
}

/*
 * The session lost the device: the BARs' mappings go first, then the
 * user is told, unless its guest is stopped: after a migration the
 * device was taken over by the destination, and the source's QEMU must
 * not unplug it from a guest that runs elsewhere now. A guest that runs
 * here again is told then (dl_mig_run()).
 */
static void dl_vdev_lost(struct dl_vdev *v)
{
	dl_mmap_drop(v);
	if (!dl_mig_stopped(v))
		dl_irq_signal_lost(v);
}

/* How the session tells the mdev it lost its device. */
static const struct dl_session_ops dl_vdev_session_ops = {
	.lost = dl_vdev_lost,
};

/*
 * The command register or a BAR was written: the lender maps the
 * device's own BARs, and other devices' of the VM, where the guest has
 * them now.
 */
static void dl_vdev_bars_changed(struct dl_vdev *v)
{
	dl_bar_dma_sync(v);
	dl_p2p_sync(v);
}

/* What the virtual config space asks of DMA and of the device. */
static const struct dl_config_ops dl_vdev_config_ops = {
	.dma_enable = dl_dma_enable,
	.dma_disable = dl_dma_disable,
	.reset = dl_vdev_reset,
	.mem_decode = dl_mmap_decode,
	.bars_changed = dl_vdev_bars_changed,
};

static int dl_vdev_init(struct vfio_device *vdev)
{
	struct dl_vdev *v = to_dl_vdev(vdev);
	struct mdev_device *mdev = to_mdev_device(vdev->dev);

	v->b = container_of(mdev->type->parent, struct dl_borrower, parent);
	v->mtype = container_of(mdev->type, struct dl_mtype, type);
	INIT_LIST_HEAD(&v->node);
	mutex_init(&v->lock);
	dl_dma_init(v);
	dl_irq_init(v);
	dl_mmap_init(v);
	v->session_ops = &dl_vdev_session_ops;
	v->config_ops = &dl_vdev_config_ops;
	dl_session_init(v);
	dl_mig_init(v);
	return 0;
}

static void dl_vdev_release(struct vfio_device *vdev)
{
	struct dl_vdev *v = to_dl_vdev(vdev);

	dl_dma_destroy(v);
	dl_irq_destroy(v);
	mutex_destroy(&v->lock);
}

const struct vfio_device_ops dl_vdev_ops = {
	.name = "devlend-borrower",
	.init = dl_vdev_init,
	.release = dl_vdev_release,
	.open_device = dl_vdev_open,
	.close_device = dl_vdev_close,
	.read = dl_vdev_read,
	.write = dl_vdev_write,
	.ioctl = dl_vdev_ioctl,
	.mmap = dl_vdev_mmap,
	.request = dl_vdev_request_op,
	.dma_unmap = dl_vdev_dma_unmap,
	.bind_iommufd = vfio_iommufd_emulated_bind,
	.unbind_iommufd = vfio_iommufd_emulated_unbind,
	.attach_ioas = vfio_iommufd_emulated_attach_ioas,
	.detach_ioas = vfio_iommufd_emulated_detach_ioas,
};
