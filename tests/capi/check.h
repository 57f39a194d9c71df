// check.h — the C tests' assertions (test_capi.c, test_remote.c): CHECK
// prints the failed condition, the message and hcomm_last_error(), counts a
// failure and returns from the test function; CHECK_RC compares a return
// code with the one expected, naming both.
#ifndef HCOMM_TEST_CHECK_H
#define HCOMM_TEST_CHECK_H

#include <stdio.h>

#include "hcomm.h"

static int failures;

#define CHECK(cond, ...)                                                           \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                              \
			fprintf(stderr, " [last error: %s]\n", hcomm_last_error()); \
			failures++;                                                \
			return;                                                    \
		}                                                                  \
	} while (0)

#define CHECK_RC(call, want)                                                              \
	do {                                                                              \
		int rc_ = (call);                                                         \
		CHECK(rc_ == (want), "got %d (%s), want %d (%s)", rc_, hcomm_strerror(rc_), \
		      (want), hcomm_strerror(want));                                      \
	} while (0)

#endif
