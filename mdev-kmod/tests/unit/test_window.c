// SPDX-License-Identifier: GPL-2.0
/*
 * fabric/window.c: the allocator of a peer's bounded inbound window (next
 * fit, the reserved start never handed out, exact frees, refusals when
 * full), the window checks a peer's offsets go through, the RAM layout
 * translation, and dl_fabric_inbound_map() on both kinds of fabric with
 * a fake backend.
 */
#include <stdio.h>

#pragma GCC diagnostic push
/* The kernel builds with -Wextra but without these (Makefile.extrawarn). */
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
/* test_borrower.c fakes these for borrower/dma.c: the real ones, renamed. */
#define dl_fabric_inbound_map		real_dl_fabric_inbound_map
#define dl_fabric_inbound_unmap		real_dl_fabric_inbound_unmap
#define dl_fabric_inbound_windowed	real_dl_fabric_inbound_windowed
#include "../../fabric/window.c"
#pragma GCC diagnostic pop

#include "unit.h"

#define PG	PAGE_SIZE

static void test_alloc(void)
{
	struct dl_win w;
	u64 off, a, b;

	CHECK_EQ(dl_win_init(&w, 0, 0), -EINVAL);
	CHECK_EQ(dl_win_init(&w, 16 * PG, 17 * PG), -EINVAL);
	CHECK_EQ(dl_win_init(&w, 16 * PG + 1, 0), -EINVAL);
	CHECK_EQ(dl_win_init(&w, 16 * PG, 3 * PG), 0);
	CHECK_EQ(w.used, 3);

	/* Next fit from the end of the reserved start, consecutive. */
	CHECK_EQ(dl_win_alloc(&w, 2 * PG, &a), 0);
	CHECK_EQ(a, 3 * PG);
	CHECK_EQ(dl_win_alloc(&w, 4 * PG, &b), 0);
	CHECK_EQ(b, 5 * PG);
	CHECK_EQ(w.used, 9);

	/* Malformed requests hand out nothing. */
	CHECK_EQ(dl_win_alloc(&w, 0, &off), -EINVAL);
	CHECK_EQ(dl_win_alloc(&w, PG + 1, &off), -EINVAL);
	CHECK_EQ(dl_win_alloc(&w, 17 * PG, &off), -EINVAL);

	/* Too big for what is left: refused and counted. */
	CHECK_EQ(dl_win_alloc(&w, 8 * PG, &off), -ENOSPC);
	CHECK_EQ(w.refused, 1);
	CHECK_EQ(dl_win_alloc(&w, 7 * PG, &off), 0);
	CHECK_EQ(off, 9 * PG);
	CHECK_EQ(w.used, 16);
	CHECK_EQ(dl_win_alloc(&w, PG, &off), -ENOSPC);

	/* Frees are exact; a part of a run may go alone. */
	CHECK_EQ(dl_win_free(&w, 6 * PG, PG), 0);
	CHECK_EQ(dl_win_free(&w, 6 * PG, PG), -EINVAL);	/* twice */
	CHECK_EQ(dl_win_free(&w, 2 * PG, PG), -EINVAL);	/* reserved */
	CHECK_EQ(dl_win_free(&w, 15 * PG, 2 * PG), -EINVAL);	/* past the end */
	CHECK_EQ(dl_win_free(&w, 5 * PG, 3 * PG), -EINVAL);	/* 6 is free */
	CHECK_EQ(dl_win_free(&w, 3 * PG + 1, PG), -EINVAL);
	CHECK_EQ(dl_win_free(&w, ~0ULL & ~(PG - 1), PG), -EINVAL);
	CHECK_EQ(w.used, 15);

	/* The hole is found again, wrapping past the end. */
	CHECK_EQ(dl_win_alloc(&w, 2 * PG, &off), -ENOSPC);
	CHECK_EQ(dl_win_alloc(&w, PG, &off), 0);
	CHECK_EQ(off, 6 * PG);
	CHECK_EQ(dl_win_free(&w, 3 * PG, 13 * PG), 0);
	CHECK_EQ(w.used, 3);
	CHECK_EQ(dl_win_alloc(&w, 13 * PG, &off), 0);
	CHECK_EQ(off, 3 * PG);
	dl_win_destroy(&w);
	CHECK(!w.map);
	CHECK_EQ(dl_win_alloc(&w, PG, &off), -EINVAL);
}

static void test_checks(void)
{
	/* A 256 MiB window on a host of any size: the identity layout. */
	struct dl_ram_layout win = {
		.ram_size = 256 << 20, .ram_low_size = 256 << 20,
		.ram_high_base = 256 << 20,
	};
	/* An emulated host: 512 MiB low, 1 GiB from 4 GiB. */
	struct dl_ram_layout ram = {
		.ram_size = 1536ULL << 20, .ram_low_size = 512 << 20,
		.ram_high_base = 4ULL << 30,
	};
	u64 off = 0;

	CHECK(dl_win_check(16 * PG, 0, 16 * PG));
	CHECK(!dl_win_check(16 * PG, 0, 0));
	CHECK(!dl_win_check(16 * PG, PG, 16 * PG));
	CHECK(!dl_win_check(16 * PG, ~0ULL - PG, 2 * PG));

	CHECK_EQ(dl_layout_xlate(&win, 255 << 20, 1 << 20, &off), 0);
	CHECK_EQ(off, 255 << 20);
	CHECK_EQ(dl_layout_xlate(&win, 255 << 20, 2 << 20, &off), -ERANGE);
	/* A physical address above 4 GiB is no offset of a window. */
	CHECK_EQ(dl_layout_xlate(&win, 5ULL << 30, PG, &off), -ERANGE);
	CHECK_EQ(dl_layout_xlate(&win, ~0ULL - PG + 1, PG, &off), -ERANGE);

	CHECK_EQ(dl_layout_xlate(&ram, 4ULL << 30, PG, &off), 0);
	CHECK_EQ(off, 512 << 20);
	CHECK_EQ(dl_layout_xlate(&ram, (5ULL << 30) - PG, PG, &off), 0);
	CHECK_EQ(off, (1536ULL << 20) - PG);
	CHECK_EQ(dl_layout_xlate(&ram, 5ULL << 30, PG, &off), -ERANGE);
	CHECK_EQ(dl_layout_xlate(&ram, 1ULL << 30, PG, &off), -ERANGE);
	CHECK_EQ(dl_layout_xlate(&ram, (512 << 20) - PG, 2 * PG, &off),
		 -ERANGE);
	CHECK_EQ(dl_layout_xlate(&ram, 0, 0, &off), -EINVAL);
}

/* A windowed backend that records what it is asked. */
static unsigned int nmap, nunmap;
static u64 map_off, map_len, unmap_off, unmap_len;
static phys_addr_t map_phys;
static int map_ret;

static int fake_inbound_map(struct dl_fabric *fab, u32 peer, u64 off,
			    phys_addr_t phys, u64 len)
{
	(void)fab;
	nmap++;
	map_off = off;
	map_phys = phys;
	map_len = len;
	return peer == 3 ? -ENODEV : map_ret;
}

static void fake_inbound_unmap(struct dl_fabric *fab, u32 peer, u64 off,
			       u64 len)
{
	(void)fab;
	(void)peer;
	nunmap++;
	unmap_off = off;
	unmap_len = len;
}

static const struct dl_fabric_backend_ops windowed_ops = {
	.name = "fake",
	.inbound_map = fake_inbound_map,
	.inbound_unmap = fake_inbound_unmap,
};

static const struct dl_fabric_backend_ops ram_ops = { .name = "fake" };

static void test_inbound_map(void)
{
	static struct dl_fabric fab;
	u64 addr;

	/* Physical addresses: checked against the layout, nothing kept. */
	memset(&fab, 0, sizeof(fab));
	fab.ops = &ram_ops;
	fab.host_id = 0;
	fab.geom.max_hosts = 3;
	fab.layout.ram_size = 1536ULL << 20;
	fab.layout.ram_low_size = 512 << 20;
	fab.layout.ram_high_base = 4ULL << 30;
	CHECK_EQ(dl_inbound_init(&fab), 0);
	CHECK(!dl_fabric_inbound_windowed(&fab));
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 4ULL << 30, 2 * PG, &addr), 0);
	CHECK_EQ(addr, 4ULL << 30);
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 1ULL << 30, PG, &addr),
		 -ERANGE);
	CHECK_EQ(atomic64_read(&fab.inbound_refused), 1);
	CHECK_EQ(dl_fabric_inbound_map(&fab, 0, 0, PG, &addr), -EINVAL);
	CHECK_EQ(dl_fabric_inbound_map(&fab, 3, 0, PG, &addr), -EINVAL);
	dl_fabric_inbound_unmap(&fab, 1, 4ULL << 30, 2 * PG);
	CHECK_EQ(nunmap, 0);

	/* A bounded window of 64 pages per peer. */
	memset(&fab, 0, sizeof(fab));
	fab.ops = &windowed_ops;
	fab.host_id = 0;
	fab.geom.max_hosts = 3;
	fab.inbound_size = 64 * PG;
	CHECK_EQ(dl_inbound_init(&fab), 0);
	CHECK(dl_fabric_inbound_windowed(&fab));
	/* What peers are told: the window's identity. */
	CHECK_EQ(fab.layout.ram_size, 64 * PG);
	CHECK_EQ(fab.layout.ram_low_size, 64 * PG);
	CHECK_EQ(fab.layout.ram_high_base, 64 * PG);
	CHECK_EQ(dl_win_init(&fab.inbound[1], 64 * PG, 4 * PG), 0);
	CHECK_EQ(dl_win_init(&fab.inbound[2], 64 * PG, 4 * PG), 0);

	/* RAM above 4 GiB takes an offset low in the window. */
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 6ULL << 30, 8 * PG, &addr), 0);
	CHECK_EQ(addr, 4 * PG);
	CHECK_EQ(atomic64_read(&fab.inbound_high_bytes), 8 * PG);
	CHECK_EQ(map_off, 4 * PG);
	CHECK_EQ(map_phys, 6ULL << 30);
	CHECK_EQ(map_len, 8 * PG);
	/* Each peer's window is its own. */
	CHECK_EQ(dl_fabric_inbound_map(&fab, 2, 6ULL << 30, 8 * PG, &addr), 0);
	CHECK_EQ(addr, 4 * PG);
	/* Full: refused, counted, the backend not asked. */
	nmap = 0;
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 0, 53 * PG, &addr), -ENOSPC);
	CHECK_EQ(nmap, 0);
	CHECK_EQ(atomic64_read(&fab.inbound_refused), 1);
	/* The backend refuses: the space goes back. */
	map_ret = -EIO;
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 0, 52 * PG, &addr), -EIO);
	CHECK_EQ(fab.inbound[1].used, 12);
	map_ret = 0;
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 0, 52 * PG, &addr), 0);
	CHECK_EQ(addr, 12 * PG);
	/* Given back in parts: the translation goes before the space. */
	dl_fabric_inbound_unmap(&fab, 1, 6 * PG, 2 * PG);
	CHECK_EQ(unmap_off, 6 * PG);
	CHECK_EQ(unmap_len, 2 * PG);
	CHECK_EQ(fab.inbound[1].used, 62);
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 0, 2 * PG, &addr), 0);
	CHECK_EQ(addr, 6 * PG);
	/* Misaligned or foreign: nothing. */
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 1, PG, &addr), -EINVAL);
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 0, PG - 1, &addr), -EINVAL);
	dl_win_destroy(&fab.inbound[1]);
	dl_win_destroy(&fab.inbound[2]);

	/*
	 * A bounded window without translation shows bus addresses one to
	 * one: only for a host whose RAM ends inside it.
	 */
	memset(&fab, 0, sizeof(fab));
	fab.ops = &ram_ops;
	fab.inbound_size = 64 * PG;
	fab.layout.ram_size = 1536ULL << 20;
	fab.layout.ram_low_size = 512 << 20;
	fab.layout.ram_high_base = 4ULL << 30;
	CHECK_EQ(dl_inbound_init(&fab), -ENOSPC);
	fab.layout.ram_size = 32 * PG;
	fab.layout.ram_low_size = 32 * PG;
	CHECK_EQ(dl_inbound_init(&fab), 0);
	CHECK(!dl_fabric_inbound_windowed(&fab));
	CHECK_EQ(fab.layout.ram_size, 64 * PG);
	CHECK_EQ(dl_fabric_inbound_map(&fab, 0, 0, PG, &addr), -EINVAL);
	fab.geom.max_hosts = 2;
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 63 * PG, PG, &addr), 0);
	CHECK_EQ(addr, 63 * PG);
	CHECK_EQ(dl_fabric_inbound_map(&fab, 1, 64 * PG, PG, &addr), -ERANGE);

	/* Not whole pages: no such window. */
	memset(&fab, 0, sizeof(fab));
	fab.ops = &windowed_ops;
	fab.inbound_size = 64 * PG + 1;
	CHECK_EQ(dl_inbound_init(&fab), -EINVAL);
}

static const struct unit_test window_tests[] = {
	{ "allocator: next fit, reserved start, exact frees, refusals when full",
	  test_alloc },
	{ "checks: offsets inside the window; the RAM layout and the window's identity",
	  test_checks },
	{ "inbound map: physical addresses, or per-peer window space the backend translates",
	  test_inbound_map },
};

UNIT_SUITE(window_suite, "fabric/window.c: inbound windows", window_tests);
