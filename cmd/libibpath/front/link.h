/* The contract between libibpath.so, the front (this directory, C only),
 * and libibpath-core.so, the shim itself (cmd/libibpath, Go and C). The
 * front is what a program preloads: with IBPATH_DISABLE=1 it loads
 * nothing more, and every verb it exports goes straight to libibverbs;
 * otherwise it opens the core next to it (RTLD_LOCAL), hands it a struct
 * lip_front, and sends every exported verb to the core's definition. */
#ifndef LIP_FRONT_LINK_H
#define LIP_FRONT_LINK_H

#include <stdatomic.h>

/* LIP_FRONT_ABI changes whenever struct lip_front or the core's
 * lip_front_attach change: a front and a core of different builds that
 * disagree on it do not work together (the front passes through). */
#define LIP_FRONT_ABI 1

/* the core file's name, in the front's directory */
#define LIP_CORE_FILE "libibpath-core.so"

struct lip_front {
	int abi; /* LIP_FRONT_ABI */
	/* next: the definition of name@version in the libraries after the
	 * front (libibverbs's, librdmacm's), or NULL. The core is loaded
	 * RTLD_LOCAL, where dlvsym(RTLD_NEXT) would search the front's
	 * scope, not the program's: it asks the front. */
	void *(*next)(const char *name, const char *version);
	/* the front's dlopen hook (front/dlopen.c): 1 where it is built
	 * (x86-64, AArch64); times a program's dlopen of libibverbs got the
	 * front's handle, and times it opened another libibverbs */
	int dlopen_hooked;
	atomic_long *dlopen_redirected;
	atomic_long *dlopen_foreign;
};

/* lip_front_attach (the core's, interpose.c): called once by the front
 * right after it loaded the core, before any verb reaches the core.
 * Returns 0 and sets *enabled to the core's pass-through flag (0 once the
 * core disabled itself), or -1 when abi differs from the core's. */
typedef int (*lip_front_attach_fn)(const struct lip_front *f, const int **enabled);

#endif
