// SPDX-License-Identifier: GPL-2.0
/*
 * lender/cfg.c: which config bits a borrower may write (the per-byte
 * map laid from the model's tables), and how a write is
 * filtered, with INTx disable and function-level reset virtual. The
 * device is a fake config space with PM, MSI, MSI-X, PCIe, AF,
 * vendor-specific and unknown capabilities, and AER, SR-IOV and
 * vendor-specific extended ones; every access the code makes to it is
 * logged.
 */
#include <stdio.h>

/* The kernel builds with -Wextra but without these (Makefile.extrawarn). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "../../lender/cfg.c"
#include "../../lender/decode.c"
#pragma GCC diagnostic pop

#include "unit.h"

/* The fake device, and a log of the config writes that reach it. */
static u8 cfg[PCI_CFG_SPACE_EXP_SIZE];
static struct pci_dev pdev = { .cfg = cfg };
static struct dl_lent lent;

struct cfg_write {
	int where;
	int size;
	u32 val;
};

static struct cfg_write wlog[16];
static unsigned int nwrites, nresets, nmask, neoi, nvdis;

static int cfg_ok(const struct pci_dev *d, int where, int size)
{
	return where >= 0 && where + size <= d->cfg_size;
}

int pci_read_config_byte(const struct pci_dev *d, int where, u8 *val)
{
	if (!cfg_ok(d, where, 1))
		return PCIBIOS_BAD_REGISTER_NUMBER;
	*val = d->cfg[where];
	return 0;
}

int pci_read_config_word(const struct pci_dev *d, int where, u16 *val)
{
	if (!cfg_ok(d, where, 2))
		return PCIBIOS_BAD_REGISTER_NUMBER;
	*val = d->cfg[where] | d->cfg[where + 1] << 8;
	return 0;
}

int pci_read_config_dword(const struct pci_dev *d, int where, u32 *val)
{
	if (!cfg_ok(d, where, 4))
		return PCIBIOS_BAD_REGISTER_NUMBER;
	memcpy(val, &d->cfg[where], 4);
	*val = le32_to_cpu(*val);
	return 0;
}

static int cfg_write(const struct pci_dev *d, int where, int size, u32 val)
{
	int i;

	if (!cfg_ok(d, where, size))
		return PCIBIOS_BAD_REGISTER_NUMBER;
	if (nwrites < ARRAY_SIZE(wlog))
		wlog[nwrites] = (struct cfg_write){ where, size, val };
	nwrites++;
	for (i = 0; i < size; i++)
		d->cfg[where + i] = val >> (8 * i);
	return 0;
}

int pci_write_config_byte(const struct pci_dev *d, int where, u8 val)
{
	return cfg_write(d, where, 1, val);
}

int pci_write_config_word(const struct pci_dev *d, int where, u16 val)
{
	return cfg_write(d, where, 2, val);
}

/* The command register when the last reset saved config state. */
static u16 reset_cmd;

int pci_reset_function_locked(struct pci_dev *d)
{
	reset_cmd = d->cfg[PCI_COMMAND] | d->cfg[PCI_COMMAND + 1] << 8;
	nresets++;
	return 0;
}

/* lender/irq.c, as far as cfg.c sees it. */
void dl_lent_intx_mask(struct dl_lent *l)
{
	(void)l;
	nmask++;
}

void dl_lent_intx_eoi(struct dl_lent *l)
{
	(void)l;
	neoi++;
}

void dl_lent_irq_direct_restore(struct dl_lent *l)
{
	(void)l;
}

/* lender/bar.c, as far as cfg.c sees it. */
static unsigned int nfast_close;

void dl_lent_fast_close(struct dl_lent *l)
{
	(void)l;
	nfast_close++;
}

void dl_lent_intx_vdisable(struct dl_lent *l, bool disable)
{
	nvdis++;
	l->intx_vdis = disable;
}

static void put8(unsigned int off, u8 v)
{
	cfg[off] = v;
}

static void put16(unsigned int off, u16 v)
{
	cfg[off] = v;
	cfg[off + 1] = v >> 8;
}

static void put32(unsigned int off, u32 v)
{
	put16(off, v);
	put16(off + 2, v >> 16);
}

static u16 get16(unsigned int off)
{
	return cfg[off] | cfg[off + 1] << 8;
}

static void cap(unsigned int pos, u8 id, u8 next)
{
	put8(pos + PCI_CAP_LIST_ID, id);
	put8(pos + PCI_CAP_LIST_NEXT, next);
}

static void ext_cap(unsigned int pos, u16 id, unsigned int next)
{
	put32(pos, id | 1 << 16 | next << 20);
}

/*
 * The standard capabilities, and where each ends:
 *   0x40 PM       8 bytes          (gap 0x48-0x4f)
 *   0x50 MSI      64-bit, per-vector masking: 24 bytes (gap 0x68-0x6f)
 *   0x70 MSI-X    12 bytes         (gap 0x7c-0x7f)
 *   0x80 PCIe     0x34 bytes       (gap 0xb4-0xbf)
 *   0xc0 AF       6 bytes          (gap 0xc6-0xc7)
 *   0xc8 vendor   16 bytes (its length byte) (gap 0xd8-0xdf)
 *   0xe0 id 0x0d (SSVID), length unknown to cfg.c: up to 0x100
 * Extended: 0x100 AER, 0x150 SR-IOV, 0x190 vendor-specific (to the end).
 */
static void make_device(bool flr)
{
	memset(cfg, 0, sizeof(cfg));
	memset(&lent, 0, sizeof(lent));
	nwrites = 0;
	nresets = 0;
	nmask = 0;
	neoi = 0;
	nvdis = 0;
	nfast_close = 0;
	pdev.cfg_size = PCI_CFG_SPACE_EXP_SIZE;
	pdev.devcap = flr ? PCI_EXP_DEVCAP_FLR : 0;
	pdev.msix_enabled = 0;
	lent.pdev = &pdev;

	put32(PCI_VENDOR_ID, 0x0a5410de);
	put16(PCI_STATUS, PCI_STATUS_CAP_LIST);
	put8(PCI_CAPABILITY_LIST, 0x40);
	cap(0x40, PCI_CAP_ID_PM, 0x50);
	cap(0x50, PCI_CAP_ID_MSI, 0x70);
	put16(0x50 + PCI_MSI_FLAGS, PCI_MSI_FLAGS_64BIT |
	      PCI_MSI_FLAGS_MASKBIT);
	cap(0x70, PCI_CAP_ID_MSIX, 0x80);
	cap(0x80, PCI_CAP_ID_EXP, 0xc0);
	put16(0x80 + PCI_EXP_DEVCTL, 0x2810);	/* 512 B reads, ext tag */
	cap(0xc0, PCI_CAP_ID_AF, 0xc8);
	put8(0xc0 + PCI_AF_CAP, flr ? PCI_AF_CAP_TP | PCI_AF_CAP_FLR :
				      PCI_AF_CAP_FLR);
	cap(0xc8, PCI_CAP_ID_VNDR, 0xe0);
	put8(0xc8 + PCI_CAP_FLAGS, 16);
	cap(0xe0, PCI_CAP_ID_SSVID, 0);

	ext_cap(0x100, PCI_EXT_CAP_ID_ERR, 0x150);
	ext_cap(0x150, PCI_EXT_CAP_ID_SRIOV, 0x190);
	ext_cap(0x190, PCI_EXT_CAP_ID_VNDR, 0);
}

/* Checks that bytes [from, to) of the mask are all @want. */
static void check_mask(unsigned int from, unsigned int to, u8 want)
{
	unsigned int i;

	for (i = from; i < to; i++) {
		if (lent.cfg_map[i].wmask == want)
			continue;
		unit_fail(__FILE__, __LINE__,
			  "wmask[0x%x] = 0x%02x, want 0x%02x (bytes 0x%x-0x%x)",
			  i, lent.cfg_map[i].wmask, want, from, to - 1);
		return;
	}
}

static void init_device(bool flr)
{
	make_device(flr);
	CHECK_EQ(dl_lent_cfg_init(&lent), 0);
	CHECK_EQ(nwrites, 0);
}

static void test_header_masks(void)
{
	init_device(true);
	check_mask(PCI_VENDOR_ID, PCI_COMMAND, 0);
	/* I/O, memory, bus master; not INTx disable, SERR, parity. */
	CHECK_EQ(lent.cfg_map[PCI_COMMAND].wmask, 0x07);
	CHECK_EQ(lent.cfg_map[PCI_COMMAND + 1].wmask, 0);
	check_mask(PCI_STATUS, PCI_CACHE_LINE_SIZE, 0);	/* + rev, class */
	CHECK_EQ(lent.cfg_map[PCI_CACHE_LINE_SIZE].wmask, 0xff);
	CHECK_EQ(lent.cfg_map[PCI_LATENCY_TIMER].wmask, 0xff);
	CHECK_EQ(lent.cfg_map[PCI_HEADER_TYPE].wmask, 0);
	CHECK_EQ(lent.cfg_map[PCI_BIST].wmask, 0);
	check_mask(PCI_BASE_ADDRESS_0, PCI_INTERRUPT_LINE, 0);	/* BARs, ROM */
	CHECK_EQ(lent.cfg_map[PCI_INTERRUPT_LINE].wmask, 0xff);
	check_mask(PCI_INTERRUPT_PIN, PCI_STD_HEADER_SIZEOF, 0);
	dl_lent_cfg_free(&lent);
	CHECK(!lent.cfg_map);
}

static void test_std_cap_masks(void)
{
	init_device(true);
	check_mask(0x40, 0x48, 0);	/* PM: no D3 behind the lender */
	check_mask(0x48, 0x50, 0xff);	/* the device's own registers */
	check_mask(0x50, 0x68, 0);	/* MSI, all 24 bytes */
	check_mask(0x68, 0x70, 0xff);
	check_mask(0x70, 0x7c, 0);	/* MSI-X */
	check_mask(0x7c, 0x80, 0xff);
	check_mask(0x80, 0x88, 0);	/* PCIe: header, capabilities */
	/*
	 * Device control: error reporting, relaxed ordering, ext tag, aux
	 * power, no snoop; not payload, read request, phantom, FLR.
	 */
	CHECK_EQ(lent.cfg_map[0x88].wmask, 0x1f);
	CHECK_EQ(lent.cfg_map[0x89].wmask, 0x0d);
	check_mask(0x8a, 0xb4, 0);	/* status, link, slot, root, v2 */
	check_mask(0xb4, 0xc0, 0xff);
	check_mask(0xc0, 0xc6, 0);	/* AF, including its FLR bit */
	check_mask(0xc6, 0xc8, 0xff);
	check_mask(0xc8, 0xcc, 0);	/* vendor: id, next, length, byte 3 */
	check_mask(0xcc, 0xd8, 0xff);	/* ... then its own registers */
	check_mask(0xd8, 0xe0, 0xff);
	check_mask(0xe0, 0x100, 0);	/* unknown: read-only to the end */
	CHECK_EQ(lent.flr_pos, 0x80 + PCI_EXP_DEVCTL + 1);
	CHECK_EQ(lent.af_flr_pos, 0xc0 + PCI_AF_CTRL);
	dl_lent_cfg_free(&lent);
}

/* The 32-bit register at @off has the writable bits @want. */
static void check_mask32(unsigned int off, u32 want)
{
	u32 got = 0;
	unsigned int i;

	for (i = 0; i < 4; i++)
		got |= (u32)lent.cfg_map[off + i].wmask << (8 * i);

	if (got != want)
		unit_fail(__FILE__, __LINE__,
			  "wmask of the register at 0x%x = 0x%08x, want 0x%08x",
			  off, got, want);
}

static void test_ext_cap_masks(void)
{
	init_device(true);
	check_mask(0x100, 0x104, 0);	/* AER header */
	/* AER: its defined error bits and ECRC enables, as vfio-pci. */
	check_mask32(0x100 + PCI_ERR_UNCOR_STATUS, 0x03fff031);
	check_mask32(0x100 + PCI_ERR_UNCOR_MASK, 0x03fff031);
	check_mask32(0x100 + PCI_ERR_UNCOR_SEVER, 0x03fff031);
	check_mask32(0x100 + PCI_ERR_COR_STATUS, 0x0000f1c1);
	check_mask32(0x100 + PCI_ERR_COR_MASK, 0x0000f1c1);
	check_mask32(0x100 + PCI_ERR_CAP, 0x00000140);
	/* The header log and the root port's registers: read-only. */
	check_mask(0x100 + PCI_ERR_HEADER_LOG, 0x150, 0);
	check_mask(0x150, 0x190, 0);	/* SR-IOV: no new functions */
	check_mask(0x190, 0x194, 0);	/* vendor header */
	check_mask(0x194, PCI_CFG_SPACE_EXP_SIZE, 0xff);
	dl_lent_cfg_free(&lent);

	/* No extended capabilities: nothing up there is writable. */
	make_device(true);
	put32(0x100, 0);
	CHECK_EQ(dl_lent_cfg_init(&lent), 0);
	check_mask(0x100, PCI_CFG_SPACE_EXP_SIZE, 0);
	dl_lent_cfg_free(&lent);

	/* Conventional config space only: nothing past 256 is touched. */
	make_device(true);
	pdev.cfg_size = PCI_CFG_SPACE_SIZE;
	CHECK_EQ(dl_lent_cfg_init(&lent), 0);
	CHECK_EQ(lent.cfg_size, PCI_CFG_SPACE_SIZE);
	check_mask(0xe0, 0x100, 0);
	dl_lent_cfg_free(&lent);
}

static void test_cap_variants(void)
{
	/* No FLR in device capabilities, AF without transactions pending. */
	init_device(false);
	CHECK_EQ(lent.flr_pos, 0);
	CHECK_EQ(lent.af_flr_pos, 0);
	dl_lent_cfg_free(&lent);

	/* 32-bit MSI without masking is 10 bytes; the rest is the device's. */
	make_device(true);
	put16(0x50 + PCI_MSI_FLAGS, 0);
	CHECK_EQ(dl_lent_cfg_init(&lent), 0);
	check_mask(0x50, 0x5a, 0);
	check_mask(0x5a, 0x70, 0xff);
	dl_lent_cfg_free(&lent);

	/*
	 * The list out of order, and an unknown capability that ends at the
	 * next one above it, not at the next in the list: 0x40 PM ->
	 * 0xa0 unknown -> 0x60 MSI-X -> 0x70 unknown -> 0xf0 unknown.
	 */
	make_device(true);
	memset(cfg + 0x40, 0, 0xc0);
	cap(0x40, PCI_CAP_ID_PM, 0xa0);
	cap(0xa0, 0x0e, 0x60);
	cap(0x60, PCI_CAP_ID_MSIX, 0x70);
	cap(0x70, 0x0e, 0xf0);
	cap(0xf0, 0x0e, 0);
	CHECK_EQ(dl_lent_cfg_init(&lent), 0);
	check_mask(0x40, 0x48, 0);
	check_mask(0x48, 0x60, 0xff);
	check_mask(0x60, 0x6c, 0);
	check_mask(0x6c, 0x70, 0xff);
	check_mask(0x70, 0xa0, 0);	/* up to the next above, 0xa0 */
	check_mask(0xa0, 0x100, 0);
	dl_lent_cfg_free(&lent);

	/* A list that loops, and a capability id of 0xff: both end it. */
	make_device(true);
	cap(0x40, PCI_CAP_ID_PM, 0x40);
	CHECK_EQ(dl_lent_cfg_init(&lent), 0);
	check_mask(0x40, 0x48, 0);
	check_mask(0x48, 0x100, 0xff);
	dl_lent_cfg_free(&lent);
	make_device(true);
	cap(0x50, 0xff, 0x70);
	CHECK_EQ(dl_lent_cfg_init(&lent), 0);
	check_mask(0x48, 0x100, 0xff);
	dl_lent_cfg_free(&lent);
}

static void check_write(unsigned int i, int where, int size, u32 val)
{
	if (i >= nwrites) {
		unit_fail(__FILE__, __LINE__, "write %u missing", i);
		return;
	}
	CHECK_EQ(wlog[i].where, where);
	CHECK_EQ(wlog[i].size, size);
	CHECK_EQ(wlog[i].val, val);
}

static void test_write_command(void)
{
	u32 val;

	init_device(true);
	put16(PCI_STATUS, PCI_STATUS_CAP_LIST | PCI_STATUS_REC_MASTER_ABORT);

	/* All ones over command and status: I/O, memory, bus master take. */
	CHECK_EQ(dl_lent_cfg_write(&lent, PCI_COMMAND, 4, ~0U), 1);
	CHECK_EQ(nwrites, 1);
	check_write(0, PCI_COMMAND, 1, 0x07);
	CHECK_EQ(lent.cmd, 0x0007);
	/* Status is write-1-to-clear: not written at all. */
	CHECK_EQ(get16(PCI_STATUS),
		 PCI_STATUS_CAP_LIST | PCI_STATUS_REC_MASTER_ABORT);
	/* INTx disable was the borrower's, virtual. */
	CHECK_EQ(nvdis, 1);
	CHECK(lent.intx_vdis);

	/* INTx disable alone: not filtered, never at the device. */
	nwrites = 0;
	nvdis = 0;
	CHECK_EQ(dl_lent_cfg_write(&lent, PCI_COMMAND, 2,
				   0x07 | PCI_COMMAND_INTX_DISABLE), 0);
	CHECK_EQ(get16(PCI_COMMAND), 0x0007);
	CHECK_EQ(nvdis, 1);
	CHECK_EQ(dl_lent_cfg_write(&lent, PCI_COMMAND + 1, 1, 0), 0);
	CHECK(!lent.intx_vdis);
	CHECK_EQ(nvdis, 2);

	/* Reads show the virtual bit, whatever the device has. */
	put16(PCI_COMMAND, 0x0007 | PCI_COMMAND_INTX_DISABLE);
	CHECK_EQ(dl_lent_cfg_read(&lent, PCI_COMMAND, 4, &val), 0);
	CHECK_EQ(val, 0x0007 | (u32)get16(PCI_STATUS) << 16);
	lent.intx_vdis = true;
	put16(PCI_COMMAND, 0x0007);
	CHECK_EQ(dl_lent_cfg_read(&lent, PCI_COMMAND + 1, 1, &val), 0);
	CHECK_EQ(val, PCI_COMMAND_INTX_DISABLE >> 8);
	CHECK_EQ(dl_lent_cfg_read(&lent, PCI_VENDOR_ID, 4, &val), 0);
	CHECK_EQ(val, 0x0a5410de);
	/* Accesses beyond the device's config space fail, reads with -errno. */
	pdev.cfg_size = PCI_CFG_SPACE_SIZE;
	CHECK(dl_lent_cfg_read(&lent, 0x100, 4, &val) < 0);
	dl_lent_cfg_free(&lent);
}

static void test_write_devctl_flr(void)
{
	init_device(true);

	/*
	 * Every bit of device control: the safe ones take; FLR is not
	 * written but asked of the caller, who resets where waiting is fine.
	 */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x80 + PCI_EXP_DEVCTL, 2, 0xffff),
		 DL_CFG_WRITE_FILTERED | DL_CFG_WRITE_RESET);
	CHECK_EQ(nwrites, 1);
	check_write(0, 0x88, 2, 0x2d1f);	/* 512 B reads kept, no FLR */
	CHECK_EQ(nresets, 0);

	/*
	 * The reset: no BAR write from the doorbell interrupt meanwhile, INTx
	 * relay masked around it, counted, not left held.
	 */
	CHECK_EQ(dl_lent_reset(&lent), 0);
	CHECK_EQ(nfast_close, 1);
	CHECK_EQ(nresets, 1);
	CHECK_EQ(nmask, 1);
	CHECK_EQ(neoi, 1);
	CHECK_EQ(atomic64_read(&lent.cnt[DL_LCNT_RESETS]), 1);
	CHECK_EQ(atomic_read(&lent.slow_holds), 0);

	/* FLR alone, as a byte: a reset, nothing else is filtered. */
	nwrites = 0;
	nresets = 0;
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x89, 1,
				   (0x2d1f | PCI_EXP_DEVCTL_BCR_FLR) >> 8),
		 DL_CFG_WRITE_RESET);
	check_write(0, 0x89, 1, 0x2d);

	/* FLR through the AF capability: nothing written, a reset. */
	nwrites = 0;
	CHECK_EQ(dl_lent_cfg_write(&lent, 0xc0 + PCI_AF_CTRL, 1,
				   PCI_AF_CTRL_FLR), DL_CFG_WRITE_RESET);
	CHECK_EQ(nwrites, 0);
	CHECK_EQ(nresets, 0);
	dl_lent_cfg_free(&lent);

	/* A device that cannot do FLR: the bit is filtered, no reset. */
	init_device(false);
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x88, 2,
				   0x2810 | PCI_EXP_DEVCTL_BCR_FLR), 1);
	CHECK_EQ(nresets, 0);
	check_write(0, 0x88, 2, 0x2810);
	nwrites = 0;
	CHECK_EQ(dl_lent_cfg_write(&lent, 0xc0 + PCI_AF_CTRL, 1,
				   PCI_AF_CTRL_FLR), 1);
	CHECK_EQ(nwrites, 0);
	CHECK_EQ(nresets, 0);
	dl_lent_cfg_free(&lent);
}

/*
 * Memory decode for the lender's own MSI-X table and PBA accesses: on
 * while they run if the holder turned it off, and then only its bit back
 * (what the MSI code did to INTx disable meanwhile stays); the lender's
 * copy, which BAR accesses are checked against, never changes. A reset
 * with MSI-X on saves (so restores, table included) decode on, and leaves
 * the holder's setting.
 */
static void test_memory_decode(void)
{
	const u16 held = PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE;

	init_device(true);
	put16(PCI_COMMAND, held);
	lent.cmd = held;

	CHECK(dl_lent_memory_enable(&lent));
	CHECK_EQ(get16(PCI_COMMAND), held | PCI_COMMAND_MEMORY);
	CHECK_EQ(lent.cmd, held);
	put16(PCI_COMMAND, get16(PCI_COMMAND) & ~PCI_COMMAND_INTX_DISABLE);
	dl_lent_memory_restore(&lent, true);
	CHECK_EQ(get16(PCI_COMMAND), PCI_COMMAND_MASTER);

	/* Decode on already: nothing written either way. */
	put16(PCI_COMMAND, PCI_COMMAND_MEMORY);
	nwrites = 0;
	CHECK(!dl_lent_memory_enable(&lent));
	dl_lent_memory_restore(&lent, false);
	CHECK_EQ(nwrites, 0);
	CHECK_EQ(get16(PCI_COMMAND), PCI_COMMAND_MEMORY);

	/* A reset with MSI-X on, decode off. */
	put16(PCI_COMMAND, held);
	pdev.msix_enabled = 1;
	CHECK_EQ(dl_lent_reset(&lent), 0);
	CHECK_EQ(nresets, 1);
	CHECK(reset_cmd & PCI_COMMAND_MEMORY);
	CHECK_EQ(get16(PCI_COMMAND), held);
	CHECK_EQ(lent.cmd, held);

	/* Without MSI-X the reset restores no table: decode untouched. */
	pdev.msix_enabled = 0;
	nwrites = 0;
	CHECK_EQ(dl_lent_reset(&lent), 0);
	CHECK_EQ(reset_cmd & PCI_COMMAND_MEMORY, 0);
	CHECK_EQ(nwrites, 0);
	dl_lent_cfg_free(&lent);
}

static void test_write_caps(void)
{
	init_device(true);

	/* MSI-X enable is the lender's: filtered, not written. */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x70 + PCI_MSIX_FLAGS, 2,
				   PCI_MSIX_FLAGS_ENABLE), 1);
	CHECK_EQ(nwrites, 0);
	/* So is MSI's address, and the PM control register (D3). */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x50 + PCI_MSI_ADDRESS_LO, 4,
				   0xfee00000), 1);
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x40 + PCI_PM_CTRL, 2,
				   PCI_PM_CTRL_STATE_MASK), 1);
	CHECK_EQ(nwrites, 0);
	/*
	 * "Filtered" (the debugfs counter) means a bit differs from what the
	 * device keeps: in a partly writable register, from its value; in a
	 * read-only byte, from zero, as the byte is not even read.
	 */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x70 + PCI_MSIX_FLAGS, 2, 0), 0);
	CHECK_EQ(nwrites, 0);
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x88, 2, get16(0x88)), 0);
	CHECK_EQ(nwrites, 1);
	nwrites = 0;

	/* Vendor registers take, in 16-bit pieces; the header does not. */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0xcc, 4, 0x12345678), 0);
	CHECK_EQ(nwrites, 2);
	check_write(0, 0xcc, 2, 0x5678);
	check_write(1, 0xce, 2, 0x1234);
	nwrites = 0;
	CHECK_EQ(dl_lent_cfg_write(&lent, 0xc8, 4, 0xffffffff), 1);
	CHECK_EQ(nwrites, 0);

	/* Extended: AER takes, SR-IOV does not. */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x100 + PCI_ERR_UNCOR_STATUS, 4,
				   0x00100000), 0);
	CHECK_EQ(nwrites, 2);
	/* Not its reserved bits, first-error pointer or header log. */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x100 + PCI_ERR_UNCOR_STATUS, 4,
				   0x80000000), 1);
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x100 + PCI_ERR_CAP, 4, 0x1f), 1);
	nwrites = 2;
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x100 + PCI_ERR_HEADER_LOG, 4,
				   0xdeadbeef), 1);
	CHECK_EQ(nwrites, 2);
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x150 + PCI_SRIOV_CTRL, 2,
				   PCI_SRIOV_CTRL_VFE), 1);
	CHECK_EQ(nwrites, 2);
	/* The device's own byte in a gap: a plain byte write. */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0x4b, 1, 0xa5), 0);
	check_write(2, 0x4b, 1, 0xa5);

	/*
	 * When the device comes back, what the holder wrote past the header
	 * is put back as lent (a gap, AER, a vendor register), and nothing
	 * else is written.
	 */
	CHECK_EQ(dl_lent_cfg_write(&lent, 0xcc, 2, 0x5a5a), 0);
	nwrites = 0;
	dl_lent_cfg_restore(&lent);
	CHECK_EQ(lent.pdev->cfg[0x4b], lent.cfg_orig[0x4b]);
	CHECK_EQ(lent.pdev->cfg[0xcc], lent.cfg_orig[0xcc]);
	CHECK_EQ(lent.pdev->cfg[0xcd], lent.cfg_orig[0xcd]);
	CHECK_EQ(lent.pdev->cfg[0x100 + PCI_ERR_UNCOR_STATUS + 2],
		 lent.cfg_orig[0x100 + PCI_ERR_UNCOR_STATUS + 2]);
	CHECK(nwrites >= 3);
	nwrites = 0;
	dl_lent_cfg_restore(&lent);
	CHECK_EQ(nwrites, 0);
	dl_lent_cfg_free(&lent);
}

static const struct unit_test tests[] = {
	{ "header: command I/O+memory+master, BARs and status read-only",
	  test_header_masks },
	{ "capabilities: PM/MSI/MSI-X/AF/unknown read-only, PCIe devctl, vendor",
	  test_std_cap_masks },
	{ "extended capabilities: AER and vendor writable, SR-IOV not",
	  test_ext_cap_masks },
	{ "capability lengths: MSI flavours, unsorted lists, loops, FLR bits",
	  test_cap_variants },
	{ "write: command filtered, INTx disable virtual, status untouched",
	  test_write_command },
	{ "write: device control masked, FLR (PCIe, AF) left to the caller",
	  test_write_devctl_flr },
	{ "memory decode: on for the lender's MSI-X accesses and resets, the holder's bit back",
	  test_memory_decode },
	{ "write: MSI, MSI-X, PM, SR-IOV kept; vendor, AER, gaps written and put back",
	  test_write_caps },
};

UNIT_SUITE(lender_cfg_suite, "lender/cfg.c: config write masks", tests);
