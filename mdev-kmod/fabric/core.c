// SPDX-License-Identifier: GPL-2.0
/*
 * Fabric core: the life cycle of a fabric, doorbells, the accessors its
 * clients use, and the module (devlend_fabric.ko) around it all.
 *
 * A backend creates a fabric once it has mapped the control area, sets up
 * its doorbell interrupts, then starts it: this host attaches to its rings
 * and publishes its host info, and the liveness work begins. Stopping
 * reverses that: every peer goes down (failing its requests), users are
 * told, and the host info says ABSENT. The backend then frees its
 * interrupts and destroys the fabric.
 */
#include <linux/device.h>
#include <linux/minmax.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/workqueue.h>

#include "internal.h"

/**
 * dl_fabric_create() - validate the control area and set up a fabric.
 * @cfg: what the backend found.
 *
 * Return: the fabric, or an ERR_PTR(): -EINVAL if the control area or the
 * host id cannot be used (with a message saying why), -ENOMEM, -ENODEV.
 */
struct dl_fabric *dl_fabric_create(const struct dl_fabric_config *cfg)
{
	struct dl_fabric *fab;
	u32 id;
	int ret;

	fab = kzalloc(sizeof(*fab), GFP_KERNEL);
	if (!fab)
		return ERR_PTR(-ENOMEM);

	fab->dev = cfg->dev;
	fab->ops = cfg->ops;
	fab->backend_priv = cfg->priv;
	fab->db_vectors = min_t(unsigned int, cfg->db_vectors, DL_DB_VECTORS_MAX);
	fab->ctl = cfg->ctl;
	fab->host_id = cfg->host_id;
	fab->inbound_size = cfg->inbound_size;

	ret = dl_ctl_validate(cfg->dev, cfg->ctl, cfg->ctl_size, &fab->geom);
	if (ret)
		goto err_free_fab;
	if (fab->host_id >= fab->geom.max_hosts) {
		dev_err(fab->dev, "host id %u is not below the fabric's %u hosts\n",
			fab->host_id, fab->geom.max_hosts);
		ret = -EINVAL;
		goto err_free_fab;
	}
	fab->self = dl_ctl_host(fab, fab->host_id);

	mutex_init(&fab->lock);
	init_rwsem(&fab->handlers_lock);
	spin_lock_init(&fab->db_lock);
	dl_req_init(fab);
	for (id = 0; id < fab->geom.max_hosts; id++)
		dl_peer_init(fab, &fab->peers[id], id);
	INIT_WORK(&fab->rx_work, dl_rx_work);
	timer_setup(&fab->rx_poll, dl_rx_poll, 0);
	spin_lock_init(&fab->rx_lock);
	INIT_DELAYED_WORK(&fab->live_work, dl_peer_live_work);

	fab->rx_buf = kmalloc(fab->geom.slot_size, GFP_KERNEL);
	if (!fab->rx_buf) {
		ret = -ENOMEM;
		goto err_free_fab;
	}
	/* Doorbells are latency: high priority. Storage I/O may wait on it. */
	fab->wq = alloc_workqueue("devlend-fabric", WQ_HIGHPRI | WQ_MEM_RECLAIM,
				  0);
	if (!fab->wq) {
		ret = -ENOMEM;
		goto err_free_rx_buf;
	}
	ret = dl_hostinfo_init(fab);
	if (ret)
		goto err_destroy_wq;
	ret = dl_ping_init(fab);
	if (ret)
		goto err_free_hostinfo;
	return fab;

err_free_hostinfo:
	dl_hostinfo_free(fab);
err_destroy_wq:
	destroy_workqueue(fab->wq);
err_free_rx_buf:
	kfree(fab->rx_buf);
err_free_fab:
	kfree(fab);
	return ERR_PTR(ret);
}
EXPORT_SYMBOL_GPL(dl_fabric_create);

/**
 * dl_fabric_start() - publish this host and its inbox, go live.
 * @fab: a fabric from dl_fabric_create(), its doorbells set up.
 *
 * Return: 0 or -errno; on error the host info says ABSENT.
 */
int dl_fabric_start(struct dl_fabric *fab)
{
	u32 id;
	int ret;

	dl_hostinfo_begin(fab);
	for (id = 0; id < fab->geom.max_hosts; id++)
		if (id != fab->host_id)
			dl_ring_init(fab, &fab->peers[id]);
	dl_hostinfo_publish(fab);

	ret = dl_sysfs_add(fab);
	if (ret)
		goto err_leave;
	dl_debugfs_add(fab);

	dev_info(fab->dev,
		 "fabric %016llx: host %u of %u, rings of %u x %u bytes, %s backend\n",
		 fab->geom.fabric_id, fab->host_id, fab->geom.max_hosts,
		 fab->geom.ring_slots, fab->geom.slot_size, fab->ops->name);

	dl_clients_fabric_added(fab);
	dl_hostinfo_beat_start(fab);
	queue_delayed_work(fab->wq, &fab->live_work, 0);
	return 0;

err_leave:
	dl_hostinfo_leave(fab);
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_start);

/**
 * dl_fabric_stop() - take every peer down and leave the fabric.
 * @fab: a started fabric.
 *
 * The host info says ABSENT at once; then waits, up to %DL_LEAVE_ACK_MS,
 * for the peers to stop writing into this host's inbox. Waits for sysfs
 * and debugfs readers, and for every client's @remove (which waits for
 * what the client runs, such as a self-test). Afterwards no peer is up
 * and nobody is told anything more.
 */
void dl_fabric_stop(struct dl_fabric *fab)
{
	mutex_lock(&fab->lock);
	fab->stopping = true;
	mutex_unlock(&fab->lock);
	cancel_delayed_work_sync(&fab->live_work);
	dl_hostinfo_beat_stop(fab);

	/* First, so that peers fail their requests to us without waiting. */
	dl_hostinfo_leave(fab);
	dl_peers_down_all(fab);
	dl_hostinfo_await_unbound(fab);
	dl_sysfs_remove(fab);
	/* Clients remove their debugfs files from the fabric's directory. */
	dl_clients_fabric_removing(fab);
	dl_debugfs_remove(fab);
	dev_info(fab->dev, "left fabric %016llx\n", fab->geom.fabric_id);
}
EXPORT_SYMBOL_GPL(dl_fabric_stop);

/**
 * dl_fabric_destroy() - free a fabric.
 * @fab: a stopped (or never started) fabric whose backend no longer calls
 *	dl_fabric_db_event().
 */
void dl_fabric_destroy(struct dl_fabric *fab)
{
	/*
	 * Drains the receive work; nothing queues it any more, once its
	 * poll timer is shut down (the work cannot re-arm it after that).
	 */
	timer_shutdown_sync(&fab->rx_poll);
	destroy_workqueue(fab->wq);
	dl_req_destroy(fab);
	dl_ping_exit(fab);
	dl_hostinfo_free(fab);
	kfree(fab->rx_buf);
	kfree(fab);
}
EXPORT_SYMBOL_GPL(dl_fabric_destroy);

/**
 * dl_fabric_backend_priv() - the backend data given to dl_fabric_create().
 * @fab: the fabric.
 *
 * Return: &dl_fabric_config.priv.
 */
void *dl_fabric_backend_priv(struct dl_fabric *fab)
{
	return fab->backend_priv;
}
EXPORT_SYMBOL_GPL(dl_fabric_backend_priv);

/**
 * dl_fabric_db_event() - a doorbell vector of this host was rung.
 * @fab: the fabric.
 * @vector: the vector.
 *
 * Called by the backend from its interrupt handler.
 */
void dl_fabric_db_event(struct dl_fabric *fab, unsigned int vector)
{
	struct dl_db_handler *h;

	if (vector == DL_DB_VEC_MSG) {
		/* Interrupt relays first, here; everything else in the work. */
		if (dl_rx_fast(fab))
			queue_work(fab->wq, &fab->rx_work);
		return;
	}
	if (vector >= fab->db_vectors)
		return;
	spin_lock(&fab->db_lock);
	h = &fab->db_handlers[vector];
	if (h->fn)
		h->fn(fab, vector, h->priv);
	spin_unlock(&fab->db_lock);
}
EXPORT_SYMBOL_GPL(dl_fabric_db_event);

/**
 * dl_fabric_db_register() - be called when a peer rings a doorbell vector.
 * @fab: the fabric.
 * @vector: a vector other than %DL_DB_VEC_MSG.
 * @fn: called in hard interrupt context; the doorbell does not say
 *	which peer rang.
 * @priv: passed to @fn.
 *
 * Return: 0, -EINVAL if the adapter has no such vector, -EBUSY if it is
 * taken.
 */
int dl_fabric_db_register(struct dl_fabric *fab, unsigned int vector,
			  dl_fabric_db_fn fn, void *priv)
{
	unsigned long flags;
	int ret = 0;

	if (vector >= fab->db_vectors || !fn)
		return -EINVAL;
	if (vector == DL_DB_VEC_MSG)
		return -EBUSY;

	spin_lock_irqsave(&fab->db_lock, flags);
	if (fab->db_handlers[vector].fn) {
		ret = -EBUSY;
	} else {
		fab->db_handlers[vector].fn = fn;
		fab->db_handlers[vector].priv = priv;
	}
	spin_unlock_irqrestore(&fab->db_lock, flags);
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_db_register);

/**
 * dl_fabric_db_unregister() - stop being called for a doorbell vector.
 * @fab: the fabric.
 * @vector: as registered.
 *
 * When this returns the callback is not running and will not run again.
 */
void dl_fabric_db_unregister(struct dl_fabric *fab, unsigned int vector)
{
	unsigned long flags;

	if (vector >= fab->db_vectors || vector == DL_DB_VEC_MSG)
		return;
	spin_lock_irqsave(&fab->db_lock, flags);
	fab->db_handlers[vector].fn = NULL;
	fab->db_handlers[vector].priv = NULL;
	spin_unlock_irqrestore(&fab->db_lock, flags);
}
EXPORT_SYMBOL_GPL(dl_fabric_db_unregister);

/**
 * dl_fabric_peer_db_set() - ring a doorbell vector of a peer.
 * @fab: the fabric.
 * @peer: the peer's host id.
 * @vector: the vector.
 *
 * Any context. A doorbell to a peer that is not listening is lost.
 *
 * Return: 0 or -EINVAL.
 */
int dl_fabric_peer_db_set(struct dl_fabric *fab, u32 peer,
			  unsigned int vector)
{
	if (!dl_fabric_is_peer(fab, peer) || vector >= DL_DB_VECTORS_MAX)
		return -EINVAL;
	fab->ops->peer_db_set(fab, peer, vector);
	return 0;
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_db_set);

/**
 * dl_fabric_db_claim() - claim any free doorbell vector of this host, and
 *	be called when it is rung (as dl_fabric_db_register()).
 * @fab: the fabric.
 * @fn: called in hard interrupt context.
 * @priv: passed to @fn.
 *
 * The vectors are shared by every client of the fabric; give one back with
 * dl_fabric_db_unregister().
 *
 * Return: the vector, or -ENOSPC if every vector is taken.
 */
int dl_fabric_db_claim(struct dl_fabric *fab, dl_fabric_db_fn fn, void *priv)
{
	unsigned long flags;
	unsigned int v;
	int ret = -ENOSPC;

	if (!fn)
		return -EINVAL;
	spin_lock_irqsave(&fab->db_lock, flags);
	for (v = 0; v < fab->db_vectors; v++) {
		if (v == DL_DB_VEC_MSG || fab->db_handlers[v].fn)
			continue;
		fab->db_handlers[v].fn = fn;
		fab->db_handlers[v].priv = priv;
		ret = v;
		break;
	}
	spin_unlock_irqrestore(&fab->db_lock, flags);
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_db_claim);

/**
 * dl_fabric_peer_db_msg() - the memory write by which a device of this host
 *	rings doorbell @vector of @peer itself, as an MSI-X message would.
 * @fab: the fabric.
 * @peer: the peer's host id.
 * @vector: the vector.
 * @addr: set to the bus address to write; its page may be mapped for the
 *	device to write to, and holds nothing else a device could harm.
 * @data: set to the 32-bit value to write there.
 *
 * Process context.
 *
 * Return: 0, -EINVAL for no such peer or vector, or -EOPNOTSUPP when the
 * backend has no such address (then doorbells take the CPU's
 * dl_fabric_peer_db_set()).
 */
int dl_fabric_peer_db_msg(struct dl_fabric *fab, u32 peer, unsigned int vector,
			  phys_addr_t *addr, u32 *data)
{
	if (!dl_fabric_is_peer(fab, peer) || vector >= DL_DB_VECTORS_MAX)
		return -EINVAL;
	if (!fab->ops->peer_db_msg)
		return -EOPNOTSUPP;
	return fab->ops->peer_db_msg(fab, peer, vector, addr, data);
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_db_msg);

/**
 * dl_fabric_device() - the fabric adapter.
 * @fab: the fabric.
 *
 * Return: the adapter's device (a PCI function with the ivshmem backend).
 */
struct device *dl_fabric_device(struct dl_fabric *fab)
{
	return fab->dev;
}
EXPORT_SYMBOL_GPL(dl_fabric_device);

/**
 * dl_fabric_sysfs_dir() - the adapter's fabric/ directory in sysfs.
 * @fab: the fabric.
 *
 * For users that add directories of their own under it (kobjects take a
 * reference on their parent). Valid from %DL_FABRIC_EV_ADDED; the
 * directory is removed from sysfs, children included, just before
 * %DL_FABRIC_EV_REMOVING.
 *
 * Return: the kobject of <adapter>/fabric/.
 */
struct kobject *dl_fabric_sysfs_dir(struct dl_fabric *fab)
{
	return fab->sysfs_fabric;
}
EXPORT_SYMBOL_GPL(dl_fabric_sysfs_dir);

/**
 * dl_fabric_host_id() - this host's id on the fabric.
 * @fab: the fabric.
 *
 * Return: the id, below dl_fabric_max_hosts().
 */
u32 dl_fabric_host_id(struct dl_fabric *fab)
{
	return fab->host_id;
}
EXPORT_SYMBOL_GPL(dl_fabric_host_id);

/**
 * dl_fabric_max_hosts() - how many hosts the fabric has room for.
 * @fab: the fabric.
 *
 * Return: host ids are below this.
 */
u32 dl_fabric_max_hosts(struct dl_fabric *fab)
{
	return fab->geom.max_hosts;
}
EXPORT_SYMBOL_GPL(dl_fabric_max_hosts);

/**
 * dl_fabric_ram_size() - bytes of this host's RAM, as peers' windows show it.
 * @fab: the fabric.
 *
 * Return: bytes.
 */
u64 dl_fabric_ram_size(struct dl_fabric *fab)
{
	return fab->layout.ram_size;
}
EXPORT_SYMBOL_GPL(dl_fabric_ram_size);

/**
 * dl_fabric_max_requests() - how many requests may be in flight to one peer.
 * @fab: the fabric.
 *
 * Requests beyond it wait in dl_fabric_req_submit() for one to finish;
 * urgent requests only may use the last %DL_FABRIC_URGENT_SLOTS of it.
 * A client that keeps a window of requests in flight (the self-test)
 * keeps it below this.
 *
 * Return: requests.
 */
u32 dl_fabric_max_requests(struct dl_fabric *fab)
{
	return dl_ring_share(fab);
}
EXPORT_SYMBOL_GPL(dl_fabric_max_requests);

/**
 * dl_fabric_max_payload() - the largest message payload.
 * @fab: the fabric.
 *
 * Return: bytes.
 */
size_t dl_fabric_max_payload(struct dl_fabric *fab)
{
	return fab->geom.slot_size - DL_MSG_HDR_SIZE;
}
EXPORT_SYMBOL_GPL(dl_fabric_max_payload);

/*
 * /sys/class/devlend: fabric devices a backend makes because its own
 * device cannot be the fabric's (dl_fabric_class in backend.h).
 */
const struct class dl_fabric_class = {
	.name = "devlend",
};
EXPORT_SYMBOL_GPL(dl_fabric_class);

static int __init dl_fabric_init(void)
{
	int ret;

	ret = class_register(&dl_fabric_class);
	if (ret)
		return ret;
	ret = dl_debugfs_init();
	if (ret)
		class_unregister(&dl_fabric_class);
	return ret;
}

static void __exit dl_fabric_exit(void)
{
	dl_debugfs_exit();
	class_unregister(&dl_fabric_class);
}

module_init(dl_fabric_init);
module_exit(dl_fabric_exit);

MODULE_DESCRIPTION("devlend fabric core: peers, rings, requests and liveness over a fabric backend");
MODULE_LICENSE("GPL");
