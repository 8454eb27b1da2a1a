// SPDX-License-Identifier: GPL-2.0
/*
 * The control area: validating its header and finding things in it.
 *
 * The header is written by the ivshmem server, which is a peer like any
 * other: a broken or hostile one could describe rings that overlap, run
 * past the mapping or have sizes that break our arithmetic. So the header
 * is copied once, every field is checked, and from then on only the copy
 * is used.
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
static_assert(sizeof(struct dl_dev_fault) == DL_DEV_FAULT_SIZE);

static bool dl_ctl_ranges_overlap(u64 a, u64 a_len, u64 b, u64 b_len)
{
	return a < b + b_len && b < a + a_len;
}

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
	u64 hosts_len, rings_len, ring_need;

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
	geom->rings_off = le32_to_cpu(h.rings_off);
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
	    !IS_ALIGNED(geom->rings_off, 8) ||
	    !IS_ALIGNED(geom->ring_stride, 8)) {
		dev_err(dev, "control area offsets or strides not 8-byte aligned\n");
		return -EINVAL;
	}

	/* All in u64: at most 8 * 8 strides of 32 bits cannot overflow. */
	hosts_len = (u64)geom->max_hosts * geom->host_stride;
	rings_len = (u64)geom->max_hosts * geom->max_hosts * geom->ring_stride;
	ring_need = DL_RING_CTRL_SIZE +
		    (u64)geom->ring_slots * geom->slot_size;

	if (geom->host_stride < DL_HOST_INFO_SIZE ||
	    geom->hosts_off < DL_CTL_HEADER_SIZE ||
	    geom->hosts_off + hosts_len > geom->total_size) {
		dev_err(dev, "host info slots (off %u, stride %u) do not fit\n",
			geom->hosts_off, geom->host_stride);
		return -EINVAL;
	}
	if (geom->ring_stride < ring_need ||
	    geom->rings_off < DL_CTL_HEADER_SIZE ||
	    geom->rings_off + rings_len > geom->total_size) {
		dev_err(dev, "rings (off %u, stride %u, need %llu) do not fit\n",
			geom->rings_off, geom->ring_stride, ring_need);
		return -EINVAL;
	}
	if (dl_ctl_ranges_overlap(geom->hosts_off, hosts_len,
				  geom->rings_off, rings_len)) {
		dev_err(dev, "host info slots and rings overlap\n");
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
 * dl_ctl_ring() - find the ring carrying messages from @src to @dst.
 * @fab: the fabric.
 * @src: sending host id, below max_hosts.
 * @dst: receiving host id, below max_hosts.
 * @ring: filled in with pointers to the ring's indices and slots.
 */
void dl_ctl_ring(struct dl_fabric *fab, u32 src, u32 dst,
		 struct dl_ring *ring)
{
	size_t off = fab->geom.rings_off +
		     ((size_t)src * fab->geom.max_hosts + dst) *
		     fab->geom.ring_stride;

	ring->ctrl = fab->ctl + off;
	ring->slots = fab->ctl + off + DL_RING_CTRL_SIZE;
}
