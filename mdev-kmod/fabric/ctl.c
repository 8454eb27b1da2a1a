// SPDX-License-Identifier: GPL-2.0
/*
 * The control area: validating its header and finding things in it and
 * in inboxes.
 *
 * The header is written by the ivshmem server, which is a peer like any
 * other: a broken or hostile one could describe slots that run past the
 * mapping, or ring sizes that break our arithmetic or make inboxes huge.
 * So the header is copied once, every field is checked, and from then on
 * only the copy is used.
 */
#include <linux/build_bug.h>
#include <linux/device.h>
#include <linux/log2.h>
#include <linux/string.h>

#include "internal.h"

/*
 * The wire structs are the protocol: a change of size is a change of the
 * wire format. The Rust side asserts the same sizes on its generated types.
 */
static_assert(sizeof(struct dl_ctl_header) == DL_CTL_HEADER_SIZE);
static_assert(sizeof(struct dl_host_info) == DL_HOST_INFO_SIZE);
static_assert(sizeof(struct dl_ring_ctrl) == DL_RING_CTRL_SIZE);
static_assert(sizeof(struct dl_msg_hdr) == DL_MSG_HDR_SIZE);
static_assert(sizeof(struct dl_ping) == DL_PING_SIZE);
static_assert(sizeof(struct dl_bar_desc) == DL_BAR_DESC_SIZE);
static_assert(sizeof(struct dl_dev_info) == DL_DEV_INFO_SIZE);
static_assert(sizeof(struct dl_dev_info_ext) == DL_DEV_INFO_EXT_SIZE);
static_assert(sizeof(struct dl_dev_info_full) == DL_DEV_INFO_FULL_SIZE);
static_assert(sizeof(struct dl_dev_ref) == DL_DEV_REF_SIZE);
static_assert(sizeof(struct dl_dev_list) == DL_DEV_LIST_SIZE);
static_assert(sizeof(struct dl_cfg_access) == DL_CFG_ACCESS_SIZE);
static_assert(sizeof(struct dl_cfg_block_req) == DL_CFG_BLOCK_REQ_SIZE);
static_assert(sizeof(struct dl_cfg_block) == DL_CFG_BLOCK_SIZE);
/* The largest answer fits the smallest slot. */
static_assert(DL_MSG_HDR_SIZE + DL_CFG_BLOCK_SIZE <= DL_MIN_SLOT_SIZE);
static_assert(sizeof(struct dl_bar_access) == DL_BAR_ACCESS_SIZE);
static_assert(sizeof(struct dl_dma_range) == DL_DMA_RANGE_SIZE);
static_assert(sizeof(struct dl_dma_map) == DL_DMA_MAP_SIZE);
static_assert(sizeof(struct dl_dma_unmap) == DL_DMA_UNMAP_SIZE);
static_assert(sizeof(struct dl_irq_set) == DL_IRQ_SET_SIZE);
static_assert(sizeof(struct dl_irq_fire) == DL_IRQ_FIRE_SIZE);
static_assert(sizeof(struct dl_irq_direct) == DL_IRQ_DIRECT_SIZE);
static_assert(sizeof(struct dl_bar_window) == DL_BAR_WINDOW_SIZE);
static_assert(sizeof(struct dl_bar_dma) == DL_BAR_DMA_SIZE);
static_assert(sizeof(struct dl_p2p_dma) == DL_P2P_DMA_SIZE);
static_assert(sizeof(struct dl_p2p_export) == DL_P2P_EXPORT_SIZE);
static_assert(sizeof(struct dl_p2p_lookup) == DL_P2P_LOOKUP_SIZE);
static_assert(sizeof(struct dl_p2p_window) == DL_P2P_WINDOW_SIZE);
static_assert(DL_DB_VECTORS <= DL_DB_VECTORS_MAX);
static_assert(sizeof(struct dl_dev_fault) == DL_DEV_FAULT_SIZE);

/**
 * dl_ctl_validate() - check the control area header completely.
 * @dev: the adapter, for messages.
 * @ctl: the mapped control area.
 * @size: bytes mapped at @ctl.
 * @geom: filled in with the validated geometry.
 *
 * Return: 0, or -EINVAL (with a message saying why) if the area cannot be
 * used safely.
 */
int dl_ctl_validate(struct device *dev, const void *ctl, size_t size,
		    struct dl_ctl_geom *geom)
{
	struct dl_ctl_header h;
	u64 hosts_len, inbox_need, ring_need;

	if (size < DL_CTL_HEADER_SIZE) {
		dev_err(dev, "control area of %zu bytes is too small\n", size);
		return -EINVAL;
	}
	memcpy(&h, ctl, sizeof(h));

	if (le64_to_cpu(h.magic) != DL_CTL_MAGIC) {
		dev_err(dev, "control area has bad magic %#llx (server not a devlend server?)\n",
			le64_to_cpu(h.magic));
		return -EINVAL;
	}
	if (le32_to_cpu(h.layout_version) != DL_CTL_LAYOUT_VERSION) {
		dev_err(dev, "control area layout version %u, this module knows %u\n",
			le32_to_cpu(h.layout_version), DL_CTL_LAYOUT_VERSION);
		return -EINVAL;
	}

	geom->max_hosts = le32_to_cpu(h.max_hosts);
	geom->ring_slots = le32_to_cpu(h.ring_slots);
	geom->slot_size = le32_to_cpu(h.slot_size);
	geom->hosts_off = le32_to_cpu(h.hosts_off);
	geom->host_stride = le32_to_cpu(h.host_stride);
	geom->inbox_size = le32_to_cpu(h.inbox_size);
	geom->ring_stride = le32_to_cpu(h.ring_stride);
	geom->total_size = le64_to_cpu(h.total_size);
	geom->fabric_id = le64_to_cpu(h.fabric_id);

	if (!geom->max_hosts || geom->max_hosts > DL_MAX_HOSTS) {
		dev_err(dev, "control area for %u hosts, limit is %u\n",
			geom->max_hosts, DL_MAX_HOSTS);
		return -EINVAL;
	}
	if (!is_power_of_2(geom->ring_slots) ||
	    geom->ring_slots > DL_MAX_RING_SLOTS) {
		dev_err(dev, "ring of %u slots: not a power of two up to %u\n",
			geom->ring_slots, DL_MAX_RING_SLOTS);
		return -EINVAL;
	}
	if (geom->slot_size % 64 || geom->slot_size < DL_MIN_SLOT_SIZE ||
	    geom->slot_size > DL_MAX_SLOT_SIZE) {
		dev_err(dev, "slot size %u: not a multiple of 64 in [%u, %u]\n",
			geom->slot_size, DL_MIN_SLOT_SIZE, DL_MAX_SLOT_SIZE);
		return -EINVAL;
	}
	if (geom->total_size > size) {
		dev_err(dev, "control area claims %llu bytes, the BAR has %zu\n",
			geom->total_size, size);
		return -EINVAL;
	}

	/* Shared indices and fields are accessed as aligned words. */
	if (!IS_ALIGNED(geom->hosts_off, 8) ||
	    !IS_ALIGNED(geom->host_stride, 8) ||
	    !IS_ALIGNED(geom->ring_stride, 64)) {
		dev_err(dev, "control area offsets or strides not aligned\n");
		return -EINVAL;
	}

	/* All in u64: at most 8 strides of 32 bits cannot overflow. */
	hosts_len = (u64)geom->max_hosts * geom->host_stride;
	ring_need = DL_RING_CTRL_SIZE +
		    (u64)geom->ring_slots * geom->slot_size;
	inbox_need = (u64)geom->max_hosts * geom->ring_stride;

	if (geom->host_stride < DL_HOST_INFO_SIZE ||
	    geom->hosts_off < DL_CTL_HEADER_SIZE ||
	    geom->hosts_off + hosts_len > geom->total_size) {
		dev_err(dev, "host info slots (off %u, stride %u) do not fit\n",
			geom->hosts_off, geom->host_stride);
		return -EINVAL;
	}
	/*
	 * Each host allocates an inbox of this size from its own RAM: the
	 * exact size, so that a hostile header cannot make it allocate more
	 * than the largest rings need (8 entries of 1024 x 4 KiB slots).
	 */
	if (geom->ring_stride != ALIGN(ring_need, 64) ||
	    geom->inbox_size != inbox_need) {
		dev_err(dev, "inbox of %u bytes, stride %u: need %llu, stride %llu\n",
			geom->inbox_size, geom->ring_stride, inbox_need,
			ALIGN(ring_need, 64));
		return -EINVAL;
	}
	return 0;
}

/**
 * dl_ctl_host() - the host info slot of a host.
 * @fab: the fabric.
 * @id: a host id below max_hosts.
 *
 * Return: the slot in the control area.
 */
struct dl_host_info *dl_ctl_host(struct dl_fabric *fab, u32 id)
{
	return fab->ctl + fab->geom.hosts_off +
	       (size_t)id * fab->geom.host_stride;
}

/**
 * dl_inbox_entry() - find a peer's entry in an inbox.
 * @fab: the fabric.
 * @inbox: the inbox, or the start of an entry when @id is 0.
 * @id: the host id the entry belongs to, below max_hosts.
 * @ring: filled in with pointers to the entry's indices and slots.
 */
void dl_inbox_entry(struct dl_fabric *fab, void *inbox, u32 id,
		    struct dl_ring *ring)
{
	void *entry = inbox + (size_t)id * fab->geom.ring_stride;

	ring->ctrl = entry;
	ring->slots = entry + DL_RING_CTRL_SIZE;
}
