// SPDX-License-Identifier: GPL-2.0
/*
 * The remote device table: what each lender on the fabric offers.
 *
 * When a peer comes up, or posts DL_MSG_DEV_CHANGED, its devices are read
 * again (DL_MSG_DEV_LIST, then DL_MSG_DEV_INFO for each) by a work item,
 * never by the fabric's receive work, which must not wait for responses.
 * Entries that the lender no longer lists, or that belong to an earlier
 * incarnation of it, leave the table; when a peer goes down its entries
 * stay, marked gone, until it comes back. An mdev that holds an entry
 * keeps a reference to it, so an entry that left the table stays valid
 * (and gone) for it.
 *
 * Each entry is a directory <adapter>/fabric/remote/<host>:<dev_id>/ with
 * lender, name, vendor, device, class, state and borrower, and the one
 * writable file incoming_mdev (see incoming_mdev_store()). Its readers and
 * writers take b->lock, so directories are never removed with b->lock held.
 *
 * Everything a lender answers is checked: counts and lengths against the
 * buffers, ids against the request, names made printable.
 */
#include <linux/ctype.h>
#include <linux/delay.h>
#include <linux/jiffies.h>
#include <linux/kernel.h>
#include <linux/kobject.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>
#include <linux/uuid.h>

#include "internal.h"

/* Most devices read from one lender. */
#define DL_REMOTE_MAX_PER_LENDER	256

static struct dl_remote *to_dl_remote(struct kobject *kobj)
{
	return container_of(kobj, struct dl_remote, kobj);
}

static void dl_remote_release(struct kobject *kobj)
{
	kfree(to_dl_remote(kobj));
}

/**
 * dl_remote_get() - take a reference to an entry.
 * @r: the entry.
 *
 * Return: @r.
 */
struct dl_remote *dl_remote_get(struct dl_remote *r)
{
	kobject_get(&r->kobj);
	return r;
}

/**
 * dl_remote_put() - drop a reference to an entry.
 * @r: the entry, or NULL.
 */
void dl_remote_put(struct dl_remote *r)
{
	if (r)
		kobject_put(&r->kobj);
}

static const char *dl_remote_state_name(const struct dl_remote *r)
{
	if (r->gone)
		return "gone";
	switch (r->info.state) {
	case DL_LENT_AVAILABLE:
		return "available";
	case DL_LENT_BORROWED:
		return "borrowed";
	case DL_LENT_RETURNING:
		return "returning";
	case DL_LENT_FAILED:
		return "failed";
	}
	return "unknown";
}

enum dl_remote_attr_id {
	DL_RA_LENDER,
	DL_RA_NAME,
	DL_RA_VENDOR,
	DL_RA_DEVICE,
	DL_RA_CLASS,
	DL_RA_STATE,
	DL_RA_BORROWER,
	DL_RA_PF,
};

struct dl_remote_attr {
	struct kobj_attribute attr;
	enum dl_remote_attr_id id;
};

static ssize_t dl_remote_show(struct kobject *kobj, struct kobj_attribute *attr,
			      char *buf)
{
	struct dl_remote *r = to_dl_remote(kobj);
	struct dl_borrower *b = r->b;
	enum dl_remote_attr_id id;
	ssize_t ret = 0;

	id = container_of(attr, struct dl_remote_attr, attr)->id;
	mutex_lock(&b->lock);
	switch (id) {
	case DL_RA_LENDER:
		ret = sysfs_emit(buf, "%s\n", r->lender);
		break;
	case DL_RA_NAME:
		ret = sysfs_emit(buf, "%s\n", r->info.name);
		break;
	case DL_RA_VENDOR:
		ret = sysfs_emit(buf, "0x%04x\n", r->info.vendor);
		break;
	case DL_RA_DEVICE:
		ret = sysfs_emit(buf, "0x%04x\n", r->info.device);
		break;
	case DL_RA_CLASS:
		ret = sysfs_emit(buf, "0x%06x\n", r->info.class_rev >> 8);
		break;
	case DL_RA_STATE:
		ret = sysfs_emit(buf, "%s\n", dl_remote_state_name(r));
		break;
	case DL_RA_BORROWER:
		if (r->gone || r->info.borrower == DL_NO_HOST)
			ret = sysfs_emit(buf, "\n");
		else
			ret = sysfs_emit(buf, "%u\n", r->info.borrower);
		break;
	case DL_RA_PF:
		ret = sysfs_emit(buf, "%s\n", r->info.pf_name);
		break;
	}
	mutex_unlock(&b->lock);
	return ret;
}

#define DL_REMOTE_ATTR(_name, _id)					\
	static struct dl_remote_attr dl_remote_attr_##_name = {		\
		.attr = __ATTR(_name, 0444, dl_remote_show, NULL),	\
		.id = _id,						\
	}

DL_REMOTE_ATTR(lender, DL_RA_LENDER);
DL_REMOTE_ATTR(name, DL_RA_NAME);
DL_REMOTE_ATTR(vendor, DL_RA_VENDOR);
DL_REMOTE_ATTR(device, DL_RA_DEVICE);
DL_REMOTE_ATTR(class, DL_RA_CLASS);
DL_REMOTE_ATTR(state, DL_RA_STATE);
DL_REMOTE_ATTR(borrower, DL_RA_BORROWER);
/* A virtual function's PF on the lender; empty for other devices. */
DL_REMOTE_ATTR(pf, DL_RA_PF);

static ssize_t incoming_mdev_show(struct kobject *kobj,
				  struct kobj_attribute *attr, char *buf)
{
	struct dl_remote *r = to_dl_remote(kobj);
	ssize_t ret;

	mutex_lock(&r->b->lock);
	if (r->incoming_set)
		ret = sysfs_emit(buf, "%pUl\n", &r->incoming_uuid);
	else
		ret = sysfs_emit(buf, "\n");
	mutex_unlock(&r->b->lock);
	return ret;
}

/**
 * incoming_mdev_store() - name the mdev that is to be this device's
 *	migration destination on this host, before it is created.
 * @kobj: the entry's directory.
 * @attr: its incoming_mdev file.
 * @buf: an mdev UUID, or "none" (or nothing) to take it back.
 * @count: its bytes.
 *
 * A migration's destination must have an mdev for the device its source
 * holds, and creating an mdev takes a free device of its type: while the
 * source holds the only one, there is none, and the create fails as
 * mdevctl and libvirt expect of a type with no instance left. An mdev
 * created with the UUID written here takes this device instead, free or
 * not, as a migration's destination (it borrows nothing until its guest
 * runs: the lender hands it over then). One UUID per device, kept until
 * such an mdev is created or the entry leaves the table.
 *
 * Return: @count; -EINVAL for what is not a UUID; -ENODEV for an entry
 * that left the table. (Where this build offers no migration, the
 * create fails: dl_mdev_take_incoming().)
 */
static ssize_t incoming_mdev_store(struct kobject *kobj,
				   struct kobj_attribute *attr,
				   const char *buf, size_t count)
{
	struct dl_remote *r = to_dl_remote(kobj);
	char text[UUID_STRING_LEN + 2], *s;
	bool set = true;
	guid_t uuid;
	int ret = 0;

	if (count >= sizeof(text))
		return -EINVAL;
	memcpy(text, buf, count);
	text[count] = '\0';
	s = strim(text);
	if (!*s || !strcmp(s, "none"))
		set = false;
	else if (guid_parse(s, &uuid))
		return -EINVAL;

	mutex_lock(&r->b->lock);
	if (set && r->gone) {
		ret = -ENODEV;
	} else {
		r->incoming_set = set;
		if (set)
			guid_copy(&r->incoming_uuid, &uuid);
	}
	mutex_unlock(&r->b->lock);
	return ret ? ret : count;
}

static struct kobj_attribute dl_remote_attr_incoming_mdev =
	__ATTR_RW(incoming_mdev);

static struct attribute *dl_remote_attrs[] = {
	&dl_remote_attr_lender.attr.attr,
	&dl_remote_attr_name.attr.attr,
	&dl_remote_attr_vendor.attr.attr,
	&dl_remote_attr_device.attr.attr,
	&dl_remote_attr_class.attr.attr,
	&dl_remote_attr_state.attr.attr,
	&dl_remote_attr_borrower.attr.attr,
	&dl_remote_attr_pf.attr.attr,
	&dl_remote_attr_incoming_mdev.attr,
	NULL
};
ATTRIBUTE_GROUPS(dl_remote);

static const struct kobj_type dl_remote_ktype = {
	.release = dl_remote_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = dl_remote_groups,
};

/* Copies a name from a peer, replacing what sysfs and logs should not see. */
static void dl_remote_copy_name(char *dst, size_t size, const char *src,
				size_t src_len)
{
	size_t i;

	for (i = 0; i + 1 < size && i < src_len && src[i]; i++)
		dst[i] = isgraph(src[i]) && src[i] != '/' ? src[i] : '?';
	dst[i] = '\0';
}

/**
 * dl_rinfo_decode() - decode a lender's device description.
 * @ri: where to put it.
 * @di: the wire form, as received.
 */
void dl_rinfo_decode(struct dl_rinfo *ri, const struct dl_dev_info *di)
{
	unsigned int i;

	ri->vendor = le16_to_cpu(di->vendor);
	ri->device = le16_to_cpu(di->device);
	ri->class_rev = le32_to_cpu(di->class_rev);
	ri->state = le16_to_cpu(di->state);
	ri->borrower = le16_to_cpu(di->borrower);
	ri->flags = le32_to_cpu(di->flags);
	ri->msix_count = min_t(u16, le16_to_cpu(di->msix_count), 2048);
	ri->msi_count = min_t(u16, le16_to_cpu(di->msi_count), 32);
	ri->cfg_size = le32_to_cpu(di->cfg_size) == PCI_CFG_SPACE_EXP_SIZE ?
		       PCI_CFG_SPACE_EXP_SIZE : PCI_CFG_SPACE_SIZE;
	for (i = 0; i < DL_NUM_BARS; i++) {
		u64 size = le64_to_cpu(di->bars[i].size);
		u32 flags = le32_to_cpu(di->bars[i].flags);

		/*
		 * A BAR is a power of two; anything else is not offered. Nor
		 * are I/O BARs: no lender serves them (lender/bar.c).
		 */
		if (!(flags & DL_BAR_F_PRESENT) || !size ||
		    !is_power_of_2(size) || (flags & DL_BAR_F_IO)) {
			size = 0;
			flags = 0;
		}
		ri->bar_size[i] = size;
		ri->bar_flags[i] = flags;
	}
	dl_remote_copy_name(ri->name, sizeof(ri->name), di->name,
			    sizeof(di->name));
	ri->pf_name[0] = '\0';
}

/**
 * dl_remote_matches() - whether an entry fits an mdev type.
 * @r: the entry.
 * @mt: the type.
 *
 * Return: true if the device's class matches the type.
 */
bool dl_remote_matches(const struct dl_remote *r, const struct dl_mtype *mt)
{
	return ((r->info.class_rev >> 8) & mt->class_mask) == mt->class_val;
}

/**
 * dl_remote_is_free() - whether an entry can be taken by an mdev.
 * @r: the entry; caller holds b->lock.
 *
 * Return: true if it is listed, available and no mdev targets it.
 */
bool dl_remote_is_free(const struct dl_remote *r)
{
	lockdep_assert_held(&r->b->lock);

	return !r->gone && !r->ntargets && r->info.state == DL_LENT_AVAILABLE;
}

/**
 * dl_remote_find() - look an entry up the way a user names it.
 * @b: the borrower; caller holds b->lock.
 * @spec: "<host-id>:<dev_id>" or "<lender-name>/<pci-address>".
 *
 * Return: the entry with a reference, or NULL.
 */
struct dl_remote *dl_remote_find(struct dl_borrower *b, const char *spec)
{
	const char *slash = strchr(spec, '/');
	struct dl_remote *r;
	u32 host, dev_id;
	char extra;

	lockdep_assert_held(&b->lock);

	if (!slash && sscanf(spec, "%u:%u%c", &host, &dev_id, &extra) != 2)
		return NULL;
	list_for_each_entry(r, &b->remotes, node) {
		if (r->gone)
			continue;
		if (!slash && r->host == host && r->dev_id == dev_id)
			return dl_remote_get(r);
		if (slash && strlen(r->lender) == slash - spec &&
		    !strncmp(r->lender, spec, slash - spec) &&
		    !strcmp(r->info.name, slash + 1))
			return dl_remote_get(r);
	}
	return NULL;
}

/**
 * dl_remote_incoming_for() - the entry an mdev being created is to be the
 *	migration destination for (incoming_mdev_store()).
 * @b: the borrower; caller holds b->lock.
 * @uuid: the new mdev's UUID.
 *
 * The entry's declaration is used up.
 *
 * Return: the entry with a reference, or NULL when none names @uuid.
 */
struct dl_remote *dl_remote_incoming_for(struct dl_borrower *b,
					 const guid_t *uuid)
{
	struct dl_remote *r;

	lockdep_assert_held(&b->lock);

	list_for_each_entry(r, &b->remotes, node) {
		if (r->gone || !r->incoming_set ||
		    !guid_equal(&r->incoming_uuid, uuid))
			continue;
		r->incoming_set = false;
		return dl_remote_get(r);
	}
	return NULL;
}

/*
 * Tells the mdev that has the entry open, if any, that the entry says the
 * device is no longer ours (its session takes the borrow away).
 */
static void dl_remote_check_owner(struct dl_remote *r, const char *why)
{
	lockdep_assert_held(&r->b->lock);

	if (r->owner)
		r->owner->lost(r->owner, r, why);
}

/* Unlinks an entry; the caller removes its directory without b->lock. */
static void dl_remote_unlink(struct dl_remote *r, struct list_head *dead,
			     const char *why)
{
	lockdep_assert_held(&r->b->lock);

	r->gone = true;
	dl_remote_check_owner(r, why);
	list_move_tail(&r->node, dead);
}

static void dl_remote_reap(struct list_head *dead)
{
	struct dl_remote *r, *tmp;

	list_for_each_entry_safe(r, tmp, dead, node) {
		list_del_init(&r->node);
		kobject_del(&r->kobj);
		dl_remote_put(r);
	}
}

static int dl_remote_list(struct dl_borrower *b, u32 peer, u32 *ids,
			  unsigned int max, unsigned int *nr)
{
	struct dl_dev_list *list;
	struct dl_dev_ref ref = {};
	unsigned int n = 0, i, count;
	size_t len;
	u32 start = 0, id = 0;
	int ret;

	list = kmalloc(sizeof(*list), GFP_KERNEL);
	if (!list)
		return -ENOMEM;
	for (;;) {
		ref.dev_id = cpu_to_le32(start);
		ret = dl_fabric_request(b->fab, peer, DL_MSG_DEV_LIST, &ref,
					sizeof(ref), list, sizeof(*list), &len,
					DL_B_TIMEOUT_MS);
		if (ret)
			goto out_free;
		count = le32_to_cpu(list->count);
		if (len < offsetof(struct dl_dev_list, ids) ||
		    count > DL_DEV_LIST_MAX ||
		    len < offsetof(struct dl_dev_list, ids) + count * 4) {
			ret = -EPROTO;
			goto out_free;
		}
		for (i = 0; i < count; i++) {
			id = le32_to_cpu(list->ids[i]);
			if (id < start || (n && id <= ids[n - 1])) {
				ret = -EPROTO;
				goto out_free;
			}
			if (n == max)
				break;
			ids[n++] = id;
		}
		if (count < DL_DEV_LIST_MAX || n == max || id == U32_MAX)
			break;
		start = id + 1;
	}
	*nr = n;
out_free:
	kfree(list);
	return ret;
}

/*
 * Asks for the extension first; a lender without it refuses the flag
 * (-EINVAL) and is asked again without: its devices have no PF name.
 */
static int dl_remote_info(struct dl_borrower *b, u32 peer, u32 dev_id,
			  struct dl_rinfo *ri)
{
	struct dl_dev_ref ref = {
		.dev_id = cpu_to_le32(dev_id),
		.flags = cpu_to_le32(DL_DEV_REF_F_INFO_EXT),
	};
	struct dl_dev_info_full di = {};
	size_t len;
	int ret;

	ret = dl_fabric_request(b->fab, peer, DL_MSG_DEV_INFO, &ref,
				sizeof(ref), &di, sizeof(di), &len,
				DL_B_TIMEOUT_MS);
	if (ret == -EINVAL) {
		ref.flags = 0;
		ret = dl_fabric_request(b->fab, peer, DL_MSG_DEV_INFO, &ref,
					sizeof(ref), &di.info, sizeof(di.info),
					&len, DL_B_TIMEOUT_MS);
	}
	if (ret)
		return ret;
	if (len < sizeof(di.info) || le32_to_cpu(di.info.dev_id) != dev_id)
		return -EPROTO;
	dl_rinfo_decode(ri, &di.info);
	/* Absent (old lender) or zero: no PF name. */
	if (len >= sizeof(di) && (ri->flags & DL_DEV_F_VF))
		dl_remote_copy_name(ri->pf_name, sizeof(ri->pf_name),
				    di.ext.pf_name, sizeof(di.ext.pf_name));
	ri->group = len >= sizeof(di) ? le32_to_cpu(di.ext.group) : 0;
	return 0;
}

static struct dl_remote *dl_remote_lookup(struct dl_borrower *b, u32 peer,
					  u32 dev_id)
{
	struct dl_remote *r;

	lockdep_assert_held(&b->lock);

	list_for_each_entry(r, &b->remotes, node)
		if (r->host == peer && r->dev_id == dev_id)
			return r;
	return NULL;
}

static void dl_remote_update(struct dl_borrower *b, u32 peer,
			     const struct dl_fabric_peer_info *pi,
			     const u32 *ids, const struct dl_rinfo *infos,
			     unsigned int nr, u64 start_seq)
{
	struct dl_remote *r, *tmp;
	LIST_HEAD(dead);
	unsigned int i;
	char name[24];
	int ret;

	mutex_lock(&b->lock);
	if (b->dying)
		goto out_unlock;

	/* Entries of an earlier incarnation, or no longer listed, leave. */
	list_for_each_entry_safe(r, tmp, &b->remotes, node) {
		if (r->host != peer)
			continue;
		for (i = 0; i < nr; i++)
			if (ids[i] == r->dev_id)
				break;
		if (r->incarnation != pi->incarnation)
			dl_remote_unlink(r, &dead, "the lender restarted");
		else if (i == nr)
			dl_remote_unlink(r, &dead, "the lender no longer offers it");
	}

	/*
	 * A restarted lender numbers its devices from 1 again, so a new
	 * entry may want the directory name of a dead one: remove those
	 * first. Not under b->lock: removal waits for the readers of the
	 * directory, and they take b->lock. Nothing adds or removes entries
	 * meanwhile: only this work item does, and dl_remote_remove_all()
	 * once no scan can run.
	 */
	if (!list_empty(&dead)) {
		mutex_unlock(&b->lock);
		dl_remote_reap(&dead);
		mutex_lock(&b->lock);
		if (b->dying)
			goto out_unlock;
	}

	for (i = 0; i < nr; i++) {
		r = dl_remote_lookup(b, peer, ids[i]);
		if (r) {
			r->info = infos[i];
			r->gone = false;
			/* Unless it was borrowed after the lender answered. */
			if (r->borrow_seq <= start_seq &&
			    (r->info.state != DL_LENT_BORROWED ||
			     r->info.borrower != b->host_id))
				dl_remote_check_owner(r, "the lender took it back");
			continue;
		}
		r = kzalloc(sizeof(*r), GFP_KERNEL);
		if (!r)
			break;
		INIT_LIST_HEAD(&r->node);
		r->b = b;
		r->host = peer;
		r->dev_id = ids[i];
		r->incarnation = pi->incarnation;
		strscpy(r->lender, pi->name, sizeof(r->lender));
		r->info = infos[i];
		snprintf(name, sizeof(name), "%u:%u", peer, ids[i]);
		ret = kobject_init_and_add(&r->kobj, &dl_remote_ktype,
					   b->remote_kobj, "%s", name);
		if (ret) {
			/* A later scan of this lender tries again. */
			dev_warn_ratelimited(b->dev, "cannot add remote device %s (%s on %s): %d\n",
					     name, r->info.name, r->lender,
					     ret);
			kobject_put(&r->kobj);
			continue;
		}
		list_add_tail(&r->node, &b->remotes);
		dev_info_ratelimited(b->dev, "remote device %s: %s on %s, %04x:%04x class %06x\n",
				     name, r->info.name, r->lender,
				     r->info.vendor, r->info.device,
				     r->info.class_rev >> 8);
	}
out_unlock:
	mutex_unlock(&b->lock);
	dl_remote_reap(&dead);
}

static void dl_remote_scan_peer(struct dl_borrower *b, u32 peer)
{
	struct dl_fabric_peer_info pi, now;
	struct dl_rinfo *infos;
	unsigned int nr = 0, i, tries;
	u64 start_seq;
	u32 *ids;
	int ret;

	ret = dl_fabric_peer_info(b->fab, peer, &pi);
	if (ret || !pi.up)
		return;
	mutex_lock(&b->lock);
	start_seq = b->borrow_seq;
	mutex_unlock(&b->lock);

	ids = kcalloc(DL_REMOTE_MAX_PER_LENDER, sizeof(*ids), GFP_KERNEL);
	infos = kcalloc(DL_REMOTE_MAX_PER_LENDER, sizeof(*infos), GFP_KERNEL);
	if (!ids || !infos)
		goto out_free;

	ret = dl_remote_list(b, peer, ids, DL_REMOTE_MAX_PER_LENDER, &nr);
	if (ret == -EOPNOTSUPP) {
		/* The peer runs no lender (any more): it lends nothing. */
		nr = 0;
		ret = 0;
	}
	if (ret) {
		dev_warn_ratelimited(b->dev, "cannot list the devices of peer %u (%s): %d\n",
				     peer, pi.name, ret);
		goto out_free;
	}
	for (i = 0; i < nr; i++) {
		/* EIO: the device is resetting or being taken back. */
		for (tries = 0; ; tries++) {
			ret = dl_remote_info(b, peer, ids[i], &infos[i]);
			if (ret != -EIO || tries >= DL_B_BUSY_TRIES)
				break;
			msleep(DL_B_BUSY_MS);
		}
		if (ret == -ENODEV) {
			/* Unlent meanwhile: drop it from this scan. */
			memmove(&ids[i], &ids[i + 1], (nr - i - 1) * sizeof(*ids));
			nr--;
			i--;
			continue;
		}
		if (ret) {
			dev_warn_ratelimited(b->dev, "cannot read device %u of peer %u (%s): %d\n",
					     ids[i], peer, pi.name, ret);
			goto out_free;
		}
	}
	/*
	 * The answers are of the incarnation the lender has now. If that is
	 * not the one read before asking, they must not refresh entries of
	 * the old one: the restart's link-up queued a scan after this one.
	 */
	ret = dl_fabric_peer_info(b->fab, peer, &now);
	if (ret || !now.up || now.incarnation != pi.incarnation) {
		dev_dbg_ratelimited(b->dev, "peer %u restarted during its scan; scanned again\n",
				    peer);
		goto out_free;
	}
	dl_remote_update(b, peer, &pi, ids, infos, nr, start_seq);
out_free:
	kfree(infos);
	kfree(ids);
}

/**
 * dl_remote_scan_work() - read the device lists of the lenders that asked.
 * @work: &dl_borrower.scan_work.
 */
void dl_remote_scan_work(struct work_struct *work)
{
	struct dl_borrower *b = container_of(work, struct dl_borrower,
					     scan_work);
	unsigned long peer;

	for (;;) {
		mutex_lock(&b->lock);
		if (b->dying || !b->scan_pending) {
			mutex_unlock(&b->lock);
			return;
		}
		/*
		 * Round the peers, from the one after the last scanned: a
		 * lender that asks again during its own scan (DEV_CHANGED
		 * floods) must not keep the others from being read.
		 */
		peer = find_next_bit(&b->scan_pending, BITS_PER_LONG,
				     b->scan_next);
		if (peer >= BITS_PER_LONG)
			peer = __ffs(b->scan_pending);
		b->scan_next = peer + 1;
		__clear_bit(peer, &b->scan_pending);
		mutex_unlock(&b->lock);

		dl_remote_scan_peer(b, peer);
	}
}

/**
 * dl_remote_rescan() - read a lender's devices again, from a work item.
 * @b: the borrower.
 * @peer: the lender.
 */
void dl_remote_rescan(struct dl_borrower *b, u32 peer)
{
	if (peer >= BITS_PER_LONG)
		return;
	mutex_lock(&b->lock);
	if (!b->dying) {
		__set_bit(peer, &b->scan_pending);
		queue_work(system_unbound_wq, &b->scan_work);
	}
	mutex_unlock(&b->lock);
}

/**
 * dl_remote_check() - a lender refused a request about a device we hold:
 *	read its devices again, at most once a second, to learn whether it
 *	took the device back (e.g. after it saw this host down for a while).
 * @b: the borrower.
 * @peer: the lender.
 */
void dl_remote_check(struct dl_borrower *b, u32 peer)
{
	bool scan;

	mutex_lock(&b->lock);
	scan = time_after(jiffies, b->check_jiffies + HZ);
	if (scan)
		b->check_jiffies = jiffies;
	mutex_unlock(&b->lock);
	if (scan)
		dl_remote_rescan(b, peer);
}

/**
 * dl_remote_peer_up() - a peer came up: read what it lends.
 * @b: the borrower.
 * @peer: the peer.
 */
void dl_remote_peer_up(struct dl_borrower *b, u32 peer)
{
	dl_remote_rescan(b, peer);
}

/**
 * dl_remote_peer_down() - a peer went down: its devices are gone.
 * @b: the borrower.
 * @peer: the peer.
 *
 * The mdevs that held one of them see an error.
 */
void dl_remote_peer_down(struct dl_borrower *b, u32 peer)
{
	struct dl_remote *r;

	mutex_lock(&b->lock);
	list_for_each_entry(r, &b->remotes, node) {
		if (r->host != peer)
			continue;
		r->gone = true;
		dl_remote_check_owner(r, "the lender went down");
	}
	mutex_unlock(&b->lock);
}

/**
 * dl_remote_changed() - handler of %DL_MSG_DEV_CHANGED: read the lender's
 * devices again, from a work item.
 * @fab: the fabric.
 * @msg: the message.
 * @priv: the borrower.
 */
void dl_remote_changed(struct dl_fabric *fab, const struct dl_fabric_msg *msg,
		       void *priv)
{
	struct dl_borrower *b = priv;

	if (msg->len < sizeof(struct dl_dev_ref)) {
		dev_dbg_ratelimited(b->dev, "peer %u: short DEV_CHANGED\n",
				    msg->peer);
		return;
	}
	dl_remote_rescan(b, msg->peer);
}

/**
 * dl_remote_add_dir() - create <adapter>/fabric/remote/.
 * @b: the borrower.
 *
 * Return: 0 or -ENOMEM.
 */
int dl_remote_add_dir(struct dl_borrower *b)
{
	b->remote_kobj = kobject_create_and_add("remote",
						dl_fabric_sysfs_dir(b->fab));
	return b->remote_kobj ? 0 : -ENOMEM;
}

/**
 * dl_remote_remove_all() - empty the table and remove remote/.
 * @b: the borrower, whose mdevs are gone.
 */
void dl_remote_remove_all(struct dl_borrower *b)
{
	struct dl_remote *r, *tmp;
	LIST_HEAD(dead);

	mutex_lock(&b->lock);
	list_for_each_entry_safe(r, tmp, &b->remotes, node)
		dl_remote_unlink(r, &dead, "the fabric went away");
	mutex_unlock(&b->lock);
	dl_remote_reap(&dead);

	if (b->remote_kobj) {
		kobject_del(b->remote_kobj);
		kobject_put(b->remote_kobj);
		b->remote_kobj = NULL;
	}
}
