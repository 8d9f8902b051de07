/* dlopen of libibverbs by the program itself. NCCL before 2.30 (its
 * ibvsymbols) opens libibverbs with dlopen("libibverbs.so.1") and resolves
 * every verb with dlvsym on that handle: a lookup on a handle searches
 * that library and its dependencies, never the preloaded shim, so such a
 * program would run unprotected. The front's dlopen answers a request for
 * libibverbs.so* with a handle of the front itself: the same lookups then
 * find the front's verbs first, and libibverbs's own (a dependency of the
 * front) for everything the shim does not interpose.
 *
 * Every other request goes to the real dlopen by a tail jump (the stub
 * below), so that dlopen sees its caller's return address: it searches
 * the caller's DT_RUNPATH and namespace, not the front's. A wrapper in C
 * would call it from the front and break a program that loads its plugins
 * through its own RUNPATH. The front exists for x86-64 and AArch64 only.
 *
 * The hook answers only while the core is loaded and enabled: with
 * IBPATH_DISABLE=1 every dlopen is the real one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "front.h"

/* times a request for libibverbs got the front's handle, and times the
 * library opened was another libibverbs than the front's (passed through,
 * unprotected); handed to the core (link.h), whose first verb logs them */
atomic_long lipf_dlopen_redirected;
atomic_long lipf_dlopen_foreign;

static _Atomic(lip_dlopen_fn) real_dlopen_fn;

lip_dlopen_fn lipf_real_dlopen(void)
{
	lip_dlopen_fn f = atomic_load_explicit(&real_dlopen_fn, memory_order_acquire);
	if (!f) {
		f = (lip_dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
		atomic_store_explicit(&real_dlopen_fn, f, memory_order_release);
	}
	return f;
}

/* lip_env_bool: an on/off variable as internal/shim's boolEnv reads it:
 * 1 on, 0 off, def when unset or empty, -1 for anything else (the Go side
 * then reports it and disables the shim). */
int lip_env_bool(const char *name, int def)
{
	static const char *const on[] = {"1", "on", "yes", "true"};
	static const char *const off[] = {"0", "off", "no", "false"};
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
		if (!strcasecmp(v, on[i]))
			return 1;
		if (!strcasecmp(v, off[i]))
			return 0;
	}
	return -1;
}

/* the hook answers only when IBPATH_DLOPEN is on (the default) and the
 * core is loaded and enabled; a value that does not parse passes through */
static int hook_on(void)
{
	static atomic_int state; /* 0 unknown, 1 on, 2 off */
	int s = atomic_load_explicit(&state, memory_order_relaxed);
	if (!s) {
		int on = lip_env_bool("IBPATH_DLOPEN", 1);
		s = on == 1 ? 1 : 2;
		int unknown = 0;
		if (!atomic_compare_exchange_strong(&state, &unknown, s))
			s = unknown; /* another thread decided (and said) first */
		else if (on < 0)
			fprintf(stderr, "libibpath: IBPATH_DLOPEN=\"%s\": want on or off; the program's dlopen of "
			        "libibverbs passes through\n", getenv("IBPATH_DLOPEN"));
	}
	return s == 1 && lipf_core_enabled();
}

/* a file name whose last component is libibverbs.so or libibverbs.so.* */
static int verbs_name(const char *file)
{
	const char *b = strrchr(file, '/');
	b = b ? b + 1 : file;
	return !strncmp(b, "libibverbs.so", 13) && (b[13] == 0 || b[13] == '.');
}

/* whether handle h is the libibverbs the front's own references bind to */
static int shims_verbs(void *h)
{
	void *mine = dlsym(RTLD_NEXT, "ibv_get_device_list");
	return mine && dlsym(h, "ibv_get_device_list") == mine;
}

static void *dlopen_verbs(const char *file, int flags)
{
	lip_dlopen_fn real = lipf_real_dlopen();
	void *h = real(file, flags);
	if (!h)
		return NULL; /* dlerror() says why, as without the shim */
	Dl_info self;
	void *me = NULL;
	if (shims_verbs(h) && dladdr((void *)dlopen_verbs, &self) && self.dli_fname)
		me = real(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | (flags & (RTLD_GLOBAL | RTLD_NODELETE)));
	if (!me) {
		atomic_fetch_add(&lipf_dlopen_foreign, 1);
		fprintf(stderr, "libibpath: the program opened %s itself, and it is not the libibverbs the shim "
		        "interposes: its verbs do not go through the shim and are not protected\n", file);
		return h;
	}
	atomic_fetch_add(&lipf_dlopen_redirected, 1);
	/* the front depends on that libibverbs: it stays loaded */
	dlclose(h);
	return me;
}

/* a real dlopen that could not be found: fail as dlopen fails */
static void *dlopen_missing(const char *file, int flags)
{
	(void)file;
	(void)flags;
	return NULL;
}

/* lip_dlopen_route: where the stub jumps with dlopen's own arguments */
LIPF_HIDDEN void *lip_dlopen_route(const char *file, int flags);
void *lip_dlopen_route(const char *file, int flags)
{
	(void)flags;
	lip_dlopen_fn real = lipf_real_dlopen();
	if (!real)
		return (void *)dlopen_missing;
	if (file && verbs_name(file) && hook_on())
		return (void *)dlopen_verbs;
	return (void *)real;
}

#if defined(__x86_64__)
/* dlopen: keep the two arguments, ask the route, jump there with them and
 * with the caller's return address still on the stack */
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, @function\n"
        "dlopen:\n"
        "	.cfi_startproc\n"
        "	endbr64\n"
        "	push %rdi\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	push %rsi\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	sub $8, %rsp\n"
        "	.cfi_adjust_cfa_offset 8\n"
        "	call lip_dlopen_route\n"
        "	add $8, %rsp\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	pop %rsi\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	pop %rdi\n"
        "	.cfi_adjust_cfa_offset -8\n"
        "	jmp *%rax\n"
        "	.cfi_endproc\n"
        ".size dlopen, .-dlopen\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, %function\n"
        "dlopen:\n"
        "	.cfi_startproc\n"
        "	hint #34\n" /* bti c */
        "	stp x29, x30, [sp, #-32]!\n"
        "	.cfi_def_cfa_offset 32\n"
        "	.cfi_offset 29, -32\n"
        "	.cfi_offset 30, -24\n"
        "	mov x29, sp\n"
        "	stp x0, x1, [sp, #16]\n"
        "	bl lip_dlopen_route\n"
        "	mov x16, x0\n"
        "	ldp x0, x1, [sp, #16]\n"
        "	ldp x29, x30, [sp], #32\n"
        "	.cfi_restore 29\n"
        "	.cfi_restore 30\n"
        "	.cfi_def_cfa_offset 0\n"
        "	br x16\n"
        "	.cfi_endproc\n"
        ".size dlopen, .-dlopen\n");
#endif
