/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A tiny test framework: each test file has a table of tests (a suite);
 * CHECK*() record a failure with its place and values and let the test go
 * on; a test passes if no check in it failed.
 */
#ifndef UNIT_H
#define UNIT_H

#include "kshim.h"	/* __printf(), ARRAY_SIZE() for main.c */

struct unit_test {
	const char *name;
	void (*fn)(void);
};

struct unit_suite {
	const char *name;
	const struct unit_test *tests;
	size_t ntests;
};

__printf(3, 4)
void unit_fail(const char *file, int line, const char *fmt, ...);

#define CHECK(cond) \
	do { \
		if (!(cond)) \
			unit_fail(__FILE__, __LINE__, "%s", #cond); \
	} while (0)

/* Integers of any type, compared as 64-bit values and shown both ways. */
#define CHECK_EQ(got, want) \
	do { \
		unsigned long long _g = (unsigned long long)(got); \
		unsigned long long _w = (unsigned long long)(want); \
		if (_g != _w) \
			unit_fail(__FILE__, __LINE__, \
				  "%s == %s: got %lld (0x%llx), want %lld (0x%llx)", \
				  #got, #want, (long long)_g, _g, \
				  (long long)_w, _w); \
	} while (0)

#define UNIT_SUITE(var, title, table) \
	const struct unit_suite var = { title, table, \
					sizeof(table) / sizeof((table)[0]) }

extern const struct unit_suite lender_cfg_suite;
extern const struct unit_suite ring_suite;
extern const struct unit_suite borrower_dma_suite;
extern const struct unit_suite borrower_config_suite;
extern const struct unit_suite cfg_model_suite;
extern const struct unit_suite window_suite;
extern const struct unit_suite lender_p2p_suite;
extern const struct unit_suite lender_group_suite;
extern const struct unit_suite mig_rules_suite;

#endif /* UNIT_H */
