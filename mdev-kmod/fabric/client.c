// SPDX-License-Identifier: GPL-2.0
/*
 * Fabric clients: who is told of which fabric, and each one's context.
 *
 * After drivers/ntb: a client (the lender, the borrower) registers once
 * and is told of every started fabric, whichever came first, the backend
 * module or the client module. Each client keeps a context per fabric
 * (like ntb_set_ctx()); the core hands it back with every event, so no
 * client searches a list of its own for the fabric an event is about.
 *
 * dl_clients_lock guards both lists and, with fab->lock, which clients a
 * fabric serves: a client is marked on a fabric under both, so that the
 * liveness work (which holds fab->lock) sees a client either not at all
 * or with its context set. Peers already up when a client is added are
 * reported to it under fab->lock, before any later event.
 *
 * A client's @add or @remove may itself start or stop a fabric: the
 * emulated NTB port registers an ntb_dev, on which devlend's NTB backend
 * makes a fabric of its own. So the thread that holds dl_clients_lock
 * takes it again freely (dl_clients_get()); the walks below stay valid
 * because a nested call only adds or removes another fabric than the one
 * a walk stands on, and attaching skips a client already attached.
 */
#include <linux/bitops.h>
#include <linux/device.h>
#include <linux/export.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/sched.h>

#include "internal.h"

static DEFINE_MUTEX(dl_clients_lock);
/* The task holding dl_clients_lock, for the nested calls above. */
static struct task_struct *dl_clients_holder;
/* Registered clients, by slot; and their list, in registration order. */
static struct dl_fabric_client *dl_client_slots[DL_FABRIC_MAX_CLIENTS];
static LIST_HEAD(dl_clients);
/* Started fabrics. */
static LIST_HEAD(dl_fabrics);

/* Take dl_clients_lock unless this task holds it; whether it was taken. */
static bool dl_clients_get(void)
{
	if (READ_ONCE(dl_clients_holder) == current)
		return false;
	mutex_lock(&dl_clients_lock);
	WRITE_ONCE(dl_clients_holder, current);
	return true;
}

static void dl_clients_put(bool taken)
{
	if (!taken)
		return;
	WRITE_ONCE(dl_clients_holder, NULL);
	mutex_unlock(&dl_clients_lock);
}

static void dl_client_attach(struct dl_fabric *fab,
			     struct dl_fabric_client *client)
{
	void *ctx = NULL;
	u32 id;
	int ret;

	lockdep_assert_held(&dl_clients_lock);

	if (test_bit(client->slot, &fab->clients))
		return;
	ret = client->add(fab, &ctx);
	if (ret == -ENODEV) {
		dev_dbg(fab->dev, "%s is not for this fabric\n", client->name);
		return;
	}
	if (ret) {
		dev_warn(fab->dev, "%s does not serve this fabric: %d\n",
			 client->name, ret);
		return;
	}
	mutex_lock(&fab->lock);
	fab->client_ctx[client->slot] = ctx;
	set_bit(client->slot, &fab->clients);
	for (id = 0; id < fab->geom.max_hosts; id++) {
		u16 proto;

		if (id != fab->host_id && dl_peer_link(&fab->peers[id], &proto,
						       NULL))
			client->peer_event(fab, ctx, DL_FABRIC_EV_PEER_UP, id,
					   proto);
	}
	mutex_unlock(&fab->lock);
}

static void dl_client_detach(struct dl_fabric *fab,
			     struct dl_fabric_client *client)
{
	void *ctx;

	lockdep_assert_held(&dl_clients_lock);

	mutex_lock(&fab->lock);
	if (!test_and_clear_bit(client->slot, &fab->clients)) {
		mutex_unlock(&fab->lock);
		return;
	}
	ctx = fab->client_ctx[client->slot];
	fab->client_ctx[client->slot] = NULL;
	mutex_unlock(&fab->lock);
	client->remove(fab, ctx);
}

/**
 * dl_fabric_client_register() - serve every fabric, present and future.
 * @client: filled in but @slot and @node; stays registered until
 *	dl_fabric_client_unregister().
 *
 * @client->add is called for each started fabric before this returns.
 *
 * Return: 0, -EINVAL for a client without callbacks, -EBUSY if
 * %DL_FABRIC_MAX_CLIENTS are registered already.
 */
int dl_fabric_client_register(struct dl_fabric_client *client)
{
	struct dl_fabric *fab;
	bool taken;
	int slot;

	if (!client->add || !client->remove || !client->peer_event)
		return -EINVAL;

	taken = dl_clients_get();
	for (slot = 0; slot < DL_FABRIC_MAX_CLIENTS; slot++)
		if (!dl_client_slots[slot])
			break;
	if (slot == DL_FABRIC_MAX_CLIENTS) {
		dl_clients_put(taken);
		return -EBUSY;
	}
	client->slot = slot;
	dl_client_slots[slot] = client;
	list_add_tail(&client->node, &dl_clients);
	list_for_each_entry(fab, &dl_fabrics, node)
		dl_client_attach(fab, client);
	dl_clients_put(taken);
	return 0;
}
EXPORT_SYMBOL_GPL(dl_fabric_client_register);

/**
 * dl_fabric_client_unregister() - stop serving fabrics.
 * @client: as registered.
 *
 * @client->remove is called for each fabric it serves before this returns.
 */
void dl_fabric_client_unregister(struct dl_fabric_client *client)
{
	struct dl_fabric *fab;
	bool taken;

	taken = dl_clients_get();
	list_for_each_entry(fab, &dl_fabrics, node)
		dl_client_detach(fab, client);
	list_del(&client->node);
	dl_client_slots[client->slot] = NULL;
	dl_clients_put(taken);
}
EXPORT_SYMBOL_GPL(dl_fabric_client_unregister);

/**
 * dl_fabric_client_ctx() - a client's context for a fabric.
 * @fab: the fabric.
 * @client: a registered client.
 *
 * Valid between the client's @add and @remove for @fab.
 *
 * Return: what @add set, or NULL if the client does not serve @fab.
 */
void *dl_fabric_client_ctx(struct dl_fabric *fab,
			   const struct dl_fabric_client *client)
{
	return READ_ONCE(fab->client_ctx[client->slot]);
}
EXPORT_SYMBOL_GPL(dl_fabric_client_ctx);

/**
 * dl_fabric_client_for_each() - visit every fabric a client serves.
 * @client: a registered client.
 * @fn: called with each fabric and the client's context for it; a nonzero
 *	return stops the walk. Fabrics and clients cannot come or go
 *	meanwhile, so @fn must not wait for anything that might (a request,
 *	a peer event, a module load): it is for reports, such as debugfs.
 * @arg: passed to @fn.
 *
 * Return: what @fn last returned, 0 if it was never called.
 */
int dl_fabric_client_for_each(const struct dl_fabric_client *client,
			      int (*fn)(struct dl_fabric *fab, void *ctx,
					void *arg),
			      void *arg)
{
	struct dl_fabric *fab;
	bool taken;
	int ret = 0;

	taken = dl_clients_get();
	list_for_each_entry(fab, &dl_fabrics, node) {
		if (!test_bit(client->slot, &fab->clients))
			continue;
		ret = fn(fab, fab->client_ctx[client->slot], arg);
		if (ret)
			break;
	}
	dl_clients_put(taken);
	return ret;
}
EXPORT_SYMBOL_GPL(dl_fabric_client_for_each);

/**
 * dl_clients_fabric_added() - a fabric started: offer it to every client.
 * @fab: the fabric; no peer is up yet.
 */
void dl_clients_fabric_added(struct dl_fabric *fab)
{
	struct dl_fabric_client *client;
	bool taken;

	taken = dl_clients_get();
	list_add_tail(&fab->node, &dl_fabrics);
	list_for_each_entry(client, &dl_clients, node)
		dl_client_attach(fab, client);
	dl_clients_put(taken);
}

/**
 * dl_clients_fabric_removing() - a fabric is stopping: every client lets
 *	go of it.
 * @fab: the fabric; every peer is down.
 */
void dl_clients_fabric_removing(struct dl_fabric *fab)
{
	struct dl_fabric_client *client;
	bool taken;

	taken = dl_clients_get();
	list_for_each_entry_reverse(client, &dl_clients, node)
		dl_client_detach(fab, client);
	list_del(&fab->node);
	dl_clients_put(taken);
}

/**
 * dl_fabric_peer_bar_lost() - a backend's window onto peers' BARs is
 *	going away.
 * @fab: the fabric; its liveness lock is not held.
 * @phys: where the window is (what &dl_fabric_backend_ops.peer_bar found
 *	in it lies inside).
 * @len: its bytes.
 *
 * Returns once every client that maps such windows has stopped every
 * mapping into it (&dl_fabric_client.bar_window_lost), so the backend may
 * then give its addresses up. Whatever the backend's tables now say: a
 * window is found by where it is, not by what it was said to show.
 */
void dl_fabric_peer_bar_lost(struct dl_fabric *fab, phys_addr_t phys, u64 len)
{
	unsigned long slot;
	bool taken;

	taken = dl_clients_get();
	for_each_set_bit(slot, &fab->clients, DL_FABRIC_MAX_CLIENTS)
		if (dl_client_slots[slot]->bar_window_lost)
			dl_client_slots[slot]->bar_window_lost(fab,
							       fab->client_ctx[slot],
							       phys, len);
	dl_clients_put(taken);
}
EXPORT_SYMBOL_GPL(dl_fabric_peer_bar_lost);

/**
 * dl_fabric_notify() - tell every client a fabric serves about a peer.
 * @fab: the fabric; caller holds fab->lock.
 * @type: the event.
 * @peer: the peer.
 * @proto: the negotiated version, for %DL_FABRIC_EV_PEER_UP.
 */
void dl_fabric_notify(struct dl_fabric *fab, enum dl_fabric_event_type type,
		      u32 peer, u16 proto)
{
	unsigned long slot;

	lockdep_assert_held(&fab->lock);

	for_each_set_bit(slot, &fab->clients, DL_FABRIC_MAX_CLIENTS)
		dl_client_slots[slot]->peer_event(fab, fab->client_ctx[slot],
						  type, peer, proto);
}
