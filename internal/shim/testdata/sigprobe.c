/* sigprobe: a program that ends by a synchronous signal or SIGPIPE, for
 * TestPreloadSignalsAsWithout: the shim's Go runtime installs handlers for
 * them when it is loaded, and the program must end as it would without it.
 *   sigprobe segv|fpe|bus|pipe [verbs]
 * With "verbs" it first opens the device (the shim starts up).
 *   sigprobe alarm signal|sigaction|onstack SECONDS
 * For TestPreloadHandlersOffGoStacks: once the device is open, installs a
 * SIGALRM handler (with signal(), as perftest's duration mode does; with
 * sigaction without SA_ONSTACK; or with it), fires it every 100 us for
 * SECONDS while creating and destroying CQs (verbs the shim's core runs in
 * Go), and prints where the handler ran: on the main thread's own stack,
 * on an alternate signal stack, or elsewhere (a Go stack); then the size
 * of the main thread's alternate signal stack (0: none). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static uintptr_t stack_lo, stack_hi;
static volatile sig_atomic_t hits, on_main, on_alt, elsewhere;

static void on_alarm(int sig)
{
	char here;
	stack_t ss;
	(void)sig;
	hits++;
	if (sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK))
		on_alt++;
	else if ((uintptr_t)&here >= stack_lo && (uintptr_t)&here < stack_hi)
		on_main++;
	else
		elsewhere++;
}

/* main_stack finds the main thread's stack in /proc/self/maps */
static int main_stack(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	unsigned long lo, hi;
	while (f && fgets(line, sizeof line, f))
		if (strstr(line, "[stack]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
			stack_lo = lo, stack_hi = hi;
			break;
		}
	if (f)
		fclose(f);
	return stack_hi ? 0 : -1;
}

static int alarms(struct ibv_context *ctx, const char *how, double secs)
{
	if (main_stack())
		return 2;
	if (!strcmp(how, "signal")) {
		if (signal(SIGALRM, on_alarm) == SIG_ERR)
			return 2;
	} else {
		struct sigaction sa = {0};
		sa.sa_handler = on_alarm;
		sa.sa_flags = SA_RESTART | (!strcmp(how, "onstack") ? SA_ONSTACK : 0);
		if (sigaction(SIGALRM, &sa, NULL))
			return 2;
	}
	struct sigaction now;
	if (sigaction(SIGALRM, NULL, &now) || now.sa_handler != on_alarm)
		return 2;
	struct itimerval it = {{0, 100}, {0, 100}}, off = {{0, 0}, {0, 0}};
	struct timespec t0, t;
	long cqs = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	setitimer(ITIMER_REAL, &it, NULL);
	do {
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		if (!cq || ibv_destroy_cq(cq)) {
			fprintf(stderr, "sigprobe: CQ %ld failed\n", cqs);
			return 3;
		}
		cqs++;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	setitimer(ITIMER_REAL, &off, NULL);
	printf("onstack_reported %d cqs_ok %d\n", !!(now.sa_flags & SA_ONSTACK), cqs > 0);
	printf("alarms %d main_stack %d alt_stack %d elsewhere %d\n", (int)hits, (int)on_main, (int)on_alt, (int)elsewhere);
	stack_t ss;
	printf("altstack %ld\n", sigaltstack(NULL, &ss) || (ss.ss_flags & SS_DISABLE) ? 0L : (long)ss.ss_size);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "alarm")) {
		int n;
		struct ibv_device **l = ibv_get_device_list(&n);
		struct ibv_context *ctx = l && n > 0 ? ibv_open_device(l[0]) : NULL;
		if (!ctx || argc < 4) {
			fprintf(stderr, "sigprobe: no device, or usage\n");
			return 2;
		}
		return alarms(ctx, argv[2], atof(argv[3]));
	}
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
