// C++ smoke test: hcomm.h compiles as C++ (extern "C") with -Wall -Werror and
// one host→device transfer goes through. Run by tests/capi/run.sh when a C++
// compiler is installed.
#include "hcomm.h"
#include <cstdio>
int main() {
	hcomm_handle_t h;
	hcomm_config_t cfg{};
	cfg.mem_pool_size = 16 << 20;
	int rc = hcomm_init(&h, &cfg);
	if (rc != HCOMM_OK) { std::printf("%s\n", hcomm_strerror(rc)); return 1; }
	void *p = hcomm_alloc_host_mem(h, 64);
	hcomm_transfer_t t{};
	t.src_ptr = p; t.dst_ptr = hcomm_alloc_dev_mem(h, 64); t.size = 64;
	rc = hcomm_submit_transfer(h, &t);
	if (rc == HCOMM_OK) rc = hcomm_wait_completion(h, t.id);
	std::printf("c++: %s\n", hcomm_strerror(rc));
	return hcomm_finalize(h) == HCOMM_OK && rc == HCOMM_OK ? 0 : 1;
}
