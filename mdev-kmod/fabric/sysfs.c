// SPDX-License-Identifier: GPL-2.0
/*
 * sysfs on the fabric adapter, one value per file:
 *
 *   <adapter>/fabric/host_id              this host's id
 *   <adapter>/fabric/fabric_id            the control area's fabric id, hex
 *   <adapter>/fabric/proto                highest protocol version spoken
 *   <adapter>/fabric/peers/<id>/state     up | down
 *   <adapter>/fabric/peers/<id>/name      the peer's host name
 *   <adapter>/fabric/peers/<id>/proto     negotiated version, 0 if down
 *   <adapter>/fabric/peers/<id>/window    PCI address of its window, or
 *                                         an empty line
 *   <adapter>/fabric/peers/<id>/heartbeat_age_ms
 *                                         since its heartbeat last moved,
 *                                         empty if not watched
 *
 * Attribute groups cannot nest directories, so fabric/ and the peer
 * directories are kobjects of their own under the adapter.
 */
#include <linux/device.h>
#include <linux/jiffies.h>
#include <linux/kobject.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>

#include "internal.h"

struct dl_sysfs_node {
	struct kobject kobj;
	struct dl_fabric *fab;
	struct dl_peer *peer;
};

static struct dl_sysfs_node *to_dl_sysfs_node(struct kobject *kobj)
{
	return container_of(kobj, struct dl_sysfs_node, kobj);
}

static void dl_sysfs_release(struct kobject *kobj)
{
	kfree(to_dl_sysfs_node(kobj));
}

static ssize_t dl_host_id_show(struct kobject *kobj,
			       struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", to_dl_sysfs_node(kobj)->fab->host_id);
}

static ssize_t dl_fabric_id_show(struct kobject *kobj,
				 struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%016llx\n",
			  to_dl_sysfs_node(kobj)->fab->geom.fabric_id);
}

static ssize_t dl_fabric_proto_show(struct kobject *kobj,
				    struct kobj_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", DL_PROTO_MAX);
}

static struct kobj_attribute dl_attr_host_id =
	__ATTR(host_id, 0444, dl_host_id_show, NULL);
static struct kobj_attribute dl_attr_fabric_id =
	__ATTR(fabric_id, 0444, dl_fabric_id_show, NULL);
static struct kobj_attribute dl_attr_fabric_proto =
	__ATTR(proto, 0444, dl_fabric_proto_show, NULL);

static struct attribute *dl_fabric_attrs[] = {
	&dl_attr_host_id.attr,
	&dl_attr_fabric_id.attr,
	&dl_attr_fabric_proto.attr,
	NULL
};
ATTRIBUTE_GROUPS(dl_fabric);

static const struct kobj_type dl_fabric_ktype = {
	.release = dl_sysfs_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = dl_fabric_groups,
};

static ssize_t dl_peer_state_show(struct kobject *kobj,
				  struct kobj_attribute *attr, char *buf)
{
	struct dl_peer *peer = to_dl_sysfs_node(kobj)->peer;

	return sysfs_emit(buf, "%s\n",
			  dl_peer_link(peer, NULL, NULL) ? "up" : "down");
}

static ssize_t dl_peer_name_show(struct kobject *kobj,
				 struct kobj_attribute *attr, char *buf)
{
	struct dl_peer *peer = to_dl_sysfs_node(kobj)->peer;
	char name[sizeof(peer->name)];

	spin_lock_irq(&peer->link_lock);
	strscpy(name, peer->name, sizeof(name));
	spin_unlock_irq(&peer->link_lock);
	return sysfs_emit(buf, "%s\n", name);
}

static ssize_t dl_peer_proto_show(struct kobject *kobj,
				  struct kobj_attribute *attr, char *buf)
{
	struct dl_peer *peer = to_dl_sysfs_node(kobj)->peer;
	u16 proto;

	if (!dl_peer_link(peer, &proto, NULL))
		proto = 0;
	return sysfs_emit(buf, "%u\n", proto);
}

static ssize_t dl_peer_window_show(struct kobject *kobj,
				   struct kobj_attribute *attr, char *buf)
{
	struct dl_peer *peer = to_dl_sysfs_node(kobj)->peer;
	char name[64] = "";

	spin_lock_irq(&peer->link_lock);
	if (peer->win)
		strscpy(name, dev_name(peer->win->dev), sizeof(name));
	spin_unlock_irq(&peer->link_lock);
	return sysfs_emit(buf, "%s\n", name);
}

static ssize_t dl_peer_hb_age_show(struct kobject *kobj,
				   struct kobj_attribute *attr, char *buf)
{
	struct dl_sysfs_node *node = to_dl_sysfs_node(kobj);
	struct dl_peer *peer = node->peer;
	ssize_t ret;

	mutex_lock(&node->fab->lock);
	if (peer->tracking)
		ret = sysfs_emit(buf, "%u\n",
				 jiffies_to_msecs(jiffies - peer->hb_jiffies));
	else
		ret = sysfs_emit(buf, "\n");
	mutex_unlock(&node->fab->lock);
	return ret;
}

/* Cumulative, so that a reader takes rates and means over its own interval. */
static ssize_t dl_peer_answers_show(struct kobject *kobj,
				    struct kobj_attribute *attr, char *buf)
{
	struct dl_peer *peer = to_dl_sysfs_node(kobj)->peer;

	return sysfs_emit(buf, "%lld\n",
			  atomic64_read(&peer->cnt[DL_CNT_ANSWERS]));
}

static ssize_t dl_peer_answer_ns_show(struct kobject *kobj,
				      struct kobj_attribute *attr, char *buf)
{
	struct dl_peer *peer = to_dl_sysfs_node(kobj)->peer;

	return sysfs_emit(buf, "%lld\n",
			  atomic64_read(&peer->cnt[DL_CNT_ANSWER_NS]));
}

static struct kobj_attribute dl_attr_peer_state =
	__ATTR(state, 0444, dl_peer_state_show, NULL);
static struct kobj_attribute dl_attr_peer_name =
	__ATTR(name, 0444, dl_peer_name_show, NULL);
static struct kobj_attribute dl_attr_peer_proto =
	__ATTR(proto, 0444, dl_peer_proto_show, NULL);
static struct kobj_attribute dl_attr_peer_window =
	__ATTR(window, 0444, dl_peer_window_show, NULL);
static struct kobj_attribute dl_attr_peer_hb_age =
	__ATTR(heartbeat_age_ms, 0444, dl_peer_hb_age_show, NULL);
static struct kobj_attribute dl_attr_peer_answers =
	__ATTR(answers, 0444, dl_peer_answers_show, NULL);
static struct kobj_attribute dl_attr_peer_answer_ns =
	__ATTR(answer_ns, 0444, dl_peer_answer_ns_show, NULL);

static struct attribute *dl_peer_attrs[] = {
	&dl_attr_peer_state.attr,
	&dl_attr_peer_name.attr,
	&dl_attr_peer_proto.attr,
	&dl_attr_peer_window.attr,
	&dl_attr_peer_hb_age.attr,
	&dl_attr_peer_answers.attr,
	&dl_attr_peer_answer_ns.attr,
	NULL
};
ATTRIBUTE_GROUPS(dl_peer);

static const struct kobj_type dl_peer_ktype = {
	.release = dl_sysfs_release,
	.sysfs_ops = &kobj_sysfs_ops,
	.default_groups = dl_peer_groups,
};

/* Removes the directory now (waiting for readers), frees it when unused. */
static void dl_sysfs_del(struct kobject **kobj)
{
	if (!*kobj)
		return;
	kobject_del(*kobj);
	kobject_put(*kobj);
	*kobj = NULL;
}

static struct kobject *dl_sysfs_node_add(struct dl_fabric *fab,
					 struct dl_peer *peer,
					 const struct kobj_type *ktype,
					 struct kobject *parent,
					 const char *name)
{
	struct dl_sysfs_node *node;
	int ret;

	node = kzalloc(sizeof(*node), GFP_KERNEL);
	if (!node)
		return ERR_PTR(-ENOMEM);
	node->fab = fab;
	node->peer = peer;
	ret = kobject_init_and_add(&node->kobj, ktype, parent, "%s", name);
	if (ret) {
		/* Frees the node through dl_sysfs_release(). */
		kobject_put(&node->kobj);
		return ERR_PTR(ret);
	}
	return &node->kobj;
}

/**
 * dl_sysfs_add() - create fabric/ and fabric/peers/<id>/ on the adapter.
 * @fab: the fabric.
 *
 * A directory exists for every host id but this host's, whether or not
 * the host has ever been seen.
 *
 * Return: 0 or -errno; on error nothing is left behind.
 */
int dl_sysfs_add(struct dl_fabric *fab)
{
	struct kobject *kobj;
	char name[12];
	u32 id;
	int ret;

	kobj = dl_sysfs_node_add(fab, NULL, &dl_fabric_ktype, &fab->dev->kobj,
				 "fabric");
	if (IS_ERR(kobj))
		return PTR_ERR(kobj);
	fab->sysfs_fabric = kobj;

	fab->sysfs_peers = kobject_create_and_add("peers", fab->sysfs_fabric);
	if (!fab->sysfs_peers) {
		ret = -ENOMEM;
		goto err_remove;
	}

	for (id = 0; id < fab->geom.max_hosts; id++) {
		if (id == fab->host_id)
			continue;
		snprintf(name, sizeof(name), "%u", id);
		kobj = dl_sysfs_node_add(fab, &fab->peers[id], &dl_peer_ktype,
					 fab->sysfs_peers, name);
		if (IS_ERR(kobj)) {
			ret = PTR_ERR(kobj);
			goto err_remove;
		}
		fab->peers[id].kobj = kobj;
	}
	return 0;

err_remove:
	dl_sysfs_remove(fab);
	return ret;
}

/**
 * dl_sysfs_remove() - remove what dl_sysfs_add() created.
 * @fab: the fabric.
 *
 * Waits for readers, some of which take fab->lock: must not be called
 * with it held.
 */
void dl_sysfs_remove(struct dl_fabric *fab)
{
	u32 id;

	for (id = 0; id < fab->geom.max_hosts; id++)
		dl_sysfs_del(&fab->peers[id].kobj);
	dl_sysfs_del(&fab->sysfs_peers);
	dl_sysfs_del(&fab->sysfs_fabric);
}
