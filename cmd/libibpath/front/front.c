/* libibpath.so, the front: what a program preloads (or NCCL_IBVERBS_LIB
 * names). It holds no Go. At load (or at the first exported verb, if a
 * library's constructor calls one before the front's own constructor
 * ran) it decides where each exported verb goes:
 *   - IBPATH_DISABLE=1: to libibverbs (or librdmacm) directly; the core
 *     is never loaded, so the program gets no Go runtime, no thread and
 *     no signal handler of the shim's; the banner says so at the first
 *     device opened;
 *   - otherwise: to the core, libibpath-core.so in the front's own
 *     directory, opened RTLD_LOCAL (its symbols stay out of the program's
 *     scope) and handed a struct lip_front (link.h). A core that cannot
 *     be loaded, or of another build, leaves every verb going to
 *     libibverbs, and says so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "front.h"
#include "link.h"
#include "verbs.h"

#ifndef LIPF_VERSION
#define LIPF_VERSION "dev"
#endif

#define SLOT(name, version, failure) extern void *lipf_slot_##name;
LIPF_VERBS(SLOT)

/* a definition that could not be found fails the call as the core would */
static void *fail_NULL_ENOSYS(void)
{
	errno = ENOSYS;
	return NULL;
}

static void *fail_NULL_EOPNOTSUPP(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

static int fail_NEG(void)
{
	errno = ENOSYS;
	return -1;
}

static int fail_ERRNO(void)
{
	errno = ENOSYS;
	return ENOSYS;
}

static void fail_VOID(void)
{
}

struct verb {
	const char *name, *version;
	void **slot;
	void *fail;
};

#define VERB(name, version, failure) {#name, version, &lipf_slot_##name, (void *)fail_##failure},
static const struct verb verbs[] = {LIPF_VERBS(VERB)};
#define NVERBS (sizeof verbs / sizeof verbs[0])

/* RTLD_NEXT searches after the object of dlvsym's caller: never a tail
 * call here, or the caller would be the core (the barrier keeps f live
 * after the call) */
void *lipf_next(const char *name, const char *version)
{
	void *f = version ? dlvsym(RTLD_NEXT, name, version) : dlsym(RTLD_NEXT, name);
	__asm__ volatile("" : : "r"(f) : "memory");
	return f;
}

/* a verb's definition after the front, or its failure */
static void *next_or_fail(const struct verb *v)
{
	void *f = lipf_next(v->name, v->version);
	return f ? f : v->fail;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread int initing; /* this thread runs init: it loads the core */
static const int *core_enabled;
static void *real_open_device;

/* ibv_open_device with IBPATH_DISABLE=1: the banner, once, then libibverbs */
static void *disabled_open_device(void *dev)
{
	static atomic_int said;
	if (!atomic_exchange(&said, 1))
		fprintf(stderr, "libibpath: loaded in pid %d, version %s, disabled by IBPATH_DISABLE: every verb passes "
		        "straight through (the shim's core is not loaded)\n", (int)getpid(), LIPF_VERSION);
	return ((void *(*)(void *))real_open_device)(dev);
}

static void fill_next(void)
{
	for (size_t i = 0; i < NVERBS; i++)
		__atomic_store_n(verbs[i].slot, next_or_fail(&verbs[i]), __ATOMIC_RELEASE);
}

/* the core's file: LIP_CORE_FILE in the front's directory */
static int core_path(char *path, size_t size)
{
	Dl_info self;
	if (!dladdr((void *)core_path, &self) || !self.dli_fname)
		return -1;
	const char *slash = strrchr(self.dli_fname, '/');
	size_t dir = slash ? (size_t)(slash - self.dli_fname) + 1 : 0;
	if (dir + sizeof LIP_CORE_FILE > size)
		return -1;
	memcpy(path, self.dli_fname, dir);
	memcpy(path + dir, LIP_CORE_FILE, sizeof LIP_CORE_FILE);
	return 0;
}

static void init(void)
{
	initing = 1;
	if (lip_env_bool("IBPATH_DISABLE", 0) == 1) {
		fill_next();
		real_open_device = lipf_slot_ibv_open_device;
		__atomic_store_n(&lipf_slot_ibv_open_device, (void *)disabled_open_device, __ATOMIC_RELEASE);
		lipf_signals_init(0);
		initing = 0;
		return;
	}
	char path[4096];
	void *core = NULL;
	lip_dlopen_fn open = lipf_real_dlopen();
	lipf_signals_altstack();
	if (core_path(path, sizeof path))
		fprintf(stderr, "libibpath: cannot tell the front's own directory (dladdr); the shim's core is not "
		        "loaded and every verb passes straight through, unprotected\n");
	else if (!open || !(core = open(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)))
		fprintf(stderr, "libibpath: dlopen %s: %s; every verb passes straight through, unprotected\n", path,
		        open ? dlerror() : "no dlopen found");
	int go_loaded = core != NULL; /* a Go runtime in the process from here on, attached or not */
	static const struct lip_front link = {LIP_FRONT_ABI, lipf_next, LIPF_DLOPEN_HOOKED, &lipf_dlopen_redirected,
	                                      &lipf_dlopen_foreign};
	lip_front_attach_fn attach = core ? (lip_front_attach_fn)dlsym(core, "lip_front_attach") : NULL;
	const int *enabled = NULL;
	if (core && (!attach || attach(&link, &enabled))) {
		fprintf(stderr, "libibpath: %s is of another build than the front %s (version %s); every verb passes "
		        "straight through, unprotected\n", path, LIP_CORE_FILE, LIPF_VERSION);
		core = NULL;
	}
	lipf_signals_init(go_loaded);
	if (!core) {
		fill_next();
		initing = 0;
		return;
	}
	core_enabled = enabled;
	/* dlsym, not dlvsym: a core linked without the version script has no
	 * IBVERBS_1.1, and dlvsym would go on to libibverbs, a dependency of
	 * the core; what dlsym finds must be the core's own */
	Dl_info in_core, found;
	int base = dladdr((void *)attach, &in_core);
	for (size_t i = 0; i < NVERBS; i++) {
		const struct verb *v = &verbs[i];
		void *f = dlsym(core, v->name);
		if (f && (!base || !dladdr(f, &found) || found.dli_fbase != in_core.dli_fbase))
			f = NULL;
		if (!f)
			fprintf(stderr, "libibpath: %s has no %s: that verb passes straight through\n", path, v->name);
		__atomic_store_n(v->slot, f ? f : next_or_fail(v), __ATOMIC_RELEASE);
	}
	initing = 0;
}

void lipf_init(void)
{
	if (!initing)
		pthread_once(&once, init);
}

int lipf_core_enabled(void)
{
	lipf_init();
	const int *e = core_enabled;
	return e && __atomic_load_n(e, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void front_load(void)
{
	lipf_init();
}

/* lipf_resolve: where lipf_slow (stubs.c) jumps for a stub whose slot was
 * empty. On the thread that is loading the core (a verb called while the
 * core loads) it is libibverbs's definition, without waiting for itself. */
void *lipf_resolve(void **slot)
{
	lipf_init();
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (f)
		return f;
	for (size_t i = 0; i < NVERBS; i++)
		if (verbs[i].slot == slot)
			return next_or_fail(&verbs[i]);
	return (void *)fail_NEG; /* not reached: every stub has its slot */
}
