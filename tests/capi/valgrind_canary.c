// A deliberately wrong program that loads libhcomm.so: tests/capi/run.sh
// checks that valgrind, with hcomm's suppressions, still reports its leak
// and its invalid read (the suppressions cover the Go runtime only).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcomm.h"

static char *volatile sink; // keeps the compiler from removing the leaked malloc

int main(void) {
	hcomm_handle_t h;
	hcomm_config_t cfg = {.mem_pool_size = 16 << 20};
	if (hcomm_init(&h, &cfg) != HCOMM_OK) {
		return 1;
	}
	sink = malloc(100);
	strcpy(sink, "never freed");
	char *small = malloc(8);
	memset(small, 1, 8);
	volatile int past = 8; // one past the end, hidden from the compiler
	volatile char c = small[past];
	(void)c;
	free(small);
	sink = NULL; // the only pointer to the 100 bytes: now lost
	int rc = hcomm_finalize(h);
	printf("canary done: %s\n", hcomm_strerror(rc));
	return 0;
}
