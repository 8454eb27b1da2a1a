/* SPDX-License-Identifier: GPL-2.0 */
/*
 * An emulation hook of devlend_ntb_emu.ko, for devlend's NTB backend only
 * (docs/ntb.md). On a real adapter an outbound memory window is a BAR:
 * a store at window base + offset crosses the bridge and the peer's
 * adapter translates it as it arrives (its IOMMU, or its LUTs). The
 * emulated window is a view of the peer's RAM file, where stores land
 * directly: a peer behind a translating IOMMU cannot translate them. So
 * whoever maps an outbound window asks, with this hook, where each
 * offset lands, and the peer's port answers through its adapter's IOMMU
 * domain (DL_MSG_NTB_XLATE): the mapping made is what the hardware would
 * have done store by store. The backend finds the hook with symbol_get(),
 * so it does not depend on the emulation's module.
 */
#ifndef DL_NTB_EMU_HOOK_H
#define DL_NTB_EMU_HOOK_H

#include <linux/types.h>

struct ntb_dev;

int dl_ntbe_peer_mw_resolve(struct ntb_dev *ntb, int widx, u64 off, u64 len,
			    phys_addr_t *phys, u64 *run, u64 *size);

#endif /* DL_NTB_EMU_HOOK_H */
