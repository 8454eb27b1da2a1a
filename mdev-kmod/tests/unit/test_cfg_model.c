// SPDX-License-Identifier: GPL-2.0
/*
 * include/dl_pci_cfg.h, the config model both hosts share: its tables,
 * and the per-byte maps each side lays from them once per device
 * (lender/cfg.c's dl_lent_cfg_init(), borrower/config.c's
 * dl_config_find_caps() and dl_config_map_caps()).
 *
 * The maps replaced a model in three encodings (header rows, if-chains
 * for MSI and MSI-X, positional capability rows) that the borrower
 * searched per byte on every access. They must decide the same, byte for
 * byte: that model and both sides' old lookups are kept below as they
 * were, and old and new are run over every offset of representative
 * config spaces and of thousands of random ones.
 */
#include <stdio.h>

/*
 * A second copy of borrower/config.c, for its static map building: its
 * public functions are renamed so as not to clash with test_borrower.c's
 * copy; what it calls comes from there.
 */
#define dl_config_cap_pos	model_dl_config_cap_pos
#define dl_config_init		model_dl_config_init
#define dl_config_free		model_dl_config_free
#define dl_config_after_reset	model_dl_config_after_reset
#define dl_config_rw		model_dl_config_rw
#define dl_config_bar_addr	model_dl_config_bar_addr
#define dl_config_command	model_dl_config_command

#pragma GCC diagnostic push
/* The kernel builds with -Wextra but without these (Makefile.extrawarn). */
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "../../borrower/config.c"
/* dl_lent_cfg_init(), from test_lender_cfg.c's copy of lender/cfg.c. */
#include "../../lender/internal.h"
#pragma GCC diagnostic pop

#include "unit.h"

/* ---- The model as it was before the per-byte map: the reference. ---- */

enum {
	OLD_DEV, OLD_ID, OLD_COMMAND, OLD_BAR, OLD_ROM, OLD_INTX_PIN, OLD_VCAP,
};

struct old_hdr_field {
	u8 off;
	u8 len;
	u8 view;
	u16 wmask;
};

static struct old_hdr_field old_header_field(unsigned int off)
{
	static const struct old_hdr_field fields[] = {
		{ PCI_VENDOR_ID, 4, OLD_ID, 0 },
		{ PCI_COMMAND, 2, OLD_COMMAND, PCI_COMMAND_IO |
		  PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER },
		{ PCI_CLASS_REVISION, 4, OLD_ID, 0 },
		{ PCI_CACHE_LINE_SIZE, 1, OLD_DEV, 0xff },
		{ PCI_LATENCY_TIMER, 1, OLD_DEV, 0xff },
		{ PCI_BASE_ADDRESS_0, PCI_BASE_ADDRESS_5 + 4 - PCI_BASE_ADDRESS_0,
		  OLD_BAR, 0 },
		{ PCI_ROM_ADDRESS, 4, OLD_ROM, 0 },
		{ PCI_INTERRUPT_LINE, 1, OLD_DEV, 0xff },
		{ PCI_INTERRUPT_PIN, 1, OLD_INTX_PIN, 0 },
	};
	struct old_hdr_field ro = { off, 1, OLD_DEV, 0 };
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(fields); i++)
		if (off >= fields[i].off && off < fields[i].off + fields[i].len)
			return fields[i];
	return ro;
}

static u8 old_header_wmask(unsigned int off)
{
	struct old_hdr_field f = old_header_field(off);
	unsigned int at = off - f.off;

	if (f.len == 2)
		return at ? f.wmask >> 8 : f.wmask & 0xff;
	return f.wmask & 0xff;
}

static bool old_cap_is_virtual(u8 id)
{
	return id == PCI_CAP_ID_MSI || id == PCI_CAP_ID_MSIX;
}

static u8 old_cap_virt_wmask(u8 id, u16 reg2, unsigned int rel)
{
	bool is64 = reg2 & PCI_MSI_FLAGS_64BIT;
	unsigned int data = is64 ? PCI_MSI_DATA_64 : PCI_MSI_DATA_32;
	unsigned int mask = is64 ? PCI_MSI_MASK_64 : PCI_MSI_MASK_32;

	if (id == PCI_CAP_ID_MSIX)
		return rel == PCI_MSIX_FLAGS + 1 ?
		       (PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL) >> 8 : 0;
	if (id != PCI_CAP_ID_MSI)
		return 0;
	if (rel == PCI_MSI_FLAGS)
		return PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE;
	if (rel >= PCI_MSI_ADDRESS_LO && rel < PCI_MSI_ADDRESS_LO + 4)
		return 0xff;
	if (is64 && rel >= PCI_MSI_ADDRESS_HI && rel < PCI_MSI_ADDRESS_HI + 4)
		return 0xff;
	if (rel >= data && rel < data + 2)
		return 0xff;
	if ((reg2 & PCI_MSI_FLAGS_MASKBIT) && rel >= mask && rel < mask + 4)
		return 0xff;
	return 0;
}

struct old_cap_perm {
	bool ext;
	u16 id;
	u8 off;
	u8 len;
	u32 wmask;
};

static const struct old_cap_perm *old_cap_perms(bool ext, u16 id,
						unsigned int *n)
{
	static const struct old_cap_perm rows[] = {
		{ false, PCI_CAP_ID_EXP, PCI_EXP_DEVCTL, 2, DL_DEVCTL_WMASK },
		{ false, PCI_CAP_ID_VNDR, PCI_CAP_SIZEOF, 0, 0xff },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_UNCOR_STATUS, 4,
		  DL_AER_UNCOR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_UNCOR_MASK, 4,
		  DL_AER_UNCOR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_UNCOR_SEVER, 4,
		  DL_AER_UNCOR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_COR_STATUS, 4,
		  DL_AER_COR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_COR_MASK, 4,
		  DL_AER_COR_WMASK },
		{ true, PCI_EXT_CAP_ID_ERR, PCI_ERR_CAP, 4, DL_AER_CAP_WMASK },
		{ true, PCI_EXT_CAP_ID_VNDR, PCI_VNDR_HEADER, 0, 0xff },
	};
	unsigned int i, k;

	for (i = 0; i < ARRAY_SIZE(rows); i++) {
		if (rows[i].ext != ext || rows[i].id != id)
			continue;
		for (k = i; k < ARRAY_SIZE(rows) && rows[k].ext == ext &&
		     rows[k].id == id; k++)
			;
		*n = k - i;
		return &rows[i];
	}
	*n = 0;
	return NULL;
}

static u16 le16_at(const u8 *cfg, unsigned int off)
{
	return cfg[off] | cfg[off + 1] << 8;
}

static u32 le32_at(const u8 *cfg, unsigned int off)
{
	return le16_at(cfg, off) | (u32)le16_at(cfg, off + 2) << 16;
}

/* The lender's old masks (lender/cfg.c before the map), from a copy. */
struct old_cap {
	u16 pos;
	u16 id;
};

static void old_wmask_set(u8 *wm, unsigned int size, unsigned int pos,
			  unsigned int len, u8 mask)
{
	if (pos >= size)
		return;
	len = min(len, size - pos);
	memset(wm + pos, mask, len);
}

static void old_lender_caps(const u8 *cfg, unsigned int size, u8 *wm,
			    const struct old_cap *caps, unsigned int n,
			    bool ext, unsigned int end)
{
	const struct old_cap_perm *perms;
	unsigned int i, j, k, b, nperms;

	for (i = 0; i < n; i++) {
		unsigned int pos = caps[i].pos, next = end, len;

		for (j = 0; j < n; j++)
			if (caps[j].pos > pos && caps[j].pos < next)
				next = caps[j].pos;
		len = next - pos;
		if (!ext)
			len = dl_std_cap_len(caps[i].id,
					     le16_at(cfg, pos + PCI_CAP_FLAGS),
					     len);
		old_wmask_set(wm, size, pos, max(len, PCI_CAP_SIZEOF), 0);
		perms = old_cap_perms(ext, caps[i].id, &nperms);
		for (k = 0; k < nperms; k++) {
			const struct old_cap_perm *p = &perms[k];

			if (p->off + p->len > len)
				continue;
			if (!p->len) {
				old_wmask_set(wm, size, pos + p->off,
					      len - p->off, p->wmask);
				continue;
			}
			for (b = 0; b < p->len; b++)
				old_wmask_set(wm, size, pos + p->off + b, 1,
					      (p->wmask >> (8 * b)) & 0xff);
		}
	}
}

static void old_lender(const u8 *cfg, unsigned int size, u8 *wm)
{
	struct old_cap caps[64];
	unsigned int n = 0, off;
	int ttl = (PCI_CFG_SPACE_SIZE - PCI_STD_HEADER_SIZEOF) / PCI_CAP_SIZEOF;
	int p;
	u32 header;
	u8 pos, id;

	memset(wm, 0xff, size);
	for (off = 0; off < PCI_STD_HEADER_SIZEOF; off++)
		wm[off] = old_header_wmask(off);

	pos = cfg[PCI_CAPABILITY_LIST];
	while (n < 64 && pos >= PCI_STD_HEADER_SIZEOF && ttl--) {
		pos &= ~3;
		id = cfg[pos + PCI_CAP_LIST_ID];
		if (id == 0xff)
			break;
		caps[n].pos = pos;
		caps[n++].id = id;
		pos = cfg[pos + PCI_CAP_LIST_NEXT];
	}
	old_lender_caps(cfg, size, wm, caps, n, false, PCI_CFG_SPACE_SIZE);

	if (size <= PCI_CFG_SPACE_SIZE)
		return;
	old_wmask_set(wm, size, PCI_CFG_SPACE_SIZE, size - PCI_CFG_SPACE_SIZE,
		      0);
	n = 0;
	p = PCI_CFG_SPACE_SIZE;
	while (n < 64 && p >= PCI_CFG_SPACE_SIZE && p < (int)size) {
		header = le32_at(cfg, p);
		if (!header || header == ~0U)
			break;
		caps[n].pos = p;
		caps[n++].id = PCI_EXT_CAP_ID(header);
		p = PCI_EXT_CAP_NEXT(header);
	}
	old_lender_caps(cfg, size, wm, caps, n, true, size);
}

/*
 * The borrower's old lookups (borrower/config.c before the map): a byte's
 * region, the bits of it a guest may write, and whether a write to it
 * clamps MSI's Multiple Message Enable.
 */
struct old_borrower {
	struct dl_vcap vcaps[DL_B_VCAPS];
	unsigned int nvcaps;
};

static unsigned int old_vcap_pos(const struct old_borrower *ob, u8 id)
{
	unsigned int i;

	for (i = 0; i < ob->nvcaps; i++)
		if (ob->vcaps[i].id == id)
			return ob->vcaps[i].pos;
	return 0;
}

static void old_find_vcaps(const u8 *cfg, struct old_borrower *ob)
{
	unsigned int pos, len, ttl = 48;
	u8 id;

	ob->nvcaps = 0;
	if (!(le16_at(cfg, PCI_STATUS) & PCI_STATUS_CAP_LIST))
		return;
	pos = cfg[PCI_CAPABILITY_LIST] & ~3;
	while (pos >= PCI_STD_HEADER_SIZEOF && pos <= PCI_CFG_SPACE_SIZE - 4 &&
	       ttl--) {
		id = cfg[pos + PCI_CAP_LIST_ID];
		if (old_cap_is_virtual(id) && ob->nvcaps < DL_B_VCAPS &&
		    !old_vcap_pos(ob, id)) {
			len = dl_std_cap_len(id, le16_at(cfg, pos + PCI_CAP_FLAGS),
					     PCI_CFG_SPACE_SIZE);
			if (pos + len <= PCI_CFG_SPACE_SIZE)
				ob->vcaps[ob->nvcaps++] = (struct dl_vcap){
					.id = id, .pos = pos, .len = len,
				};
		}
		pos = cfg[pos + PCI_CAP_LIST_NEXT] & ~3;
	}
}

static void old_borrower_byte(const u8 *cfg, const struct old_borrower *ob,
			      unsigned int off, u8 *region, u8 *vwmask,
			      bool *clamp)
{
	const struct dl_vcap *cap = NULL;
	unsigned int i, rel;

	*vwmask = 0;
	*clamp = false;
	if (off < PCI_STD_HEADER_SIZEOF) {
		*region = old_header_field(off).view;
		return;
	}
	for (i = 0; i < ob->nvcaps && !cap; i++)
		if (off >= ob->vcaps[i].pos &&
		    off < ob->vcaps[i].pos + ob->vcaps[i].len)
			cap = &ob->vcaps[i];
	if (!cap) {
		*region = OLD_DEV;
		return;
	}
	*region = OLD_VCAP;
	rel = off - cap->pos;
	*vwmask = old_cap_virt_wmask(cap->id,
				     le16_at(cfg, cap->pos + PCI_CAP_FLAGS),
				     rel);
	*clamp = cap->id == PCI_CAP_ID_MSI && rel == PCI_MSI_FLAGS;
}

/* ---- Old against new. ---- */

static u8 space[PCI_CFG_SPACE_EXP_SIZE];
static u8 old_wm[PCI_CFG_SPACE_EXP_SIZE];
static struct pci_dev mpdev;
static struct dl_lent mlent;
static struct dl_vdev mv;

/*
 * Lays both sides' new maps over @space (@size bytes) and compares every
 * byte with the old lookups; @what names the space in failures. At most
 * one failure per side is reported.
 *
 * Return: whether they differ.
 */
static bool compare_space(unsigned int size, const char *what)
{
	struct old_borrower ob;
	bool lfail = false, bfail = false, clamp;
	unsigned int off;
	u8 region, vwmask;

	/* The lender: its map's write masks. */
	memset(&mlent, 0, sizeof(mlent));
	mpdev = (struct pci_dev){ .cfg = space, .cfg_size = size };
	mlent.pdev = &mpdev;
	CHECK_EQ(dl_lent_cfg_init(&mlent), 0);
	old_lender(space, size, old_wm);

	/* The borrower: its map, from its copy (here the raw space). */
	memset(&mv, 0, sizeof(mv));
	mv.info.cfg_size = size;
	mv.cfg.vconfig = space;
	mv.cfg.map = kcalloc(size, sizeof(*mv.cfg.map), GFP_KERNEL);
	dl_config_find_caps(&mv);
	dl_config_map_caps(&mv);
	old_find_vcaps(space, &ob);
	CHECK_EQ(mv.cfg.nvcaps, ob.nvcaps);

	for (off = 0; off < size; off++) {
		if (!lfail && mlent.cfg_map[off].wmask != old_wm[off]) {
			unit_fail(__FILE__, __LINE__,
				  "%s: lender byte 0x%x: wmask 0x%02x, was 0x%02x",
				  what, off, mlent.cfg_map[off].wmask,
				  old_wm[off]);
			lfail = true;
		}
		old_borrower_byte(space, &ob, off, &region, &vwmask, &clamp);
		if (!bfail &&
		    (dl_config_region(&mv, off) != region ||
		     mv.cfg.map[off].vwmask != vwmask ||
		     (mv.cfg.map[off].view == DL_VIEW_MSI_FLAGS) != clamp)) {
			unit_fail(__FILE__, __LINE__,
				  "%s: borrower byte 0x%x: region %d vwmask 0x%02x clamp %d, was %d 0x%02x %d",
				  what, off, dl_config_region(&mv, off),
				  mv.cfg.map[off].vwmask,
				  mv.cfg.map[off].view == DL_VIEW_MSI_FLAGS,
				  region, vwmask, clamp);
			bfail = true;
		}
	}
	kfree(mv.cfg.map);
	mv.cfg.map = NULL;
	dl_lent_cfg_free(&mlent);
	return lfail || bfail;
}

static void put16(unsigned int off, u16 v)
{
	space[off] = v;
	space[off + 1] = v >> 8;
}

static void put32(unsigned int off, u32 v)
{
	put16(off, v);
	put16(off + 2, v >> 16);
}

static void cap(unsigned int pos, u8 id, u8 next, u16 reg2)
{
	space[pos + PCI_CAP_LIST_ID] = id;
	space[pos + PCI_CAP_LIST_NEXT] = next;
	put16(pos + PCI_CAP_FLAGS, reg2);
}

static void ext_cap(unsigned int pos, u16 id, unsigned int next)
{
	put32(pos, id | 1 << 16 | next << 20);
}

static void new_space(void)
{
	memset(space, 0, sizeof(space));
	put32(PCI_VENDOR_ID, 0x0a5410de);
	put16(PCI_STATUS, PCI_STATUS_CAP_LIST);
	space[PCI_CAPABILITY_LIST] = 0x40;
}

#define MSI64M	(PCI_MSI_FLAGS_64BIT | PCI_MSI_FLAGS_MASKBIT)

static void test_representative(void)
{
	static const u16 msi_flags[] = {
		0, PCI_MSI_FLAGS_64BIT, PCI_MSI_FLAGS_MASKBIT, MSI64M,
	};
	unsigned int i;

	/* test_lender_cfg.c's device: every kind of capability. */
	new_space();
	cap(0x40, PCI_CAP_ID_PM, 0x50, 0);
	cap(0x50, PCI_CAP_ID_MSI, 0x70, MSI64M);
	cap(0x70, PCI_CAP_ID_MSIX, 0x80, 31);
	cap(0x80, PCI_CAP_ID_EXP, 0xc0, 2);
	cap(0xc0, PCI_CAP_ID_AF, 0xc8, 0);
	cap(0xc8, PCI_CAP_ID_VNDR, 0xe0, 16);
	cap(0xe0, PCI_CAP_ID_SSVID, 0, 0);
	ext_cap(0x100, PCI_EXT_CAP_ID_ERR, 0x150);
	ext_cap(0x150, PCI_EXT_CAP_ID_SRIOV, 0x190);
	ext_cap(0x190, PCI_EXT_CAP_ID_VNDR, 0);
	compare_space(PCI_CFG_SPACE_EXP_SIZE, "lender test device");
	compare_space(PCI_CFG_SPACE_SIZE, "lender test device, 256 bytes");

	/* test_borrower.c's device. */
	new_space();
	cap(0x40, PCI_CAP_ID_MSI, 0x60, MSI64M | PCI_MSI_FLAGS_ENABLE);
	cap(0x60, PCI_CAP_ID_MSIX, 0x70, 31);
	cap(0x70, PCI_CAP_ID_EXP, 0, 2);
	compare_space(PCI_CFG_SPACE_SIZE, "borrower test device");

	/* Every MSI layout, and MSI alone at the end of config space. */
	for (i = 0; i < ARRAY_SIZE(msi_flags); i++) {
		new_space();
		cap(0x40, PCI_CAP_ID_MSI, 0xe8, msi_flags[i]);
		cap(0xe8, PCI_CAP_ID_MSI, 0, msi_flags[i]);	/* a second */
		compare_space(PCI_CFG_SPACE_SIZE, "MSI layout");
		new_space();
		space[PCI_CAPABILITY_LIST] = 0xf0;
		cap(0xf0, PCI_CAP_ID_MSI, 0, msi_flags[i]);
		compare_space(PCI_CFG_SPACE_SIZE, "MSI at 0xf0");
	}

	/* MSI and MSI-X overlapping, either first: each byte is the first's. */
	new_space();
	cap(0x40, PCI_CAP_ID_MSI, 0x50, MSI64M);
	cap(0x50, PCI_CAP_ID_MSIX, 0, 0);
	compare_space(PCI_CFG_SPACE_SIZE, "MSI over MSI-X");
	new_space();
	cap(0x40, PCI_CAP_ID_MSIX, 0x44, 0);
	cap(0x44, PCI_CAP_ID_MSI, 0, MSI64M);
	compare_space(PCI_CFG_SPACE_SIZE, "MSI-X over MSI");

	/* Unsorted, a loop, id 0xff, short vendor, no capability list bit. */
	new_space();
	cap(0x40, PCI_CAP_ID_PM, 0xa0, 0);
	cap(0xa0, PCI_CAP_ID_VNDR, 0x60, 2);
	cap(0x60, PCI_CAP_ID_MSIX, 0x70, 0);
	cap(0x70, 0x0e, 0xf0, 0);
	cap(0xf0, PCI_CAP_ID_EXP, 0x40, 0);
	compare_space(PCI_CFG_SPACE_SIZE, "unsorted loop");
	put16(PCI_STATUS, 0);
	compare_space(PCI_CFG_SPACE_SIZE, "no capability list");
	new_space();
	cap(0x40, PCI_CAP_ID_MSI, 0x50, 0);
	cap(0x50, 0xff, 0x60, 0);
	cap(0x60, PCI_CAP_ID_MSIX, 0, 0);
	compare_space(PCI_CFG_SPACE_SIZE, "id 0xff");

	/* Extended: none, all ones, AER short before the end, vendor last. */
	new_space();
	compare_space(PCI_CFG_SPACE_EXP_SIZE, "no extended capability");
	put32(0x100, ~0U);
	compare_space(PCI_CFG_SPACE_EXP_SIZE, "extended all ones");
	new_space();
	ext_cap(0x100, PCI_EXT_CAP_ID_VNDR, 0xff0);
	ext_cap(0xff0, PCI_EXT_CAP_ID_ERR, 0x100);
	compare_space(PCI_CFG_SPACE_EXP_SIZE, "short AER, loop");
}

static u32 rnd_state = 2463534242U;

static u32 rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 17;
	rnd_state ^= rnd_state << 5;
	return rnd_state;
}

/*
 * Random config spaces: random bytes, with capability lists of the ids
 * the model knows (and some it does not) at random aligned places, MSI
 * flags of every layout, vendor lengths, loops and stray pointers.
 */
static void random_space(unsigned int size)
{
	static const u8 std_ids[] = {
		PCI_CAP_ID_PM, PCI_CAP_ID_MSI, PCI_CAP_ID_MSIX, PCI_CAP_ID_EXP,
		PCI_CAP_ID_AF, PCI_CAP_ID_VNDR, PCI_CAP_ID_VPD, PCI_CAP_ID_MSI,
		PCI_CAP_ID_MSIX, PCI_CAP_ID_SSVID, 0xff, 0,
	};
	static const u16 ext_ids[] = {
		PCI_EXT_CAP_ID_ERR, PCI_EXT_CAP_ID_VNDR, PCI_EXT_CAP_ID_SRIOV,
		PCI_EXT_CAP_ID_ERR, PCI_CAP_ID_EXP, 0,
	};
	unsigned int i, n, pos, next;

	for (i = 0; i < size; i++)
		space[i] = rnd();
	if (rnd() % 8)
		space[PCI_STATUS] |= PCI_STATUS_CAP_LIST;
	pos = 0x40 + (rnd() % 48) * 4;
	space[PCI_CAPABILITY_LIST] = pos | (rnd() % 4 ? 0 : rnd() % 4);
	n = rnd() % 10;
	for (i = 0; i < n; i++) {
		next = rnd() % 6 ? 0x40 + (rnd() % 48) * 4 : rnd() % 0x40;
		cap(pos, std_ids[rnd() % ARRAY_SIZE(std_ids)], next,
		    rnd() % 3 ? rnd() % 32 : rnd());
		if (!(rnd() % 8))
			space[pos + PCI_CAP_LIST_ID] = rnd();
		pos = next >= 0x40 ? next : 0x40;
	}
	if (size <= PCI_CFG_SPACE_SIZE)
		return;
	pos = PCI_CFG_SPACE_SIZE;
	n = rnd() % 8;
	for (i = 0; i < n; i++) {
		next = rnd() % 6 ? 0x100 + (rnd() % 960) * 4 : 0;
		ext_cap(pos, ext_ids[rnd() % ARRAY_SIZE(ext_ids)], next);
		if (!next)
			break;
		pos = next;
	}
}

static void test_random(void)
{
	unsigned int i, fails = 0;
	char what[48];

	/* Half of them with extended config space; a few failures are enough. */
	for (i = 0; i < 4000 && fails < 3; i++) {
		unsigned int size = i % 2 ? PCI_CFG_SPACE_EXP_SIZE :
					    PCI_CFG_SPACE_SIZE;

		random_space(size);
		snprintf(what, sizeof(what), "random space %u", i);
		fails += compare_space(size, what);
	}
}

/* ---- The model itself. ---- */

static struct dl_cfg_byte map[PCI_CFG_SPACE_EXP_SIZE];

/* Lays one capability's table at 0 of a map of its own. */
static void lay(bool ext, u16 id, u16 reg2, unsigned int len)
{
	const struct dl_cfg_perm *rows;
	unsigned int n;

	memset(map, 0xa5, sizeof(map));
	rows = dl_cfg_cap_perms(ext, id, reg2, &n);
	dl_cfg_map_rows(map, ARRAY_SIZE(map), 0, len, rows, n);
}

static void test_tables(void)
{
	static const u8 std_ids[] = {
		PCI_CAP_ID_PM, PCI_CAP_ID_AGP, PCI_CAP_ID_VPD, PCI_CAP_ID_MSI,
		PCI_CAP_ID_VNDR, PCI_CAP_ID_EXP, PCI_CAP_ID_MSIX, PCI_CAP_ID_AF,
	};
	const struct dl_cfg_perm *rows;
	unsigned int i, k, n, rel;

	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_PM, 0, 0xc0), PCI_PM_SIZEOF);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_MSI, 0, 0xc0), 10);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_MSI, PCI_MSI_FLAGS_64BIT, 0xc0), 14);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_MSI, PCI_MSI_FLAGS_MASKBIT, 0xc0), 20);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_MSI, MSI64M, 0xc0), 24);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_MSIX, 0xffff, 0xc0), 12);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_VNDR, 0x1234, 0xc0), 0x34);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_AGP, 0, 0x30), 0x30);	/* unknown */
	/* Never past the next capability. */
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_MSI, MSI64M, 16), 16);
	CHECK_EQ(dl_std_cap_len(PCI_CAP_ID_VNDR, 0xff, 8), 8);

	/* MSI-X: enable and function mask only, all of it virtual. */
	lay(false, PCI_CAP_ID_MSIX, 0, PCI_CAP_MSIX_SIZEOF);
	for (rel = 0; rel < PCI_CAP_MSIX_SIZEOF; rel++) {
		CHECK_EQ(map[rel].vwmask, rel == 3 ? 0xc0 : 0);
		CHECK_EQ(map[rel].view, DL_VIEW_VCAP);
		CHECK_EQ(map[rel].wmask, 0);
	}
	CHECK_EQ(map[PCI_CAP_MSIX_SIZEOF].view, 0xa5);	/* nothing past it */

	/* MSI, 64-bit with masking: flags' enable and QSIZE, address, data, mask. */
	lay(false, PCI_CAP_ID_MSI, MSI64M, 24);
	for (rel = 0; rel < 24; rel++) {
		u8 want = 0;

		if (rel == PCI_MSI_FLAGS)
			want = PCI_MSI_FLAGS_ENABLE | PCI_MSI_FLAGS_QSIZE;
		else if ((rel >= 4 && rel < 14) || (rel >= 16 && rel < 20))
			want = 0xff;
		CHECK_EQ(map[rel].vwmask, want);
		CHECK_EQ(map[rel].view, rel == PCI_MSI_FLAGS ?
			 DL_VIEW_MSI_FLAGS : DL_VIEW_VCAP);
		CHECK_EQ(map[rel].wmask, 0);
	}
	/* MSI, 32-bit without masking: data at 8, nothing after it. */
	lay(false, PCI_CAP_ID_MSI, 0, 10);
	CHECK_EQ(map[8].vwmask, 0xff);
	CHECK_EQ(map[10].view, 0xa5);
	lay(false, PCI_CAP_ID_PM, 0, PCI_PM_SIZEOF);
	CHECK_EQ(map[4].vwmask, 0);
	CHECK_EQ(map[4].view, DL_VIEW_DEV);

	/* What the borrower virtualizes, the lender never lets it write. */
	for (i = 0; i < ARRAY_SIZE(std_ids); i++) {
		rows = dl_cfg_cap_perms(false, std_ids[i], MSI64M, &n);
		CHECK(rows || !n);
		CHECK_EQ(dl_cap_is_virtual(std_ids[i]),
			 std_ids[i] == PCI_CAP_ID_MSI ||
			 std_ids[i] == PCI_CAP_ID_MSIX);
		for (k = 0; k < n; k++)
			if (rows[k].view != DL_VIEW_DEV)
				CHECK_EQ(rows[k].wmask, 0);
	}
	rows = dl_cfg_cap_perms(false, PCI_CAP_ID_EXP, 0, &n);
	CHECK_EQ(n, 1);
	CHECK_EQ(rows[0].wmask, DL_DEVCTL_WMASK);
	CHECK(!(DL_DEVCTL_WMASK & PCI_EXP_DEVCTL_BCR_FLR));
	CHECK(dl_cfg_cap_perms(true, PCI_EXT_CAP_ID_ERR, 0, &n) && n == 6);
	CHECK(!dl_cfg_cap_perms(true, PCI_EXT_CAP_ID_SRIOV, 0, &n) && !n);
	/* Same id, other space: extended 0x10 is SR-IOV, read-only. */
	CHECK(!dl_cfg_cap_perms(true, PCI_CAP_ID_EXP, 0, &n) && !n);
	/* Short: a row that does not fit is not laid; the header always is. */
	lay(false, PCI_CAP_ID_EXP, 0, PCI_EXP_DEVCTL + 1);
	CHECK_EQ(map[PCI_EXP_DEVCTL].wmask, 0);
	lay(false, PCI_CAP_ID_VNDR, 0, 2);
	CHECK_EQ(map[3].wmask, 0);
	CHECK_EQ(map[4].view, 0xa5);

	/* The header: what the borrower writes, and what it serves itself. */
	dl_cfg_map_init(map, PCI_CFG_SPACE_SIZE);
	for (i = 0; i < PCI_STD_HEADER_SIZEOF; i++) {
		u8 want = 0;

		if (i == PCI_COMMAND)
			want = PCI_COMMAND_IO | PCI_COMMAND_MEMORY |
			       PCI_COMMAND_MASTER;
		else if (i == PCI_CACHE_LINE_SIZE || i == PCI_LATENCY_TIMER ||
			 i == PCI_INTERRUPT_LINE)
			want = 0xff;
		CHECK_EQ(map[i].wmask, want);
		CHECK_EQ(map[i].vwmask, 0);
		/* Nothing the borrower serves itself is written at the device. */
		if (map[i].view != DL_VIEW_DEV &&
		    map[i].view != DL_VIEW_COMMAND)
			CHECK_EQ(map[i].wmask, 0);
	}
	CHECK_EQ(map[PCI_BASE_ADDRESS_5 + 3].view, DL_VIEW_BAR);
	CHECK_EQ(map[PCI_CARDBUS_CIS].view, DL_VIEW_DEV);
	CHECK_EQ(map[PCI_SUBSYSTEM_ID].view, DL_VIEW_DEV);
	CHECK_EQ(map[PCI_INTERRUPT_PIN].view, DL_VIEW_INTX_PIN);
	CHECK_EQ(map[PCI_CLASS_DEVICE + 1].view, DL_VIEW_ID);
	for (i = PCI_STD_HEADER_SIZEOF; i < PCI_CFG_SPACE_SIZE; i++)
		if (map[i].view != DL_VIEW_DEV || map[i].wmask != 0xff)
			unit_fail(__FILE__, __LINE__, "byte 0x%x not the device's",
				  i);
}

static const struct unit_test tests[] = {
	{ "tables: header, lengths, virtual MSI/MSI-X bits, no device permission for them",
	  test_tables },
	{ "maps = old lookups, every byte: representative config spaces",
	  test_representative },
	{ "maps = old lookups, every byte: 4000 random config spaces",
	  test_random },
};

UNIT_SUITE(cfg_model_suite, "include/dl_pci_cfg.h: the config model's maps",
	   tests);
