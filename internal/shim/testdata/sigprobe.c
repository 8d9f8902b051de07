/* sigprobe: a program that ends by a synchronous signal or SIGPIPE, for
 * TestPreloadSignalsAsWithout: the shim's Go runtime installs handlers for
 * them when it is loaded, and the program must end as it would without it.
 *   sigprobe segv|fpe|bus|pipe [verbs]
 * With "verbs" it first opens the device (the shim starts up). */
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (argc > 2 && !strcmp(argv[2], "verbs")) {
		int n;
		struct ibv_device **l = ibv_get_device_list(&n);
		struct ibv_context *ctx = l && n > 0 ? ibv_open_device(l[0]) : NULL;
		if (!ctx) {
			fprintf(stderr, "sigprobe: no device\n");
			return 2;
		}
	}
	fprintf(stderr, "sigprobe: %s\n", argv[1]);
	if (!strcmp(argv[1], "segv")) {
		volatile int *p = NULL;
		return *p;
	}
	if (!strcmp(argv[1], "fpe")) {
		volatile int zero = 0, one = 1;
		return one / zero;
	}
	if (!strcmp(argv[1], "bus")) {
		char path[] = "/tmp/sigprobe-XXXXXX";
		int fd = mkstemp(path);
		if (fd < 0 || ftruncate(fd, 4096))
			return 2;
		volatile char *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
		unlink(path);
		if (m == MAP_FAILED || ftruncate(fd, 0))
			return 2;
		return m[0];
	}
	if (!strcmp(argv[1], "pipe")) {
		int p[2];
		if (pipe(p))
			return 2;
		close(p[0]);
		return write(p[1], "x", 1) < 0 ? 4 : 5;
	}
	return 2;
}
