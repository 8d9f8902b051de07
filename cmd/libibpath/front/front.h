/* What the front's files (front.c, dlopen.c, signals.c, stubs.c) share. */
#ifndef LIP_FRONT_H
#define LIP_FRONT_H

#include <stdatomic.h>

#define LIPF_HIDDEN __attribute__((visibility("hidden")))

typedef void *(*lip_dlopen_fn)(const char *, int);

/* front.c */
LIPF_HIDDEN void lipf_init(void);
/* lipf_core_enabled: the core is loaded and has not disabled itself */
LIPF_HIDDEN int lipf_core_enabled(void);
/* lipf_next: name's definition after the front, at version (NULL: the
 * default one) */
LIPF_HIDDEN void *lipf_next(const char *name, const char *version);
LIPF_HIDDEN void *lipf_resolve(void **slot);

/* dlopen.c */
#if defined(__x86_64__) || defined(__aarch64__)
#define LIPF_DLOPEN_HOOKED 1
#else
#define LIPF_DLOPEN_HOOKED 0
#endif
LIPF_HIDDEN lip_dlopen_fn lipf_real_dlopen(void);
LIPF_HIDDEN int lip_env_bool(const char *name, int def);
LIPF_HIDDEN extern atomic_long lipf_dlopen_redirected;
LIPF_HIDDEN extern atomic_long lipf_dlopen_foreign;

/* signals.c: looks up the real signal functions; with core_loaded, the
 * handlers the program installs from then on get SA_ONSTACK */
LIPF_HIDDEN void lipf_signals_init(int core_loaded);
/* lipf_signals_altstack: an alternate signal stack of the front's for the
 * calling thread, if it has none (before the core loads) */
LIPF_HIDDEN void lipf_signals_altstack(void);

#endif
