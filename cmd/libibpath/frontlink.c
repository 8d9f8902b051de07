/* The core's side of front/link.h: the front that loaded the core hands
 * it the way to libibverbs's own definitions and its dlopen counts. A
 * core preloaded itself (machines without the front) has no front: it
 * finds the next definitions with dlvsym(RTLD_NEXT), and dlopen is not
 * interposed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include "shim.h"
#include "front/link.h"

static const struct lip_front *front;

int lip_front_attach(const struct lip_front *f, const int **enabled)
{
	if (!f || f->abi != LIP_FRONT_ABI || !f->next || !enabled)
		return -1;
	front = f;
	*enabled = &lip_enabled;
	return 0;
}

/* RTLD_NEXT searches after the object of dlvsym's caller: never a tail
 * call (the barrier keeps f live after the call) */
void *lip_next(const char *name, const char *version)
{
	if (front)
		return front->next(name, version);
	void *f = dlvsym(RTLD_NEXT, name, version);
	__asm__ volatile("" : : "r"(f) : "memory");
	return f;
}

int lip_front_dlopen(long *redirected, long *foreign)
{
	if (!front)
		return -1;
	*redirected = atomic_load(front->dlopen_redirected);
	*foreign = atomic_load(front->dlopen_foreign);
	return front->dlopen_hooked;
}
