/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the lender accepts as a DMA unmap request, shared with the unit
 * harness's fake lender so that the borrower is tested against the rules
 * the real lender applies, not against a lender that accepts anything.
 *
 * Kernel-internal: not part of the wire format.
 */
#ifndef DL_DMA_RULES_H
#define DL_DMA_RULES_H

#include <linux/errno.h>
#include <linux/mm.h>
#include <linux/types.h>

#include "devlend_wire.h"

/**
 * enum dl_unmap_kind - what a well-formed DL_MSG_DMA_UNMAP asks for.
 * @DL_UNMAP_RANGE: the page-aligned range [iova, iova + len).
 * @DL_UNMAP_ALL: everything mapped for the device; iova and len unread.
 */
enum dl_unmap_kind {
	DL_UNMAP_RANGE,
	DL_UNMAP_ALL,
};

/**
 * dl_unmap_check() - classify a DMA unmap request from a peer.
 * @flags: its flags, CPU order.
 * @iova: its first address.
 * @len: its length in bytes.
 *
 * A range must be nonempty, page-aligned at both ends and must not wrap:
 * "everything" is said with %DL_DMA_UNMAP_F_ALL, never with a huge range.
 *
 * Return: an &enum dl_unmap_kind, -EBADMSG for unknown flags, -ERANGE for
 * a range that is not one.
 */
static inline int dl_unmap_check(u32 flags, u64 iova, u64 len)
{
	if (flags & ~DL_DMA_UNMAP_F_ALL)
		return -EBADMSG;
	if (flags & DL_DMA_UNMAP_F_ALL)
		return DL_UNMAP_ALL;
	if (!len || !PAGE_ALIGNED(iova) || !PAGE_ALIGNED(len) ||
	    iova + len - 1 < iova)
		return -ERANGE;
	return DL_UNMAP_RANGE;
}

#endif /* DL_DMA_RULES_H */
