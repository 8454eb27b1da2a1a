/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KSHIM_LINUX_UNALIGNED_H
#define KSHIM_LINUX_UNALIGNED_H
#include <string.h>
#include "../kshim.h"

static inline u32 get_unaligned_le32(const void *p)
{
	u32 v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static inline void put_unaligned_le32(u32 val, void *p)
{
	u32 v = htole32(val);

	memcpy(p, &v, sizeof(v));
}
#endif
