// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs: /sys/kernel/debug/devlend/
 *
 *   peers     one line per peer ever seen: peer=<id> name=<n>
 *             state=<up|down> proto=<v> and every counter as key=value
 *   status    this host's side of the fabric, one key=value per line
 *
 * Clients add files of their own beside these (dl_fabric_debugfs_dir()):
 * devlend_fabric_selftest's selftest, for one.
 */
#include <linux/debugfs.h>
#include <linux/export.h>
#include <linux/fs.h>
#include <linux/seq_file.h>
#include <linux/xarray.h>

#include "internal.h"

static struct dentry *dl_debugfs_root;

const char * const dl_peer_counter_names[DL_CNT_NR] = {
	[DL_CNT_TX_MSGS] = "tx_msgs",
	[DL_CNT_RX_MSGS] = "rx_msgs",
	[DL_CNT_TX_RING_FULL] = "tx_ring_full",
	[DL_CNT_RX_SEQ_ERRORS] = "rx_seq_errors",
	[DL_CNT_RX_BAD_MSGS] = "rx_bad_msgs",
	[DL_CNT_RX_CORRUPT_RING] = "rx_corrupt_ring",
	[DL_CNT_RX_STALE] = "rx_stale",
	[DL_CNT_LATE_RESPONSES] = "late_responses",
	[DL_CNT_PING_RX] = "ping_rx",
	[DL_CNT_PING_CRC_ERRORS] = "ping_crc_errors",
	[DL_CNT_PING_ORDER_ERRORS] = "ping_order_errors",
	[DL_CNT_LINK_UPS] = "link_ups",
	[DL_CNT_LINK_DOWNS] = "link_downs",
	[DL_CNT_RX_HELD_BACK] = "rx_held_back",
	[DL_CNT_RX_UNKNOWN] = "rx_unknown",
	[DL_CNT_RX_IN_IRQ] = "rx_in_irq",
	[DL_CNT_ANSWERS] = "answers",
	[DL_CNT_ANSWER_NS] = "answer_ns",
	[DL_CNT_TX_FENCED] = "tx_fenced",
	[DL_CNT_STALE_ANSWERS] = "stale_answers",
};

static int dl_peers_show(struct seq_file *s, void *unused)
{
	struct dl_fabric *fab = s->private;
	u32 id;
	int c;

	/* fab->lock keeps known, name and the link state together. */
	mutex_lock(&fab->lock);
	for (id = 0; id < fab->geom.max_hosts; id++) {
		struct dl_peer *peer = &fab->peers[id];

		if (id == fab->host_id || !peer->known)
			continue;
		seq_printf(s, "peer=%u name=%s state=%s proto=%u", id,
			   peer->name[0] ? peer->name : "-",
			   peer->up ? "up" : "down", peer->up ? peer->proto : 0);
		for (c = 0; c < DL_CNT_NR; c++)
			seq_printf(s, " %s=%lld", dl_peer_counter_names[c],
				   atomic64_read(&peer->cnt[c]));
		seq_putc(s, '\n');
	}
	mutex_unlock(&fab->lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(dl_peers);

static int dl_status_show(struct seq_file *s, void *unused)
{
	struct dl_fabric *fab = s->private;
	unsigned long idx;
	u32 id, up = 0;
	void *req;
	u64 pending = 0;

	for (id = 0; id < fab->geom.max_hosts; id++)
		if (id != fab->host_id && dl_peer_link(&fab->peers[id], NULL, NULL))
			up++;
	xa_for_each(&fab->reqs, idx, req)
		pending++;

	seq_printf(s, "backend=%s\n", fab->ops->name);
	seq_printf(s, "fabric_id=%016llx\n", fab->geom.fabric_id);
	seq_printf(s, "host_id=%u\n", fab->host_id);
	seq_printf(s, "max_hosts=%u\n", fab->geom.max_hosts);
	seq_printf(s, "ring_slots=%u\n", fab->geom.ring_slots);
	seq_printf(s, "slot_size=%u\n", fab->geom.slot_size);
	seq_printf(s, "proto_min=%u\n", DL_PROTO_MIN);
	seq_printf(s, "proto_max=%u\n", DL_PROTO_MAX);
	seq_printf(s, "incarnation=%016llx\n", fab->incarnation);
	seq_printf(s, "heartbeat=%llu\n",
		   le64_to_cpu(READ_ONCE(fab->self->heartbeat)));
	seq_printf(s, "ram_size=%llu\n", fab->layout.ram_size);
	seq_printf(s, "ram_low_size=%llu\n", fab->layout.ram_low_size);
	seq_printf(s, "ram_high_base=%#llx\n", fab->layout.ram_high_base);
	dl_inbound_show(fab, s);
	seq_printf(s, "peers_up=%u\n", up);
	seq_printf(s, "requests_pending=%llu\n", pending);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(dl_status);

/**
 * dl_debugfs_init() - create /sys/kernel/debug/devlend/.
 *
 * Return: 0; debugfs failures are not fatal.
 */
int dl_debugfs_init(void)
{
	/* One directory for every devlend module's files. */
	dl_debugfs_root = debugfs_create_dir("devlend", NULL);
	return 0;
}

/**
 * dl_fabric_debugfs_root() - /sys/kernel/debug/devlend/, for clients' files.
 *
 * Return: the directory, or an ERR_PTR() if debugfs could not make it
 * (debugfs calls take that and do nothing).
 */
struct dentry *dl_fabric_debugfs_root(void)
{
	return dl_debugfs_root;
}
EXPORT_SYMBOL_GPL(dl_fabric_debugfs_root);

/**
 * dl_fabric_debugfs_dir() - the fabric's debugfs directory, for clients'
 *	files about one fabric.
 * @fab: the fabric.
 *
 * devlend/ itself for the first fabric of a host, devlend/fabric-<id>/
 * for further ones (dl_debugfs_add()). Valid from the client's @add to
 * the end of its @remove, where the client removes what it put there.
 *
 * Return: the directory, or an ERR_PTR() if debugfs could not make it
 * (debugfs calls take that and do nothing).
 */
struct dentry *dl_fabric_debugfs_dir(struct dl_fabric *fab)
{
	return fab->debugfs_dir ? fab->debugfs_dir : dl_debugfs_root;
}
EXPORT_SYMBOL_GPL(dl_fabric_debugfs_dir);

/**
 * dl_debugfs_exit() - remove /sys/kernel/debug/devlend/.
 */
void dl_debugfs_exit(void)
{
	debugfs_remove(dl_debugfs_root);
	dl_debugfs_root = NULL;
}

/**
 * dl_debugfs_add() - create the fabric's files.
 * @fab: the fabric.
 *
 * The first fabric's files are devlend/{peers,status}; a host
 * with more (an NTB backend beside the emulated one) puts each further
 * fabric's in devlend/fabric-<fabric id>/.
 */
void dl_debugfs_add(struct dl_fabric *fab)
{
	struct dentry *dir = dl_debugfs_root, *taken;
	char name[32];

	taken = debugfs_lookup("peers", dl_debugfs_root);
	if (taken) {
		dput(taken);
		snprintf(name, sizeof(name), "fabric-%016llx",
			 fab->geom.fabric_id);
		dir = debugfs_create_dir(name, dl_debugfs_root);
		fab->debugfs_dir = dir;
	}
	fab->debugfs_files[0] = debugfs_create_file("peers", 0444, dir, fab,
						    &dl_peers_fops);
	fab->debugfs_files[1] = debugfs_create_file("status", 0444, dir, fab,
						    &dl_status_fops);
}

/**
 * dl_debugfs_remove() - remove the fabric's files.
 * @fab: the fabric.
 *
 * Waits for readers. The clients have removed theirs by now
 * (dl_fabric_stop()).
 */
void dl_debugfs_remove(struct dl_fabric *fab)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(fab->debugfs_files); i++) {
		debugfs_remove(fab->debugfs_files[i]);
		fab->debugfs_files[i] = NULL;
	}
	debugfs_remove(fab->debugfs_dir);
	fab->debugfs_dir = NULL;
}
