// SPDX-License-Identifier: GPL-2.0
/*
 * The mdev parent on the fabric adapter, its types and the mdev driver.
 *
 *   <adapter>/mdev_supported_types/devlend-any/    any class
 *   <adapter>/mdev_supported_types/devlend-nvme/   class 0x010802
 *   <adapter>/mdev_supported_types/devlend-net/    class 0x02xxxx
 *
 * (The types are the table of include/uapi/devlend_mdev_types.h; the
 * sysfs files are declared in Documentation/ABI/testing/sysfs-devlend.)
 *
 * (The mdev core names a type's directory <parent driver>-<sysfs_name>,
 * and the adapter's driver is "devlend".) available_instances counts the
 * remote devices of the type that are available and not targeted by an
 * mdev of this host, less the mdevs of the type that have not chosen one
 * yet. Creating an mdev takes one of them (it targets a free device of
 * its type from then on), or fails with -ENOSPC when there is none, as
 * mdevctl, libvirt, KubeVirt and Nova expect of a type (they create mdevs
 * while available_instances says they can). Writing remote_device points
 * it at another device, or at "any" (then it chooses when it is first
 * opened); a device another mdev of this host targets cannot be chosen
 * (-EBUSY). Another host may hold the device: then the open fails with
 * -EBUSY. A migration's destination is named before it is created
 * (remote.c, incoming_mdev): it takes the source's device, which the
 * source holds, without counting against the type's free ones.
 *
 * Each mdev has, besides what the mdev core gives it:
 *   remote_device  "any" or "<host-id>:<dev_id>"; writable while the mdev
 *                  is not open, with "any", "<host-id>:<dev_id>" or
 *                  "<lender-name>/<pci-address>"
 *   state          idle, borrowed, lost or returning
 *   open           1 while a VMM has the mdev open, else 0: removing it
 *                  then waits for the VMM to close it (see open_show())
 */
#include <linux/device.h>
#include <linux/mdev.h>
#include <linux/module.h>
#include <linux/string.h>
#include <linux/sysfs.h>
#include <linux/vfio.h>

#include "devlend_mdev_types.h"
#include "internal.h"

#define DL_MTYPE_DEF(n) {						\
	DL_MDEV_TYPE##n##_NAME, DL_MDEV_TYPE##n##_PRETTY,		\
	DL_MDEV_TYPE##n##_DESC,						\
	DL_MDEV_TYPE##n##_CLASS_MASK, DL_MDEV_TYPE##n##_CLASS_VAL	\
}

/* The table of devlend_mdev_types.h, shared with the devlend command. */
static const struct {
	const char *sysfs_name;
	const char *pretty_name;
	const char *desc;
	u32 class_mask;
	u32 class_val;
} dl_mtype_defs[DL_B_NR_TYPES] = {
	DL_MTYPE_DEF(0),
	DL_MTYPE_DEF(1),
	DL_MTYPE_DEF(2),
};

static_assert(DL_B_NR_TYPES == DL_MDEV_NR_TYPES);

static struct dl_borrower *dl_mtype_borrower(struct mdev_type *mtype)
{
	return container_of(mtype->parent, struct dl_borrower, parent);
}

/*
 * Remote devices of a type that are available and that no mdev of this
 * host targets, less the mdevs of the type that have not chosen one: each
 * mdev holds one on this host from its creation (see the top of the file).
 */
static unsigned int dl_mdev_available(struct dl_borrower *b,
				      const struct dl_mtype *mt)
{
	unsigned int nr = 0, pending = 0;
	struct dl_remote *r;
	struct dl_vdev *v;

	lockdep_assert_held(&b->lock);

	list_for_each_entry(r, &b->remotes, node)
		if (dl_remote_is_free(r) && dl_remote_matches(r, mt))
			nr++;
	list_for_each_entry(v, &b->vdevs, node)
		if (v->mtype == mt && !v->remote)
			pending++;
	return nr > pending ? nr - pending : 0;
}

static unsigned int dl_mdev_get_available(struct mdev_type *mtype)
{
	struct dl_mtype *mt = container_of(mtype, struct dl_mtype, type);
	struct dl_borrower *b = dl_mtype_borrower(mtype);
	unsigned int nr;

	mutex_lock(&b->lock);
	nr = dl_mdev_available(b, mt);
	mutex_unlock(&b->lock);
	return nr;
}

static ssize_t dl_mdev_show_description(struct mdev_type *mtype, char *buf)
{
	struct dl_mtype *mt = container_of(mtype, struct dl_mtype, type);

	return sysfs_emit(buf, "%s\n", mt->desc);
}

static ssize_t remote_device_show(struct device *dev,
				  struct device_attribute *attr, char *buf)
{
	struct dl_vdev *v = dev_get_drvdata(dev);
	ssize_t ret;

	mutex_lock(&v->lock);
	if (v->remote)
		ret = sysfs_emit(buf, "%u:%u\n", v->remote->host,
				 v->remote->dev_id);
	else
		ret = sysfs_emit(buf, "any\n");
	mutex_unlock(&v->lock);
	return ret;
}

/*
 * Points an mdev that is not open at another remote device, or at any.
 * A device another mdev of this host targets is refused (-EBUSY): one
 * mdev per device on a host, as available_instances counts them.
 */
static int dl_mdev_retarget(struct dl_vdev *v, const char *spec)
{
	struct dl_borrower *b = v->b;
	struct dl_remote *r = NULL, *old;
	int ret = 0;

	lockdep_assert_held(&v->lock);

	mutex_lock(&b->lock);
	if (strcmp(spec, "any")) {
		r = dl_remote_find(b, spec);
		if (!r) {
			ret = -ENODEV;
			goto out_unlock;
		}
		if (!dl_remote_matches(r, v->mtype)) {
			ret = -EINVAL;
			goto out_put;
		}
	}
	if (r == v->remote)
		goto out_put;	/* the reference taken above, if any */
	if (r && r->ntargets) {
		dev_err(dl_vdev_dev(v), "remote device %s is the target of another mdev of this host\n",
			spec);
		ret = -EBUSY;
		goto out_put;
	}
	if (r)
		r->ntargets++;
	old = v->remote;
	v->remote = r;
	if (old)
		old->ntargets--;
	r = old;
out_put:
	dl_remote_put(r);
out_unlock:
	mutex_unlock(&b->lock);
	return ret;
}

static ssize_t remote_device_store(struct device *dev,
				   struct device_attribute *attr,
				   const char *buf, size_t count)
{
	struct dl_vdev *v = dev_get_drvdata(dev);
	char spec[64], *s;
	int ret;

	if (count >= sizeof(spec))
		return -EINVAL;
	memcpy(spec, buf, count);
	spec[count] = '\0';
	/* strim() cuts trailing space in place but skips leading space. */
	s = strim(spec);

	mutex_lock(&v->lock);
	if (v->open)
		ret = -EBUSY;
	else
		ret = dl_mdev_retarget(v, s);
	mutex_unlock(&v->lock);
	return ret ? ret : count;
}
static DEVICE_ATTR_RW(remote_device);

static ssize_t state_show(struct device *dev, struct device_attribute *attr,
			  char *buf)
{
	static const char * const names[] = {
		[DL_VDEV_IDLE] = "idle",
		[DL_VDEV_BORROWED] = "borrowed",
		[DL_VDEV_LOST] = "lost",
		[DL_VDEV_RETURNING] = "returning",
		[DL_VDEV_INCOMING] = "incoming",
	};
	struct dl_vdev *v = dev_get_drvdata(dev);

	return sysfs_emit(buf, "%s\n", names[READ_ONCE(v->sess.state)]);
}
static DEVICE_ATTR_RO(state);

/**
 * open_show() - whether a VMM has the mdev open.
 * @dev: the mdev's device.
 * @attr: its "open" attribute.
 * @buf: where to print "1" or "0".
 *
 * The mdev core does not refuse to remove an open mdev: dl_mdev_remove()
 * has VFIO ask the user to let go (the REQ eventfd) and waits, in D state
 * and for as long as it takes, until the user has closed the device. QEMU
 * answers by unplugging the device from the running guest; a VMM that does
 * not answer (cloud-hypervisor) leaves the remove hanging. Tools read this
 * first to refuse instead (devlend mdev remove). The answer can be stale by
 * the time they write remove: reading it and removing are not one step.
 *
 * It is &dl_vdev.open, the driver's own record, read under &dl_vdev.lock,
 * rather than the VFIO core's open_count (under its dev_set->lock, which
 * is VFIO's): dl_vdev_open() sets it and dl_vdev_close() clears it under
 * that lock, so a read that meets an open or a close in progress waits for
 * it and tells how it ended, where open_count is already 1 during an
 * open_device that then fails and still 1 during close_device. Either one
 * misses a file that holds the device without having opened it, which
 * delays a remove as well: a VFIO cdev opened but not yet bound to iommufd.
 *
 * Return: the bytes printed.
 */
static ssize_t open_show(struct device *dev, struct device_attribute *attr,
			 char *buf)
{
	struct dl_vdev *v = dev_get_drvdata(dev);
	bool open;

	mutex_lock(&v->lock);
	open = v->open;
	mutex_unlock(&v->lock);
	return sysfs_emit(buf, "%d\n", open);
}
static DEVICE_ATTR_RO(open);

/**
 * migration_show() - the mdev's live migration: "incoming" (the next open,
 *	or this one, is a migration's destination), the VFIO migration
 *	state ("running", "stop", ...), or "unsupported" where VFIO cannot
 *	report the device's dirty pages (no CONFIG_IOMMUFD_DRIVER).
 * @dev: the mdev's device.
 * @attr: its "migration" attribute.
 * @buf: where to print it.
 *
 * Return: the bytes printed.
 */
static ssize_t migration_show(struct device *dev, struct device_attribute *attr,
			      char *buf)
{
	struct dl_vdev *v = dev_get_drvdata(dev);
	const char *s;

	mutex_lock(&v->lock);
	s = dl_mig_show(v);
	mutex_unlock(&v->lock);
	return sysfs_emit(buf, "%s\n", s);
}

/**
 * migration_store() - "incoming": the next open is a migration's
 *	destination (its remote_device must name the source's device);
 *	"none": it is not.
 * @dev: the mdev's device.
 * @attr: its "migration" attribute.
 * @buf: what was written.
 * @count: its bytes.
 *
 * Return: @count, -EINVAL, -EBUSY while open, or -EOPNOTSUPP.
 */
static ssize_t migration_store(struct device *dev,
			       struct device_attribute *attr, const char *buf,
			       size_t count)
{
	struct dl_vdev *v = dev_get_drvdata(dev);
	bool incoming;
	int ret;

	if (sysfs_streq(buf, "incoming"))
		incoming = true;
	else if (sysfs_streq(buf, "none"))
		incoming = false;
	else
		return -EINVAL;
	mutex_lock(&v->lock);
	ret = dl_mig_set_incoming(v, incoming);
	mutex_unlock(&v->lock);
	return ret ? ret : count;
}
static DEVICE_ATTR_RW(migration);

static struct attribute *dl_mdev_attrs[] = {
	&dev_attr_remote_device.attr,
	&dev_attr_state.attr,
	&dev_attr_open.attr,
	&dev_attr_migration.attr,
	NULL
};
ATTRIBUTE_GROUPS(dl_mdev);

/* Gives back the mdev's device on this host and forgets the mdev. */
static void dl_mdev_unlist(struct dl_vdev *v)
{
	struct dl_borrower *b = v->b;

	mutex_lock(&v->lock);
	dl_mdev_retarget(v, "any");
	mutex_unlock(&v->lock);

	mutex_lock(&b->lock);
	spin_lock_irq(&b->fire_lock);
	list_del(&v->node);
	spin_unlock_irq(&b->fire_lock);
	/* Its counters live on in the borrower's (debugfs). */
	b->kept_same += READ_ONCE(v->dma.kept_same);
	b->kept_moved += READ_ONCE(v->dma.kept_moved);
	b->kept_dropped += READ_ONCE(v->dma.kept_dropped);
	b->repin_held += READ_ONCE(v->dma.repin_held);
	b->intx_unmask_retries += READ_ONCE(v->irq.intx_unmask_retries);
	b->window_refused += READ_ONCE(v->dma.win_refused);
	b->direct_fires += atomic64_read(&v->irq.direct_fires);
	b->direct_fallbacks += READ_ONCE(v->irq.direct_fallbacks);
	mutex_unlock(&b->lock);
}

/*
 * An mdev named beforehand as a migration's destination for @r (its
 * incoming_mdev file) takes it whoever holds it, as long as it fits the
 * mdev's type and no other mdev of this host targets it; it borrows
 * nothing before its guest runs (migrate.c).
 */
static int dl_mdev_take_incoming(struct dl_vdev *v, struct dl_remote *r)
{
	lockdep_assert_held(&v->b->lock);

	if (!dl_mig_supported()) {
		dev_err(dl_vdev_dev(v), "named a migration's destination, but this kernel's VFIO cannot report a device's dirty pages (no CONFIG_IOMMUFD_DRIVER)\n");
		return -EOPNOTSUPP;
	}
	if (!dl_remote_matches(r, v->mtype)) {
		dev_err(dl_vdev_dev(v), "remote device %u:%u, named for this mdev's migration, is not of type %s\n",
			r->host, r->dev_id, v->mtype->type.sysfs_name);
		return -EINVAL;
	}
	if (r->ntargets) {
		dev_err(dl_vdev_dev(v), "remote device %u:%u, named for this mdev's migration, is the target of another mdev of this host\n",
			r->host, r->dev_id);
		return -EBUSY;
	}
	r->ntargets++;
	v->remote = dl_remote_get(r);
	/* Not yet visible to anyone: v->lock is not needed, nor is it taken. */
	v->mig.incoming = true;
	return 0;
}

static int dl_mdev_probe(struct mdev_device *mdev)
{
	struct dl_borrower *b;
	struct dl_remote *r;
	struct dl_vdev *v;
	int ret;

	v = vfio_alloc_device(dl_vdev, vdev, &mdev->dev, &dl_vdev_ops);
	if (IS_ERR(v))
		return PTR_ERR(v);
	b = v->b;

	/*
	 * The mdev takes the device it was named the migration destination
	 * for, or one of the type's instances, a device of its own from now
	 * on (until remote_device says otherwise), or is not created.
	 */
	mutex_lock(&b->lock);
	r = dl_remote_incoming_for(b, &mdev->uuid);
	if (r) {
		ret = dl_mdev_take_incoming(v, r);
		dl_remote_put(r);
		if (ret) {
			mutex_unlock(&b->lock);
			goto err_put_vdev;
		}
	} else if (dl_mdev_available(b, v->mtype)) {
		list_for_each_entry(r, &b->remotes, node) {
			if (dl_remote_is_free(r) && dl_remote_matches(r, v->mtype)) {
				r->ntargets++;
				v->remote = dl_remote_get(r);
				break;
			}
		}
	}
	if (!v->remote) {
		mutex_unlock(&b->lock);
		dev_err(&mdev->dev, "no available instance of %s: every device of the type is taken by an mdev of this host or borrowed\n",
			v->mtype->type.sysfs_name);
		ret = -ENOSPC;
		goto err_put_vdev;
	}
	spin_lock_irq(&b->fire_lock);
	list_add_tail(&v->node, &b->vdevs);
	spin_unlock_irq(&b->fire_lock);
	mutex_unlock(&b->lock);

	dev_set_drvdata(&mdev->dev, v);
	ret = vfio_register_emulated_iommu_dev(&v->vdev);
	if (ret)
		goto err_unlist;
	return 0;

err_unlist:
	dl_mdev_unlist(v);
err_put_vdev:
	vfio_put_device(&v->vdev);
	return ret;
}

static void dl_mdev_remove(struct mdev_device *mdev)
{
	struct dl_vdev *v = dev_get_drvdata(&mdev->dev);

	/* Asks the user to let go (request), waits until it has closed. */
	vfio_unregister_group_dev(&v->vdev);
	dl_mdev_unlist(v);
	vfio_put_device(&v->vdev);
}

static struct mdev_driver dl_mdev_driver = {
	.device_api = VFIO_DEVICE_API_PCI_STRING,
	.driver = {
		.name = "devlend-borrower",
		.owner = THIS_MODULE,
		.mod_name = KBUILD_MODNAME,
		.dev_groups = dl_mdev_groups,
	},
	.probe = dl_mdev_probe,
	.remove = dl_mdev_remove,
	.get_available = dl_mdev_get_available,
	.show_description = dl_mdev_show_description,
};

/**
 * dl_parent_register() - register the mdev parent on the adapter.
 * @b: the borrower.
 *
 * Return: 0 or -errno.
 */
int dl_parent_register(struct dl_borrower *b)
{
	unsigned int i;
	int ret;

	for (i = 0; i < DL_B_NR_TYPES; i++) {
		b->types[i].type.sysfs_name = dl_mtype_defs[i].sysfs_name;
		b->types[i].type.pretty_name = dl_mtype_defs[i].pretty_name;
		b->types[i].desc = dl_mtype_defs[i].desc;
		b->types[i].class_mask = dl_mtype_defs[i].class_mask;
		b->types[i].class_val = dl_mtype_defs[i].class_val;
		b->type_ptrs[i] = &b->types[i].type;
	}
	ret = mdev_register_parent(&b->parent, b->dev, &dl_mdev_driver,
				   b->type_ptrs, DL_B_NR_TYPES);
	if (ret)
		return ret;
	b->parent_registered = true;
	return 0;
}

/**
 * dl_parent_unregister() - unregister it, removing every mdev.
 * @b: the borrower.
 */
void dl_parent_unregister(struct dl_borrower *b)
{
	if (!b->parent_registered)
		return;
	mdev_unregister_parent(&b->parent);
	b->parent_registered = false;
}

/**
 * dl_parent_driver_register() - register the mdev driver (module init).
 *
 * Return: 0 or -errno.
 */
int dl_parent_driver_register(void)
{
	return mdev_register_driver(&dl_mdev_driver);
}

/**
 * dl_parent_driver_unregister() - unregister it (module exit).
 */
void dl_parent_driver_unregister(void)
{
	mdev_unregister_driver(&dl_mdev_driver);
}
