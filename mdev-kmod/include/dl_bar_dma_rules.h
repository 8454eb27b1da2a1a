/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which pages of a BAR its own device may reach by DMA, and at which
 * device addresses (%DL_MSG_BAR_DMA): the lender's rules, pure, so that
 * the unit harness tests the code the lender runs.
 *
 * Kernel-internal: not part of the wire format.
 */
#ifndef DL_BAR_DMA_RULES_H
#define DL_BAR_DMA_RULES_H

#include <linux/errno.h>
#include <linux/mm.h>
#include <linux/types.h>

#include "devlend_wire.h"

/* Spans a BAR's own DMA never reaches: the MSI-X table and the PBA. */
#define DL_BAR_DMA_MAX_SKIPS	2
/* So a BAR is mapped in at most this many pieces. */
#define DL_BAR_DMA_MAX_PIECES	(DL_BAR_DMA_MAX_SKIPS + 1)

/**
 * struct dl_bar_dma_span - bytes [@start, @end) of a BAR, page aligned.
 * @start: first byte.
 * @end: the byte after the last.
 */
struct dl_bar_dma_span {
	u64 start;
	u64 end;
};

/**
 * dl_bar_dma_check() - whether a BAR can be mapped for its own device's
 *	DMA at an address.
 * @bar_start: where the BAR is on the lender (its CPU physical address).
 * @size: its bytes, nonzero.
 * @iova: the device address asked for: where the holder's guest put it.
 *
 * The IOMMU maps whole pages, so the BAR must start on a page of the
 * lender and @iova on a page boundary: a BAR smaller than a page is then
 * mapped with the rest of its page (the lender keeps that rest free of
 * other devices' BARs while it is mapped).
 *
 * Return: 0; -EINVAL for an @iova that no BAR can be at (not page aligned,
 * the BAR would wrap); -EOPNOTSUPP for a BAR that is not page aligned on
 * the lender.
 */
static inline int dl_bar_dma_check(u64 bar_start, u64 size, u64 iova)
{
	u64 len = PAGE_ALIGN(size);

	if (!size || !len || !PAGE_ALIGNED(iova) || iova + len - 1 < iova)
		return -EINVAL;
	if (!PAGE_ALIGNED(bar_start))
		return -EOPNOTSUPP;
	return 0;
}

/**
 * dl_bar_dma_pieces() - the page-aligned parts of a BAR left once the
 *	skipped spans are taken out.
 * @size: the BAR's bytes, nonzero; it is mapped up to the next page.
 * @skip: page-aligned spans of the BAR to leave out, in any order, maybe
 *	overlapping, maybe past the BAR's end.
 * @nskip: how many, at most %DL_BAR_DMA_MAX_SKIPS.
 * @pieces: filled with the parts, ascending, at most
 *	%DL_BAR_DMA_MAX_PIECES.
 *
 * Return: how many parts (0 when the skipped spans cover the BAR).
 */
static inline unsigned int
dl_bar_dma_pieces(u64 size, const struct dl_bar_dma_span *skip,
		  unsigned int nskip, struct dl_bar_dma_span *pieces)
{
	struct dl_bar_dma_span s[DL_BAR_DMA_MAX_SKIPS];
	u64 end = PAGE_ALIGN(size), at = 0;
	unsigned int i, n = 0;

	if (nskip > DL_BAR_DMA_MAX_SKIPS)
		nskip = DL_BAR_DMA_MAX_SKIPS;
	for (i = 0; i < nskip; i++)
		s[i] = skip[i];
	if (nskip == 2 && s[1].start < s[0].start) {
		struct dl_bar_dma_span t = s[0];

		s[0] = s[1];
		s[1] = t;
	}
	for (i = 0; i < nskip; i++) {
		if (s[i].start >= s[i].end)
			continue;
		if (s[i].start > at && at < end) {
			pieces[n].start = at;
			pieces[n].end = s[i].start < end ? s[i].start : end;
			n++;
		}
		if (s[i].end > at)
			at = s[i].end;
	}
	if (at < end) {
		pieces[n].start = at;
		pieces[n].end = end;
		n++;
	}
	return n;
}

#endif /* DL_BAR_DMA_RULES_H */
