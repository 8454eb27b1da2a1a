// SPDX-License-Identifier: GPL-2.0
/*
 * The unit test runner: runs every test of every suite, prints one line
 * per test (and one per failed check), and last "N passed, N failed".
 * Exits 1 if a test failed. Set UNIT_VERBOSE=1 to see what the kernel
 * code logs.
 */
#include <stdarg.h>
#include <stdio.h>

#include "unit.h"

static unsigned int fails_in_test;

void unit_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fails_in_test++;
	printf("    %s:%d: check failed: ", file, line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

extern const struct unit_suite lender_msg_suite;

static const struct unit_suite *const suites[] = {
	&lender_cfg_suite,
	&ring_suite,
	&borrower_dma_suite,
	&borrower_config_suite,
	&lender_msg_suite,
	&cfg_model_suite,
	&window_suite,
	&lender_p2p_suite,
	&lender_group_suite,
	&mig_rules_suite,
};

int main(void)
{
	unsigned int passed = 0, failed = 0;
	size_t s, t;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (s = 0; s < ARRAY_SIZE(suites); s++) {
		printf("%s\n", suites[s]->name);
		for (t = 0; t < suites[s]->ntests; t++) {
			const struct unit_test *test = &suites[s]->tests[t];

			fails_in_test = 0;
			test->fn();
			printf("  %-4s %s\n", fails_in_test ? "FAIL" : "ok",
			       test->name);
			if (fails_in_test)
				failed++;
			else
				passed++;
		}
	}
	printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
